"""The ledger's connection and its write transaction, and the movements every part records:
each write is one ``BEGIN IMMEDIATE`` transaction that moves an account's totals with its movement row."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Self

from slurm_yolo.core.billing import bucket
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.values import (
    _WRITE_TURN,
    T,
)


class LedgerBase:
    """Ledger operations; writes are short ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, conn: store.Store) -> None:
        self.conn = conn
        self.wrote = False  # a transaction committed: the admission file is out of date

    def close(self) -> None:
        self.conn.close()

    def version(self) -> int | None:
        """A number every write transaction changes, whoever wrote (None: only this host writes: SQLite)."""
        return self.conn.version()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _atomic(self, body: Callable[[], T]) -> T:
        """Run ``body`` (the ledger's statements) as one write transaction, again from the start when
        the store lost it to a deadlock or a dropped connection (``store.Store.retryable``): a body
        reads what it writes from, so a second run decides afresh (a run already held is not held
        again). Its result, once the transaction is durable."""
        # Threads of one process (hookd) take turns here rather than in the store's own waiting
        # (SQLite's busy handler sleeps up to 100 ms at a time; 50 hooks at once would feel it).
        with _WRITE_TURN:
            started = time.monotonic()
            while True:
                try:
                    self.conn.begin()
                    try:
                        result = body()
                        self.conn.commit()
                    except BaseException:
                        self.conn.rollback()
                        raise
                except Exception as e:
                    if self.conn.retryable(e, started):
                        continue
                    if isinstance(e, sqlite3.Error) or type(e).__module__.startswith("pymysql"):
                        raise SlurmYoloError(f"the ledger could not write: {e}") from e
                    raise
                self.wrote = True
                return result

    def _account(self, name: str, now: float, create: bool = True) -> store.Row:
        row = self.conn.execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone()
        if row is None:
            if not create:
                raise UsageError(
                    f"account {name!r} has no ledger entry: slurm-yolo ledger deposit {name} AMOUNT makes one"
                )
            self.conn.execute("INSERT INTO accounts (name, refilled_at) VALUES (?, ?)", (name, now))
            row = self.conn.execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone()
        return row

    def _move(
        self,
        account: str,
        kind: str,
        amount: int,
        now: float,
        actor: str,
        *,
        job_key: str | None = None,
        user: str | None = None,
        reason: str = "",
    ) -> None:
        """Record one movement and apply it to the account's totals."""
        if amount < 0 and kind != "adjustment":
            raise ValueError(f"{kind} of {amount}")
        self.conn.execute(
            "INSERT INTO movements (at, account, kind, amount, job_key, user, actor, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (now, account, kind, amount, job_key, user, actor, reason),
        )
        delta = {
            "deposit": "balance = balance + :a, credited = credited + :a",
            "refill": "balance = balance + :a, credited = credited + :a",
            "adjustment": "balance = balance + :a, credited = credited + :a",
            "hold": "balance = balance - :a, held = held + :a",
            "charge": "held = held - :a, charged = charged + :a",
            "refund": "held = held - :a, balance = balance + :a",
            "expiry": "balance = balance - :a, expired = expired + :a",
            "overrun": "balance = balance - :a, charged = charged + :a",  # paid past the hold
        }[kind]
        self.conn.execute(f"UPDATE accounts SET {delta} WHERE name = :n", {"a": amount, "n": account})

    def _refill(self, name: str, now: float) -> None:
        row = self._account(name, now)
        add, mark = bucket.refill(row["balance"], row["capacity"], row["rate_per_day"], row["refilled_at"], now)
        if add:
            self._move(name, "refill", add, now, "bucket", reason=f"{row['rate_per_day']}/day")
        if mark != row["refilled_at"]:
            self.conn.execute("UPDATE accounts SET refilled_at = ? WHERE name = ?", (mark, name))

    def _update_block(self, name: str) -> bool | None:
        """Set ``blocked`` from the balance; the new value when it changed, else None."""
        row = self.conn.execute("SELECT balance, blocked FROM accounts WHERE name = ?", (name,)).fetchone()
        dry = 1 if row["balance"] <= 0 else 0
        if dry != row["blocked"]:
            self.conn.execute("UPDATE accounts SET blocked = ? WHERE name = ?", (dry, name))
            return bool(dry)
        return None
