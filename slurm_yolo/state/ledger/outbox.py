"""The AdminComments the settler writes into Slurm (the outbox), once per settled job."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from slurm_yolo.core.billing import comment
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.base import LedgerBase
from slurm_yolo.state.ledger.values import (
    _of,
)


class Outbox(LedgerBase):
    """The AdminComments the settler writes into Slurm (the outbox), once per settled job."""

    def _queue_comment(self, cluster: str, job_id: int, now: float) -> None:
        settled = self.conn.execute(
            "SELECT * FROM jobs WHERE cluster = ? AND job_id = ? AND state = 'settled'", (cluster, job_id)
        ).fetchall()
        self.conn.execute(
            "INSERT INTO admin_comments (cluster, job_id, text, queued_at) VALUES (?, ?, ?, ?) ON CONFLICT (cluster,"
            " job_id) DO UPDATE SET text = excluded.text, queued_at = excluded.queued_at, written_at = NULL,"
            " attempts = 0, error = ''",
            (cluster, job_id, comment.render(settled), now),
        )

    def requeue_comment(self, cluster: str, job_id: int) -> None:
        """Queue the job's AdminComment again (the audit found sacct without it: written, then lost)."""

        def body() -> Any:
            self._queue_comment(cluster, job_id, time.time())

        self._atomic(body)

    def unwritten_comments(self, limit: int | None = None, cluster: str | None = None) -> list[store.Row]:
        """AdminComments sacctmgr has not taken yet (the first ``limit``; None: all), of ``cluster``
        (None: of every cluster), least tried and oldest first: one that keeps failing does not stand
        before the others."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM admin_comments WHERE written_at IS NULL {of} ORDER BY attempts, queued_at LIMIT ?",
            (*args, 2**62 if limit is None else limit),
        ).fetchall()

    def unwritten_count(self, cluster: str | None = None) -> int:
        of, args = _of(cluster)
        return int(
            self.conn.execute(f"SELECT count(*) FROM admin_comments WHERE written_at IS NULL {of}", args).fetchone()[0]
        )

    def comment_done(self, cluster: str, job_id: int, text: str, error: str = "") -> None:
        """Mark a comment written (``error`` empty), or count a failed attempt; a comment re-queued
        meanwhile (another run settled) stays to be written."""
        self.comments_done([(cluster, job_id, text, error)])

    def comments_done(self, outcomes: Iterable[tuple[str, int, str, str]]) -> None:
        """``comment_done`` for a batch (cluster, job id, text, error), in one transaction."""
        now = time.time()
        outcomes = list(outcomes)  # read again if the transaction runs again

        def body() -> Any:
            for cluster, job_id, text, error in outcomes:
                if error:
                    self.conn.execute(
                        "UPDATE admin_comments SET attempts = attempts + 1, error = ? WHERE cluster = ? AND job_id = ?"
                        " AND text = ? AND written_at IS NULL",
                        (error[:500], cluster, job_id, text),
                    )
                else:
                    self.conn.execute(
                        "UPDATE admin_comments SET written_at = ? WHERE cluster = ? AND job_id = ? AND text = ?",
                        (now, cluster, job_id, text),
                    )

        self._atomic(body)
