"""The ledger on a site's MariaDB (or MySQL) server, behind the connection the ledger already uses.

``Ledger`` speaks the SQL SQLite takes, with ``?`` and ``:name`` parameters and identifiers MariaDB
reserves in backticks (SQLite takes those too). ``Connection`` wraps a PyMySQL connection so the same
statements run there: parameters become PyMySQL's ``%s``/``%(name)s``, an upsert's ``ON CONFLICT (...)
DO UPDATE SET c = excluded.c`` becomes ``ON DUPLICATE KEY UPDATE c = VALUES(c)``, and ``BEGIN
IMMEDIATE`` (SQLite: one writer at a time) becomes a transaction that first locks the one row of
``ledger_turn``: writers take turns on a row lock, which Galera certifies like any other write (no
table locks, no ``GET_LOCK``, which Galera does not replicate), so every read-then-write of the ledger
sees what the writer before it committed, as on SQLite.

The schema is the SQLite one at its latest version, in MariaDB's types (``SCHEMA``): every table has a
primary key, amounts are BIGINT (exact, as SQLite's INTEGER), and no code relies on the order of
auto-increment ids across servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SCHEMA_VERSION = 6  # the SQLite migrations this schema matches (``schema.MIGRATIONS``)
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ledger_turn (id INT PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0)""",
    """INSERT IGNORE INTO ledger_turn (id, n) VALUES (1, 0)""",
    """CREATE TABLE IF NOT EXISTS schema_version (id INT PRIMARY KEY, version INT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS accounts (
    name VARCHAR(190) PRIMARY KEY,
    balance BIGINT NOT NULL DEFAULT 0,
    held BIGINT NOT NULL DEFAULT 0,
    charged BIGINT NOT NULL DEFAULT 0,
    expired BIGINT NOT NULL DEFAULT 0,
    credited BIGINT NOT NULL DEFAULT 0,
    rate_per_day BIGINT NOT NULL DEFAULT 0,
    capacity BIGINT NOT NULL DEFAULT 0,
    refilled_at DOUBLE NOT NULL,
    blocked TINYINT NOT NULL DEFAULT 0
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS movements (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    at DOUBLE NOT NULL,
    account VARCHAR(190) NOT NULL,
    kind VARCHAR(16) NOT NULL CHECK (kind IN ('deposit', 'refill', 'adjustment', 'hold', 'charge', 'refund',
                                              'expiry', 'overrun')),
    amount BIGINT NOT NULL,
    job_key VARCHAR(190),
    user VARCHAR(190),
    actor VARCHAR(190) NOT NULL,
    reason TEXT NOT NULL,
    KEY movements_account (account, at),
    KEY movements_job (job_key)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS jobs (
    job_key VARCHAR(190) PRIMARY KEY,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    submit_time BIGINT NOT NULL,
    restart INT NOT NULL,
    account VARCHAR(190) NOT NULL,
    user VARCHAR(190) NOT NULL,
    `partition` VARCHAR(190) NOT NULL,
    qos VARCHAR(190) NOT NULL DEFAULT '',
    gpus DOUBLE NOT NULL,
    price BIGINT NOT NULL,
    rate DOUBLE NOT NULL,
    time_limit BIGINT,
    hold_seconds BIGINT NOT NULL,
    estimate BIGINT,
    hold BIGINT NOT NULL,
    charge BIGINT,
    refund BIGINT,
    state VARCHAR(8) NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled')),
    end_state VARCHAR(32),
    elapsed BIGINT,
    held_at DOUBLE NOT NULL,
    settled_at DOUBLE,
    held_by VARCHAR(32) NOT NULL DEFAULT '',
    settled_by VARCHAR(32),
    gpus_num BIGINT NOT NULL DEFAULT 0,
    gpus_den BIGINT NOT NULL DEFAULT 1 CHECK (gpus_den > 0),
    rate_ppm BIGINT NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0),
    KEY jobs_account_state (account, state),
    KEY jobs_job (cluster, job_id)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS tiers (
    qos VARCHAR(190) PRIMARY KEY,
    rate DOUBLE NOT NULL CHECK (rate > 0),
    rate_ppm BIGINT NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS prices (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    `partition` VARCHAR(190) NOT NULL,
    price BIGINT NOT NULL CHECK (price > 0),
    effective_at DOUBLE NOT NULL,
    set_at DOUBLE NOT NULL,
    actor VARCHAR(190) NOT NULL,
    reason TEXT NOT NULL,
    KEY prices_partition (`partition`, effective_at)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS incidents (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    at DOUBLE NOT NULL,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    event VARCHAR(16) NOT NULL,
    error TEXT NOT NULL,
    resolved_at DOUBLE,
    KEY incidents_open (resolved_at, cluster, job_id)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS site_limits (
    cluster VARCHAR(64) NOT NULL,
    account VARCHAR(190) NOT NULL,
    grp_tres_run_mins TEXT NOT NULL,
    kept_at DOUBLE NOT NULL,
    PRIMARY KEY (cluster, account)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS admin_comments (
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    text TEXT NOT NULL,
    queued_at DOUBLE NOT NULL,
    written_at DOUBLE,
    attempts INT NOT NULL DEFAULT 0,
    error TEXT NOT NULL,
    PRIMARY KEY (cluster, job_id),
    KEY admin_comments_unwritten (written_at)
) ENGINE=InnoDB""",
    """CREATE TABLE IF NOT EXISTS inbox (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    event VARCHAR(16) NOT NULL,
    facts TEXT NOT NULL,
    received_at DOUBLE NOT NULL,
    due_at DOUBLE NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    done_at DOUBLE,
    outcome TEXT NOT NULL,
    KEY inbox_due (done_at, due_at)
) ENGINE=InnoDB""",
    f"""INSERT IGNORE INTO schema_version (id, version) VALUES (1, {SCHEMA_VERSION})""",
)

_UPSERT = re.compile(r"\bON CONFLICT\s*\([^)]*\)\s*DO UPDATE SET\b", re.IGNORECASE)
_EXCLUDED = re.compile(r"\bexcluded\.(\w+)", re.IGNORECASE)
_NAMED = re.compile(r":([A-Za-z_]\w*)")


def translate(sql: str) -> str:
    """A statement as the ledger writes it (SQLite's flavour) in MariaDB's: ``%`` doubled (PyMySQL
    formats with it), ``?`` -> ``%s``, ``:name`` -> ``%(name)s``, and an upsert's conflict clause.
    The ledger's statements put no ``?`` or ``:`` inside string literals (all values are parameters)."""
    out = sql.replace("%", "%%").replace("?", "%s")
    out = _NAMED.sub(r"%(\1)s", out)
    if _UPSERT.search(out):
        out = _EXCLUDED.sub(r"VALUES(\1)", _UPSERT.sub("ON DUPLICATE KEY UPDATE", out))
    return out


class Row(Mapping[str, Any]):
    """A result row read by column name or position, like ``sqlite3.Row``."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self._names = tuple(names)
        self._values = tuple(values)

    def __getitem__(self, key: str | int) -> Any:  # type: ignore[override]
        if isinstance(key, int):
            return self._values[key]
        try:
            return self._values[self._names.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def keys(self) -> Any:
        return list(self._names)


class Cursor:
    """What the ledger reads of a cursor: rows, the new row's id."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self._names = [d[0] for d in cursor.description] if cursor.description else []
        self.lastrowid = getattr(cursor, "lastrowid", None)  # none before a statement ran
        self.rowcount = cursor.rowcount

    def fetchone(self) -> Row | None:
        row = self._cursor.fetchone()
        return None if row is None else Row(self._names, row)

    def fetchall(self) -> list[Row]:
        return [Row(self._names, row) for row in self._cursor.fetchall()]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())


class Connection:
    """A PyMySQL connection that runs the ledger's statements (``translate``) with SQLite's
    transaction words: ``BEGIN IMMEDIATE`` waits for the writers' turn (``ledger_turn``)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.in_transaction = False
        self.row_factory: object = None  # the ledger sets sqlite3.Row; rows here are always ``Row``

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Cursor:
        word = sql.strip().upper()
        cursor = self._conn.cursor()
        if word in ("BEGIN IMMEDIATE", "BEGIN"):
            self._conn.begin()
            self.in_transaction = True
            cursor.execute("UPDATE ledger_turn SET n = n + 1 WHERE id = 1")  # the writers' turn, until commit
        elif word == "COMMIT":
            self._conn.commit()
            self.in_transaction = False
        elif word == "ROLLBACK":
            self._conn.rollback()
            self.in_transaction = False
        else:
            cursor.execute(translate(sql), params if isinstance(params, Mapping) else tuple(params))
        return Cursor(cursor)

    def close(self) -> None:
        self._conn.close()


def connect(option_file: str, database: str | None = None) -> Connection:
    """A connection from a MySQL option file (``[client]`` host, port, user, password, database;
    readable by the SlurmUser alone), with the schema made if it is missing."""
    import pymysql

    conn = pymysql.connect(read_default_file=option_file, database=database, autocommit=True, charset="utf8mb4")
    wrapped = Connection(conn)
    cursor = conn.cursor()
    for statement in SCHEMA:
        cursor.execute(statement)
    return wrapped
