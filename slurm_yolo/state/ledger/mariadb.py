"""The ledger on a site's MariaDB (or MySQL, or a Galera cluster of either): the second ``store.Store``.

``Ledger`` speaks the SQL SQLite takes, with ``?`` and ``:name`` parameters and identifiers MariaDB
reserves in backticks (SQLite takes those too). ``Connection`` wraps a PyMySQL connection so the same
statements run there: parameters become PyMySQL's ``%s``/``%(name)s``, an upsert's ``ON CONFLICT (...)
DO UPDATE SET c = excluded.c`` becomes ``ON DUPLICATE KEY UPDATE c = VALUES(c)``.

Writers take turns as on SQLite: ``begin`` locks the one row of ``ledger_turn``, so every
read-then-write of the ledger sees what the writer before it committed, on any controller of any
cluster. A row lock is what Galera certifies like any other write (no table locks, no ``GET_LOCK``,
which Galera does not replicate); two writers on two Galera nodes then meet as a deadlock error at
commit, which the ledger answers by running the transaction again (``retryable``).

A dropped connection is the other thing worth a second try, with one trap: a COMMIT whose answer was
lost may or may not have happened. Every transaction therefore writes a marker row (``commits``, a
random token) before it commits; ``commit`` that loses its answer reconnects and looks for its
marker: found, the transaction is durable and ``commit`` returns; missing, nothing of it was kept,
and the error goes back to the ledger, which runs it again. Reads outside a transaction are retried
on a new connection, as they change nothing.

The schema is the SQLite one at its latest version, in MariaDB's types (``SCHEMA``): every table has a
primary key, amounts are BIGINT (exact, as SQLite's INTEGER; sums come back as whole ``int``), and no
code relies on the order of auto-increment ids across servers.
"""

from __future__ import annotations

import contextlib
import pwd
import random
import re
import secrets
import sqlite3
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.state import db
from slurm_yolo.state.ledger.mariadb_schema import SCHEMA, SCHEMA_VERSION, UPGRADES
from slurm_yolo.state.ledger.schema import MIGRATIONS

RETRY_SECONDS = 60.0  # how long a transaction is tried again through deadlocks and a server's restart
TRANSIENT = frozenset(
    {
        1205,  # lock wait timeout
        1213,  # deadlock (on Galera: a conflict with a writer on another node)
        1047,
        1180,
        1927,  # Galera node not ready; commit failed (certification); connection killed
        1040,  # too many connections (a flood of them: waited out within the patience, then fail closed)
        1053,  # server shutdown in progress
        2003,
        2006,
        2013,
        2014,  # cannot connect; server gone; connection lost; out of sync
    }
)

_UPSERT = re.compile(r"\bON CONFLICT\s*\([^)]*\)\s*DO UPDATE SET\b", re.IGNORECASE)
_EXCLUDED = re.compile(r"\bexcluded\.(\w+)", re.IGNORECASE)
_NAMED = re.compile(r":([A-Za-z_]\w*)")
_ready: set[str] = set()  # option files whose database has the schema (made once per process)


def translate(sql: str) -> str:
    """A statement as the ledger writes it (SQLite's flavour) in MariaDB's: ``%`` doubled (PyMySQL
    formats with it), ``?`` -> ``%s``, ``:name`` -> ``%(name)s``, and an upsert's conflict clause.
    The ledger's statements put no ``?`` or ``:`` inside string literals (all values are parameters)."""
    out = sql.replace("%", "%%").replace("?", "%s")
    out = _NAMED.sub(r"%(\1)s", out)
    if _UPSERT.search(out):
        out = _EXCLUDED.sub(r"VALUES(\1)", _UPSERT.sub("ON DUPLICATE KEY UPDATE", out))
    return out


def _value(v: Any) -> Any:
    """MariaDB's sums of BIGINT come back DECIMAL: the ledger's amounts are whole numbers."""
    return int(v) if isinstance(v, Decimal) and v == v.to_integral_value() else v


class Row:
    """A result row as ``sqlite3.Row`` is one: read by column name or position, iterated as its
    values, ``dict(row)`` by its ``keys``."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self._names = tuple(names)
        self._values = tuple(_value(v) for v in values)

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, int):
            return self._values[key]
        try:
            return self._values[self._names.index(key)]
        except ValueError:
            raise IndexError(f"No item with that key: {key}") from None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._names)


class Cursor:
    """What the ledger reads of a cursor: rows, the new row's id."""

    def __init__(self, cursor: Any) -> None:
        self._names = [d[0] for d in cursor.description] if cursor.description else []
        self._rows = list(cursor.fetchall()) if cursor.description else []
        self.lastrowid: int | None = getattr(cursor, "lastrowid", None)
        self.rowcount = cursor.rowcount

    def fetchone(self) -> Row | None:
        return Row(self._names, self._rows.pop(0)) if self._rows else None

    def fetchall(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return [Row(self._names, r) for r in rows]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


def check_options(path: Path, owner: str) -> Path:
    """The option file with the ledger's credentials: a file of the SlurmUser (``owner``, who writes
    the books: root writes as that user too) that nobody else can read; else one line saying what
    to do. PyMySQL would go on without a file it cannot read, as whoever runs it."""
    if not path.is_absolute():
        raise SlurmYoloError(f"the ledger's MariaDB option file {path}: give an absolute path")
    try:
        st = path.stat()
    except OSError as e:
        raise SlurmYoloError(f"the ledger's MariaDB option file {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SlurmYoloError(f"the ledger's MariaDB option file {path} is not a file")
    try:
        owner_uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise SlurmYoloError(f"paths.owner {owner!r} is not a user on this host") from None
    if not db.is_keeper(owner):
        raise SlurmYoloError(
            f"permission denied: the ledger's database is opened only by root or the SlurmUser ({owner}); users read"
            " balances from its published copy, and admins change it as root"
        )
    if st.st_uid != owner_uid or st.st_mode & 0o077:
        raise SlurmYoloError(
            f"the ledger's MariaDB option file {path} must be the SlurmUser's alone:"
            f" chown {owner} {path}; chmod 600 {path}"
        )
    return path


def _why(error: Exception, options: Path) -> str:
    """One line for a connection the server refused: what is wrong, and where to fix it."""
    code = error.args[0] if error.args else None
    text = error.args[1] if len(error.args) > 1 else str(error)
    fix = {
        1044: "the user may not use that database (GRANT ALL ON db.* TO the user)",
        1045: "the server refused the user or password",
        1046: "no database = line under [client]",
        1049: "no such database",
        1142: "the user lacks a privilege it needs (it makes its own tables: GRANT ALL ON db.* TO the user)",
        1698: "the server refused the user (no user = and password = under [client]?)",
        2002: "no server at that socket",
        2003: "no server at that host and port",
        2005: "unknown host",
    }.get(code if isinstance(code, int) else -1, "")
    return f"the ledger's MariaDB ({options}): {fix + ': ' if fix else ''}{text}"


def _errors() -> tuple[type[Exception], ...]:
    """What a PyMySQL connection raises (imported when the MariaDB backend is used, not before)."""
    import pymysql

    return (pymysql.err.MySQLError, OSError)


def _is_transient(error: BaseException) -> bool:
    import pymysql

    if isinstance(error, pymysql.err.InterfaceError):  # the connection is closed
        return True
    code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else None
    return isinstance(code, int) and code in TRANSIENT


# The writers' sessions read committed rows (no gap locks between clusters' turns); a reader of one
# moment needs its next transaction repeatable: under READ COMMITTED, a consistent snapshot lasts one
# statement, and a hold committed between two reads showed in one and not the other (CI caught
# Ledger.check and the published copy both reading that way).
_SNAPSHOT_LEVEL = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"


class Connection:
    """A PyMySQL connection that runs the ledger's statements (``translate``) as a ``store.Store``."""

    def __init__(self, options: Path) -> None:
        self.options = options
        self.pool_key: str | None = None  # set: ``close`` keeps it for the next writer (``db.keep``)
        self.in_transaction = False
        self._conn: Any = None
        self._connect(time.monotonic(), db.LOCK_SECONDS)  # a first connection waits no longer than a lock

    def _connect(self, started: float, patience: float = RETRY_SECONDS) -> None:
        """(Re)connect, through a server's restart, for up to ``patience`` seconds from ``started``."""
        try:
            import pymysql
        except ImportError:
            raise SlurmYoloError(
                "ledger.backend = \"mariadb\" needs PyMySQL: pip install 'slurm-yolo[mariadb]'"
                " (or Debian's python3-pymysql)"
            ) from None

        while True:
            try:
                conn = pymysql.connect(
                    read_default_file=str(self.options),
                    autocommit=True,
                    charset="utf8mb4",
                    connect_timeout=10,
                    read_timeout=120,
                    write_timeout=120,
                )
                with conn.cursor() as c:
                    c.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'")
                    c.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    if str(self.options) not in _ready:
                        for statement in SCHEMA:
                            c.execute(statement)
                        c.execute("SELECT version FROM schema_version WHERE id = 1")
                        made = int(c.fetchone()[0])
                        for version, statements in UPGRADES:
                            if version > made:
                                for statement in statements:
                                    c.execute(statement)
                        c.execute(
                            "UPDATE schema_version SET version = %s WHERE id = 1 AND version < %s",
                            (SCHEMA_VERSION, SCHEMA_VERSION),
                        )
                        _ready.add(str(self.options))
                self._conn = conn
                return
            except pymysql.err.MySQLError as e:
                if not _is_transient(e) or time.monotonic() - started > patience:
                    raise SlurmYoloError(_why(e, self.options)) from None
                time.sleep(min(2.0, 0.1 + random.random() * 0.5))

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = (), /) -> Cursor:
        args = params if isinstance(params, Mapping) else tuple(params)
        started = time.monotonic()
        while True:
            try:
                with self._conn.cursor() as c:
                    c.execute(translate(sql), args)
                    return Cursor(c)
            except _errors() as e:
                if self.in_transaction or not _is_transient(e) or time.monotonic() - started > RETRY_SECONDS:
                    raise  # in a transaction, the ledger runs the whole of it again
                self._reconnect(started)

    def _reconnect(self, started: float) -> None:
        with contextlib.suppress(*_errors()):  # already gone
            self._conn.close()
        self._connect(started)

    def begin(self) -> None:
        self._conn.begin()
        self.in_transaction = True
        with self._conn.cursor() as c:
            c.execute("UPDATE ledger_turn SET n = n + 1 WHERE id = 1")  # the writers' turn, until commit

    def commit(self) -> None:
        token = secrets.token_hex(16)
        with self._conn.cursor() as c:
            c.execute("INSERT INTO commits (token, at) VALUES (%s, %s)", (token, time.time()))
            if random.random() < 0.01:  # markers are looked for only right after their commit
                c.execute("DELETE FROM commits WHERE at < %s LIMIT 1000", (time.time() - 86400,))
        try:
            self._conn.commit()
        except _errors() as e:
            self.in_transaction = False
            if not _is_transient(e):
                raise
            self._reconnect(time.monotonic())
            with self._conn.cursor() as c:
                c.execute("SELECT 1 FROM commits WHERE token = %s", (token,))
                if c.fetchone() is None:
                    raise  # not kept: the ledger runs the transaction again
            return
        self.in_transaction = False

    def rollback(self) -> None:
        self.in_transaction = False
        with contextlib.suppress(*_errors()):  # a lost connection: the server rolled it back already
            self._conn.rollback()

    def retryable(self, error: BaseException, started: float) -> bool:
        if not _is_transient(error) or time.monotonic() - started > RETRY_SECONDS:
            return False
        time.sleep(random.random() * 0.05)  # two deadlocked writers: not in step again
        self._reconnect(started)
        return True

    def version(self) -> int | None:
        """The writers' turn counter: every write transaction, on any controller or cluster, moves it."""
        return int(self.execute("SELECT n FROM ledger_turn WHERE id = 1").fetchall()[0][0])

    def insert_many(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows`` into ``table`` (a copy of the books: ``transfer``), in batches."""
        sql = f"INSERT INTO `{table}` ({', '.join(f'`{c}`' for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        with self._conn.cursor() as c:
            for at in range(0, len(rows), 500):
                c.executemany(sql, rows[at : at + 500])

    @contextlib.contextmanager
    def consistent(self) -> Iterator[None]:
        if self.in_transaction:
            yield
            return
        with self._conn.cursor() as c:
            c.execute(_SNAPSHOT_LEVEL)
            c.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        self.in_transaction = True  # no reconnect mid-way: that would read another moment
        try:
            yield
        finally:
            self.in_transaction = False
            with contextlib.suppress(*_errors()), self._conn.cursor() as c:
                c.execute("COMMIT")

    def snapshot(self, path: Path) -> None:
        """The books as a new SQLite file (the published copy users read): the SQLite schema at its
        latest version, then each table's rows, read in one consistent snapshot."""
        copy = sqlite3.connect(path, isolation_level=None)
        try:
            db.migrate(copy, MIGRATIONS)
            copy.execute("BEGIN")
            with self._conn.cursor() as c:
                c.execute(_SNAPSHOT_LEVEL)
                c.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                try:
                    for (table,) in copy.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
                    ).fetchall():
                        columns = [r[1] for r in copy.execute(f"PRAGMA table_info({table})")]
                        c.execute(f"SELECT {', '.join(f'`{col}`' for col in columns)} FROM `{table}`")
                        marks = ", ".join("?" * len(columns))
                        copy.executemany(
                            f"INSERT INTO {table} VALUES ({marks})", ([_value(v) for v in row] for row in c.fetchall())
                        )
                finally:
                    c.execute("COMMIT")
            copy.execute("COMMIT")
        finally:
            copy.close()

    def close(self) -> None:
        if self.pool_key is not None and db.keep(self.pool_key, self):
            return
        with contextlib.suppress(*_errors()):  # closed by the server already
            self._conn.close()


def connect(options: Path, owner: str) -> Connection:
    """A connection from a MySQL option file (``[client]`` host, port or socket, user, password,
    database; the SlurmUser's (``owner``) alone: ``check_options``), with the schema made if it is missing."""
    return Connection(check_options(options, owner))
