"""What reports, alerts and the audit ask of the books, and the invariant ``check`` proves."""

from __future__ import annotations

from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.accounts import Accounts
from slurm_yolo.state.ledger.values import (
    KINDS,
    _of,
)


class Queries(Accounts):
    """What reports, alerts and the audit ask of the books, and the invariant ``check`` proves."""

    def held_between(self, since: float, before: float, cluster: str | None = None) -> list[store.Row]:
        """(job_key, job_id) of the runs (of ``cluster``; None: of every cluster) held in [since, before)."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT job_key, job_id FROM jobs WHERE held_at >= ? AND held_at < ? {of}", (since, before, *args)
        ).fetchall()

    def last_charges(self) -> dict[str, float]:
        """When each account was last charged."""
        rows = self.conn.execute("SELECT account, max(at) FROM movements WHERE kind = 'charge' GROUP BY account")
        return {r[0]: float(r[1]) for r in rows}

    def billed_runs(self) -> list[store.Row]:
        """Every run's job id, submit time, what it was held and billed at, and its estimate (reports)."""
        return self.conn.execute(
            "SELECT job_id, submit_time, hold, charge, refund, price, estimate FROM jobs"
        ).fetchall()

    def charged_since(self, since: float) -> dict[str, int]:
        """Per account, what was charged (overruns included) since ``since``."""
        rows = self.conn.execute(
            "SELECT account, sum(amount) FROM movements WHERE kind IN ('charge', 'overrun') AND at >= ?"
            " GROUP BY account",
            (since,),
        )
        return {r[0]: int(r[1]) for r in rows}

    def settled_since(self, since: float) -> list[store.Row]:
        """(account, partition, gpus, elapsed) of the runs settled since ``since``: GPU-hours, and so
        money at each partition's cost_per_gpu_hour, per account (``alerts``)."""
        return self.conn.execute(
            "SELECT account, `partition`, gpus, elapsed FROM jobs WHERE state = 'settled' AND settled_at >= ?",
            (since,),
        ).fetchall()

    def first_movements(self) -> dict[str, float]:
        """Per account, when its first movement was: how long it has had a budget at all."""
        rows = self.conn.execute("SELECT account, min(at) FROM movements GROUP BY account")
        return {r[0]: float(r[1]) for r in rows}

    def movements_since(self, since: float, accounts: list[str]) -> list[store.Row]:
        """(account, at, kind, amount) of the accounts' movements since ``since``."""
        marks = ",".join("?" * len(accounts))
        return self.conn.execute(
            f"SELECT account, at, kind, amount FROM movements WHERE at >= ? AND account IN ({marks})",
            (since, *accounts),
        ).fetchall()

    def check(self) -> list[str]:
        """Every violation of the ledger's invariants (empty: the books balance, to the token), read
        from one moment of them: on a ledger other controllers and clusters write meanwhile, a hold
        committed between two of its reads would otherwise read as a difference."""
        with self.conn.consistent():
            return self._check()

    def _check(self) -> list[str]:
        problems = []
        sums = {
            (r["account"], r["kind"]): r["total"]
            for r in self.conn.execute(
                "SELECT account, kind, sum(amount) AS total FROM movements GROUP BY account, kind"
            )
        }
        for a in self.accounts():
            name = a["name"]
            s = {k: sums.get((name, k), 0) for k in KINDS}
            credited = s["deposit"] + s["refill"] + s["adjustment"]
            expect = {
                "credited": credited,
                "balance": credited - s["hold"] + s["refund"] - s["expiry"] - s["overrun"],
                "held": s["hold"] - s["charge"] - s["refund"],
                "charged": s["charge"] + s["overrun"],
                "expired": s["expiry"],
            }
            for col, value in expect.items():
                if a[col] != value:
                    problems.append(f"{name}: {col} is {a[col]}, movements say {value}")
            if a["credited"] != a["balance"] + a["held"] + a["charged"] + a["expired"]:
                problems.append(f"{name}: credited != balance + held + charged + expired")
            open_holds = self.conn.execute(
                "SELECT coalesce(sum(hold), 0) FROM jobs WHERE account = ? AND state = 'held'", (name,)
            ).fetchone()[0]
            if open_holds != a["held"]:
                problems.append(f"{name}: held is {a['held']}, open job holds sum to {open_holds}")
        for r in self.conn.execute(
            "SELECT job_key, count(*) AS n FROM movements WHERE kind IN ('charge', 'hold', 'overrun')"
            " GROUP BY job_key, kind HAVING n > 1"
        ):
            problems.append(f"job {r['job_key']}: moved more than once")
        return problems
