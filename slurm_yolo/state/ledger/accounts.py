"""Accounts: deposits, quotas (token buckets), refills and expiry, balances and history."""

from __future__ import annotations

import time
from typing import Any

from slurm_yolo.core.errors import UsageError
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.base import LedgerBase


class Accounts(LedgerBase):
    """Accounts: deposits, quotas (token buckets), refills and expiry, balances and history."""

    def credit(self, account: str, amount: int, actor: str, reason: str = "", kind: str = "deposit") -> bool | None:
        """Deposit (or adjust, possibly negative); the account's new blocked state if it changed."""
        if kind not in ("deposit", "adjustment"):
            raise UsageError(f"unknown credit kind {kind}")
        if kind == "deposit" and amount <= 0:
            raise UsageError(f"a deposit must be positive (got {amount})")
        now = time.time()

        def body() -> Any:
            self._refill(account, now)
            self._move(account, kind, amount, now, actor, reason=reason)
            return self._update_block(account)

        return self._atomic(body)

    def set_quota(self, account: str, rate_per_day: int, capacity: int, actor: str) -> None:
        """The account's bucket: ``rate_per_day`` tokens a day, up to ``capacity``."""
        if rate_per_day < 0 or capacity < 0:
            raise UsageError("rate and capacity must not be negative")
        now = time.time()

        def body() -> Any:
            self._refill(account, now)  # earned at the old rate first
            self.conn.execute(
                "UPDATE accounts SET rate_per_day = ?, capacity = ? WHERE name = ?", (rate_per_day, capacity, account)
            )

        self._atomic(body)

    def refill_all(self) -> dict[str, bool]:
        """Apply every bucket's refill (cron); accounts whose blocked state changed."""
        now = time.time()
        changed: dict[str, bool] = {}

        def body() -> Any:
            changed.clear()  # a transaction run again starts over
            for (name,) in self.conn.execute("SELECT name FROM accounts").fetchall():
                self._refill(name, now)
                state = self._update_block(name)
                if state is not None:
                    changed[name] = state

        self._atomic(body)
        return changed

    def expire(self, days: float) -> dict[str, int]:
        """Expire tokens credited more than ``days`` ago and still unspent (first in, first out: what
        was used, held or expired so far counts against the oldest credits first). Per account, what
        expired."""
        now = time.time()
        cutoff = now - days * 86400
        out: dict[str, int] = {}

        def body() -> Any:
            out.clear()  # a transaction run again starts over
            for a in self.conn.execute("SELECT * FROM accounts").fetchall():
                old = self.conn.execute(
                    "SELECT coalesce(sum(amount), 0) FROM movements WHERE account = ? AND kind IN"
                    " ('deposit', 'refill', 'adjustment') AND at < ?",
                    (a["name"], cutoff),
                ).fetchone()[0]
                stale = min(a["balance"], old - (a["charged"] + a["held"] + a["expired"]))
                if stale > 0:
                    self._move(a["name"], "expiry", stale, now, "expiry", reason=f"unspent for {days:g} days")
                    self._update_block(a["name"])
                    out[a["name"]] = stale

        self._atomic(body)
        return out

    def account(self, name: str) -> store.Row | None:
        return self.conn.execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone()

    def balance(self, name: str) -> int:
        """What the account has left beyond its holds (0 for an account the ledger does not know)."""
        row = self.account(name)
        return int(row["balance"]) if row else 0

    def accounts(self) -> list[store.Row]:
        return self.conn.execute("SELECT * FROM accounts ORDER BY name").fetchall()

    def history(self, account: str, limit: int = 50) -> list[store.Row]:
        return self.conn.execute(
            "SELECT * FROM movements WHERE account = ? ORDER BY id DESC LIMIT ?", (account, limit)
        ).fetchall()

    def movements(self) -> list[store.Row]:
        return self.conn.execute("SELECT * FROM movements ORDER BY id").fetchall()
