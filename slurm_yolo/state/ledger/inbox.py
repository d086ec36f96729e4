"""The inbox of run ends the settler works through, and the incidents of hooks that failed."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.base import LedgerBase
from slurm_yolo.state.ledger.values import (
    _of,
)


class Inbox(LedgerBase):
    """The inbox of run ends the settler works through, and the incidents of hooks that failed."""

    def receive(self, cluster: str, job_id: int, event: str, facts: Mapping[str, str]) -> int:
        """Record an event durably (committed before hookd answers); its row id."""
        now = time.time()

        def body() -> Any:
            cur = self.conn.execute(
                "INSERT INTO inbox (cluster, job_id, event, facts, received_at, due_at) VALUES (?, ?, ?, ?, ?, ?)",
                (cluster, job_id, event, json.dumps(dict(facts), sort_keys=True), now, now),
            )
            return int(cur.lastrowid or 0)

        return self._atomic(body)

    def due(
        self, now: float | None, limit: int, job: tuple[str, int] | None = None, cluster: str | None = None
    ) -> list[store.Row]:
        """Inbox rows to work on now, oldest first (``now`` None: every open row), of one (cluster,
        job) when ``job`` says which, else of ``cluster`` (None: of every cluster)."""
        when, args = ("AND due_at <= ?", [now]) if now is not None else ("", [])
        of, more = ("AND cluster = ? AND job_id = ?", job) if job else _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM inbox WHERE done_at IS NULL {when} {of} ORDER BY id LIMIT ?", (*args, *more, limit)
        ).fetchall()

    def inbox_open(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM inbox WHERE done_at IS NULL").fetchone()[0])

    def inbox_update(self, ids: list[int], outcome: str, due_at: float | None) -> None:
        """Rows done (``due_at`` None), or to be tried again at ``due_at``, with what happened."""
        now = time.time()
        marks = ",".join("?" * len(ids))

        def body() -> Any:
            if due_at is None:
                self.conn.execute(
                    f"UPDATE inbox SET done_at = ?, outcome = ? WHERE id IN ({marks})", (now, outcome, *ids)
                )
            else:
                self.conn.execute(
                    f"UPDATE inbox SET due_at = ?, attempts = attempts + 1, outcome = ? WHERE id IN ({marks})",
                    (due_at, outcome, *ids),
                )

        self._atomic(body)

    def record_incident(self, cluster: str, job_id: int, event: str, error: str) -> None:
        def body() -> Any:
            self.conn.execute(
                "INSERT INTO incidents (at, cluster, job_id, event, error) VALUES (?, ?, ?, ?, ?)",
                (time.time(), cluster, job_id, event, error[:500]),
            )

        self._atomic(body)

    def resolve_incidents(self, cluster: str, job_id: int) -> None:
        """The job's hook failures are over: it ended without a run to bill (cancelled before it ran)."""

        def body() -> Any:
            self.conn.execute(
                "UPDATE incidents SET resolved_at = ? WHERE resolved_at IS NULL AND cluster IN (?, '') AND job_id = ?",
                (time.time(), cluster, job_id),
            )

        self._atomic(body)

    def next_due(self, cluster: str | None = None) -> float | None:
        """When the inbox's next open row (of ``cluster``; None: of any) falls due (None: no open row)."""
        of, args = _of(cluster)
        at = self.conn.execute(f"SELECT min(due_at) FROM inbox WHERE done_at IS NULL {of}", args).fetchone()[0]
        return None if at is None else float(at)

    def ended_again(self, cluster: str, job_id: int, after: float, until: float) -> bool:
        """Whether a controller ended the job again between ``after`` and ``until``: slurmctld's epilog of
        it came in then. A controller that takes over from state saved before a run's end ends the run
        once more (and runs its epilog again); the audit reads that as the record's rewrite, not a
        second run. Rows the sweep wrote, or an epilog not slurmctld's, are no such evidence."""
        rows = self.conn.execute(
            "SELECT facts FROM inbox WHERE cluster = ? AND job_id = ? AND event = 'epilog'"
            " AND received_at > ? AND received_at <= ?",
            (cluster, job_id, after, until),
        ).fetchall()
        for row in rows:
            try:
                facts = json.loads(row["facts"])
            except (TypeError, ValueError):
                continue
            if isinstance(facts, dict) and facts.get("ended") == "1" and not facts.get("swept"):
                return True
        return False

    def inbox_row_due(self, row_id: int) -> float | None:
        """When the inbox row falls due again (None: done)."""
        row = self.conn.execute("SELECT due_at FROM inbox WHERE id = ? AND done_at IS NULL", (row_id,)).fetchone()
        return None if row is None else float(row["due_at"])

    def open_incidents(self, cluster: str | None = None) -> list[store.Row]:
        """Hook failures not yet over, of ``cluster`` (and those of no known cluster; None: of every cluster)."""
        of, args = _of(cluster, unknown=True)
        return self.conn.execute(f"SELECT * FROM incidents WHERE resolved_at IS NULL {of} ORDER BY at", args).fetchall()
