"""Runs: the hold at the start, the settlement at the end (exactly once each), and their rows."""

from __future__ import annotations

import time
from typing import Any

from slurm_yolo.core.billing import policy
from slurm_yolo.core.errors import UsageError
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.clusters import Clusters
from slurm_yolo.state.ledger.outbox import Outbox
from slurm_yolo.state.ledger.values import (
    REDACTED,
    Run,
    Settlement,
    _of,
)


class Runs(Clusters, Outbox):
    """Runs: the hold at the start, the settlement at the end (exactly once each), and their rows."""

    def hold(self, run: Run, amount: int, estimate: int | None, actor: str) -> tuple[bool, bool | None]:
        """Hold ``amount`` for this run unless it is held already: (held now, new blocked state)."""
        now = time.time()

        def body() -> Any:
            if self.conn.execute("SELECT 1 FROM jobs WHERE job_key = ?", (run.key,)).fetchone():
                return False, None
            self._refill(run.account, now)
            self._join(run.cluster, now)
            self._insert_run(run, amount, estimate, now, actor)
            self.conn.execute(  # no longer pending: what admission elsewhere counted for it is in the hold now
                "UPDATE commitments SET tokens = CASE WHEN tokens > ? THEN tokens - ? ELSE 0 END"
                " WHERE cluster = ? AND account = ?",
                (amount, amount, run.cluster, run.account),
            )
            self._move(
                run.account,
                "hold",
                amount,
                now,
                actor,
                job_key=run.key,
                user=run.user,
                reason=f"{run.hold_seconds}s x {run.gpus} GPU x {run.price} tok/GPU-s x {policy.rate_text(run.rate_ppm)}",
            )
            return True, self._update_block(run.account)

        return self._atomic(body)

    def _insert_run(self, run: Run, amount: int, estimate: int | None, now: float, actor: str) -> None:
        self.conn.execute(
            "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, `partition`, qos, gpus,"
            " gpus_num, gpus_den, price, rate, rate_ppm, time_limit, hold_seconds, estimate, hold, held_at, held_by)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.key,
                run.cluster,
                run.job_id,
                run.submit,
                run.restart,
                run.account,
                run.user,
                run.partition,
                run.qos,
                float(run.gpus),
                run.gpus.numerator,
                run.gpus.denominator,
                run.price,
                run.rate_ppm / policy.RATE_SCALE,
                run.rate_ppm,
                run.time_limit,
                run.hold_seconds,
                estimate,
                amount,
                now,
                actor,
            ),
        )

    def run(self, key: str) -> store.Row | None:
        return self.conn.execute("SELECT * FROM jobs WHERE job_key = ?", (key,)).fetchone()

    def held_runs(self, cluster: str, job_id: int) -> list[store.Row]:
        """The job's runs still holding tokens."""
        return self.conn.execute(
            "SELECT * FROM jobs WHERE cluster = ? AND job_id = ? AND state = 'held'", (cluster, job_id)
        ).fetchall()

    def held_jobs(self) -> list[tuple[str, int]]:
        """(cluster, job id) of every run holding tokens now."""
        return [
            (r["cluster"], r["job_id"])
            for r in self.conn.execute("SELECT DISTINCT cluster, job_id FROM jobs WHERE state = 'held'")
        ]

    def stale_holds(self, older_than: float, cluster: str | None = None) -> list[store.Row]:
        """Runs (of ``cluster``; None: of every cluster) held since before ``older_than`` (epoch
        seconds) and still not settled."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM jobs WHERE state = 'held' AND held_at < ? {of} ORDER BY held_at", (older_than, *args)
        ).fetchall()

    def release(self, key: str, charge: int, actor: str, reason: str) -> Settlement:
        """An admin's end for a hold that Slurm's records can no longer settle (purged from sacct, a
        run sacct never showed): charge ``charge`` (0: release it all), refund the rest, with why."""
        if not reason.strip():
            raise UsageError("a release needs a --reason (it stays with the movements)")
        row = self.run(key)
        if row is None:
            raise UsageError(f"no run {key!r} in the ledger (ledger audit lists the open holds)")
        if row["state"] != "held":
            raise UsageError(f"run {key} is settled already ({row['end_state']}, charged {row['charge']})")
        if not 0 <= charge <= row["hold"]:
            raise UsageError(f"a release charges between 0 and the run's hold ({row['hold']}), not {charge}")
        done = self.settle(key, charge, "RELEASED", 0, actor, reason=f"released: {reason.strip()}")
        if done is None:  # settled meanwhile (its epilog, the settler)
            raise UsageError(f"run {key} was settled meanwhile")
        return done

    def settle(
        self, key: str, charge: int, end_state: str, elapsed: int, actor: str, reason: str = ""
    ) -> Settlement | None:
        """Charge ``charge`` and refund the rest of the hold, once; None if already settled. A charge
        past the hold (a run that outlived its limit) takes the rest from the balance ("overrun").
        ``reason``: kept with the movements (default: the end state)."""
        now = time.time()
        charge = max(0, charge)

        def body() -> Any:
            row = self.conn.execute("SELECT * FROM jobs WHERE job_key = ?", (key,)).fetchone()
            if row is None or row["state"] != "held":
                return None
            from_hold = min(charge, row["hold"])
            refund = row["hold"] - from_hold
            who = {"job_key": key, "user": row["user"], "reason": reason or end_state}
            self._move(row["account"], "charge", from_hold, now, actor, **who)
            self._move(row["account"], "refund", refund, now, actor, **who)
            if charge > from_hold:
                self._move(row["account"], "overrun", charge - from_hold, now, actor, **who)
            self.conn.execute(
                "UPDATE jobs SET state = 'settled', charge = ?, refund = ?, end_state = ?, elapsed = ?, settled_at = ?,"
                " settled_by = ? WHERE job_key = ?",
                (charge, refund, end_state, elapsed, now, actor, key),
            )
            self.conn.execute(
                "UPDATE incidents SET resolved_at = ? WHERE resolved_at IS NULL AND cluster IN (?, '') AND job_id = ?",
                (now, row["cluster"], row["job_id"]),
            )
            self._queue_comment(row["cluster"], row["job_id"], now)
            blocked = self._update_block(row["account"])
            balance = self.conn.execute("SELECT balance FROM accounts WHERE name = ?", (row["account"],)).fetchone()[0]
            return Settlement(key, row["account"], row["hold"], charge, refund, balance, blocked)

        return self._atomic(body)

    def job_movements(self, job_id: int, cluster: str | None = None) -> list[store.Row]:
        """The movements of the job's runs (on ``cluster``; None: on any cluster that shares this
        ledger, where another cluster's job of the same number is another job)."""
        where, args = ("AND j.cluster = ?", (cluster,)) if cluster is not None else ("", ())
        return self.conn.execute(
            f"SELECT m.* FROM movements m JOIN jobs j ON m.job_key = j.job_key WHERE j.job_id = ? {where} ORDER BY m.id",
            (job_id, *args),
        ).fetchall()

    def hides_jobs(self) -> bool:
        """A published copy that Slurm's PrivateData left without job rows (``redact_jobs``)."""
        if not isinstance(self.conn, store.SqliteStore):
            return False
        found = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (REDACTED,))
        return bool(found.fetchall())

    def runs(self, job_id: int, cluster: str | None = None) -> list[store.Row]:
        """The job's runs (on ``cluster``; None: on any cluster that shares this ledger)."""
        where, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM jobs WHERE job_id = ? {where} ORDER BY held_at", (job_id, *args)
        ).fetchall()
