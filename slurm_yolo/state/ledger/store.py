"""Where the books are kept: the one storage interface the ledger writes through.

Two stores speak it: SQLite (``SqliteStore``: the embedded default, one controller) and a site's
MariaDB (``mariadb.Connection``: backup controllers, several clusters on one budget). The ledger
writes SQLite-flavoured statements (``?`` and ``:name`` parameters, backticked identifiers MariaDB
reserves) and brackets them with ``begin``/``commit``; a store that can lose a transaction to
something other than the ledger's own logic (a deadlock, a dropped connection) says so through
``retryable``, and the ledger then runs the whole transaction again. ``commit`` itself never leaves
the outcome in doubt: it returns once the transaction is durable, or raises an error after which
nothing of it was kept.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.state import db


class Row(Protocol):
    """A result row, as ``sqlite3.Row``: read by column name or position, iterated as its values,
    ``dict(row)`` by its ``keys``."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def keys(self) -> list[str]: ...


class Store(Protocol):
    """A connection to the books."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ..., /) -> Any:
        """A cursor: ``fetchone``, ``fetchall``, iteration (rows as ``Row``), ``lastrowid``."""

    def begin(self) -> None:
        """Start a write transaction, once the writers before it have committed (one at a time)."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def retryable(self, error: BaseException, started: float) -> bool:
        """Whether ``error`` lost the transaction begun at ``started`` (monotonic seconds) to a cause
        that running it again can cure; the store is ready for that when it says so."""

    def version(self) -> int | None:
        """A number every write transaction of any writer changes (None: the store has none)."""

    def snapshot(self, path: Path) -> None:
        """Write a consistent copy of the books to a new SQLite file at ``path`` (what users read)."""

    def consistent(self) -> AbstractContextManager[None]:
        """Reads, until the block ends, of one moment of the books: writers on other hosts or clusters
        committing meanwhile are not half seen (a check of a live shared ledger)."""

    def close(self) -> None: ...


class SqliteStore:
    """The ledger's SQLite file (``db``: in the SlurmUser's private folder, WAL, one writer at a time)."""

    def __init__(self, conn: sqlite3.Connection, on_close: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self.raw = conn
        self.raw.row_factory = sqlite3.Row
        self._on_close = on_close

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = (), /) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def begin(self) -> None:
        try:
            self.raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            # busy past db.BUSY_TIMEOUT_MS: another writer (root or the SlurmUser) holds it
            raise SlurmYoloError(f"the ledger stayed busy for {db.BUSY_TIMEOUT_MS // 1000} s: {e}") from None
        try:
            db.refuse_moved(self.raw, "the ledger")  # a connection kept from before the move (hookd)
        except SlurmYoloError:
            self.raw.execute("ROLLBACK")
            raise

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def version(self) -> int | None:
        return None  # one controller's file: its own writers publish after each write

    def retryable(self, error: BaseException, started: float) -> bool:
        return False  # SQLite waits for its lock itself (busy_timeout); nothing else is worth a second try

    def snapshot(self, path: Path) -> None:
        db.backup_into(self.raw)(path)

    @contextmanager
    def consistent(self) -> Iterator[None]:
        if self.raw.in_transaction:  # a write transaction's reads are of one moment already
            yield
            return
        self.raw.execute("BEGIN")  # deferred: WAL gives this reader the books as of its first read
        try:
            yield
        finally:
            self.raw.execute("COMMIT")

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close(self.raw)
        else:
            self.raw.close()
