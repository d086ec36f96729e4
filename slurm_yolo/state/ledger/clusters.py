"""Several clusters on one ledger: admissions across them, their pending commitments, and each
cluster's site limits kept while the ledger enforces its own."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from slurm_yolo.core.billing import bucket
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.base import LedgerBase
from slurm_yolo.state.ledger.values import (
    Admission,
    _of,
)


class Clusters(LedgerBase):
    """Several clusters on one ledger: admissions across them, their pending commitments, and each"""

    def admit(
        self, cluster: str, account: str, need: int, committed: dict[str, int], max_wait: float = 0.0
    ) -> Admission:
        """Admission on a ledger several clusters share, in one turn with every other cluster's: the
        job (worst case ``need``) fits when the account's balance covers what ``cluster`` commits to it
        (``committed``: its pending GPU jobs per account, as its job_submit.lua counts them), what the
        other clusters committed at their last admission, and ``need``; or, when the account's refill
        covers all that within ``max_wait`` seconds, it waits that long (``Admission.wait``). This
        cluster's commitments are replaced by ``committed`` (and ``need`` when admitted or waiting):
        what the next admission anywhere sees. Stale only upward (a job started since is counted until
        its cluster's next admission, a hold takes its amount off at once): never generous."""
        now = time.time()

        def body() -> Admission:
            self.conn.execute("DELETE FROM commitments WHERE cluster = ?", (cluster,))
            mine = dict(committed)
            balance, capacity, rate = 0, 0, 0  # an account without a ledger entry has nothing to spend
            if self.conn.execute("SELECT 1 FROM accounts WHERE name = ?", (account,)).fetchone() is not None:
                self._refill(account, now)
                row = self._account(account, now)
                balance, capacity, rate = row["balance"], row["capacity"], row["rate_per_day"]
            elsewhere = self.conn.execute(
                "SELECT coalesce(sum(tokens), 0) FROM commitments WHERE account = ? AND cluster <> ?",
                (account, cluster),
            ).fetchone()[0]
            total = need + mine.get(account, 0) + elsewhere
            ok = total <= balance
            wait = None if ok or max_wait <= 0 else bucket.seconds_to_cover(total, balance, capacity, rate)
            waits = wait is not None and wait <= max_wait
            if ok or waits:
                mine[account] = mine.get(account, 0) + need
            for name, tokens in mine.items():
                if tokens > 0:
                    self.conn.execute(
                        "INSERT INTO commitments (cluster, account, tokens, counted_at) VALUES (?, ?, ?, ?)",
                        (cluster, name, tokens, now),
                    )
            return Admission(
                ok, int(balance), committed.get(account, 0), int(elsewhere), float(wait or 0) if waits else 0.0
            )

        return self._atomic(body)

    def commitments(self, cluster: str | None = None) -> list[store.Row]:
        """What each cluster's (or ``cluster``'s) pending GPU jobs may still hold, per account (``admit``)."""
        where, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM commitments WHERE tokens > 0 {where} ORDER BY cluster, account", args
        ).fetchall()

    def forget_commitments(self, cluster: str, accounts: Iterable[str], counted_before: float) -> None:
        """``cluster`` has no job of these accounts pending any more: what its last admission counted
        for them (before ``counted_before``) is gone, and admission elsewhere stops counting it."""
        names = sorted(set(accounts))

        def body() -> None:
            for name in names:
                self.conn.execute(
                    "DELETE FROM commitments WHERE cluster = ? AND account = ? AND counted_at < ?",
                    (cluster, name, counted_before),
                )

        if names:
            self._atomic(body)

    def _join(self, cluster: str, now: float) -> float:
        row = self.conn.execute("SELECT joined_at FROM clusters WHERE name = ?", (cluster,)).fetchone()
        if row is not None:
            return float(row["joined_at"])
        self.conn.execute("INSERT INTO clusters (name, joined_at) VALUES (?, ?)", (cluster, now))
        return now

    def join(self, cluster: str) -> float:
        """Since when this ledger keeps ``cluster``'s runs, from now on if it did not yet (its hookd's
        start, its first hold or reconcile): runs that started before were billed elsewhere, if at all."""
        return self._atomic(lambda: self._join(cluster, time.time()))

    def clusters(self) -> list[str]:
        """The clusters whose runs this ledger keeps (``join``)."""
        return [str(r["name"]) for r in self.conn.execute("SELECT name FROM clusters ORDER BY name")]

    def joined_at(self, cluster: str) -> float | None:
        """Since when this ledger keeps ``cluster``'s runs (None: not yet)."""
        row = self.conn.execute("SELECT joined_at FROM clusters WHERE name = ?", (cluster,)).fetchone()
        return float(row["joined_at"]) if row else None

    def site_limits(self, cluster: str) -> dict[str, str]:
        """The kept GrpTRESRunMins (sacctmgr's text) of each account blocked on ``cluster``."""
        rows = self.conn.execute("SELECT account, grp_tres_run_mins FROM site_limits WHERE cluster = ?", (cluster,))
        return {r["account"]: r["grp_tres_run_mins"] for r in rows}

    def keep_site_limits(self, cluster: str, account: str, grp_tres_run_mins: str) -> None:
        def body() -> Any:
            self.conn.execute(
                "INSERT INTO site_limits (cluster, account, grp_tres_run_mins, kept_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (cluster, account) DO UPDATE SET grp_tres_run_mins = excluded.grp_tres_run_mins,"
                " kept_at = excluded.kept_at",
                (cluster, account, grp_tres_run_mins, time.time()),
            )

        self._atomic(body)

    def forget_site_limits(self, cluster: str, account: str) -> None:
        def body() -> Any:
            self.conn.execute("DELETE FROM site_limits WHERE cluster = ? AND account = ?", (cluster, account))

        self._atomic(body)
