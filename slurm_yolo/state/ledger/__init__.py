"""The token ledger (ledger.db, SQLite in WAL mode): accounts, append-only movements, per-run holds.

Every change is a movement row (deposit, refill, adjustment, hold, charge, refund, expiry) written in
the same ``BEGIN IMMEDIATE`` transaction as the account totals it moves, so the invariant

    credited (deposits + refills + adjustments) = balance + held + charged + expired

holds after every commit, and ``check`` can prove it from the movements alone. A job run is keyed by
cluster, job id and the run's submit time: its hold and its settlement happen at most once,
whatever order or number of prolog/epilog invocations Slurm produces.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_yolo.core import durations
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.slurm import visibility
from slurm_yolo.state import availability, db
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.inbox import Inbox
from slurm_yolo.state.ledger.pricing import Pricing
from slurm_yolo.state.ledger.queries import Queries
from slurm_yolo.state.ledger.runs import Runs
from slurm_yolo.state.ledger.schema import MIGRATIONS
from slurm_yolo.state.ledger.values import (  # noqa: F401 - the ledger's names, as callers know them
    CREDITS,
    KINDS,
    REDACTED,
    Admission,
    Run,
    Settlement,
    _of,
    exempt,
    limit_seconds,
    run_key,
    run_share,
)

if TYPE_CHECKING:
    from slurm_yolo.state.ledger import mariadb


logger = logging.getLogger(__name__)


def parse_when(text: str) -> float:
    """``now``, ``now-7days`` or a local ISO time (``2026-12-01T00:00``) as epoch seconds
    (``durations.instant``), for prices that take effect later and audit windows."""
    at = durations.instant(text, time.time())
    if at is None:
        raise UsageError(f"time {text[:60]!r} not understood (now, now-7days, or e.g. 2026-12-01T00:00)")
    return at


def db_path(config: Config) -> Path:
    """The SQLite books: in the SlurmUser's private folder, never openable by users (``db``). With the
    MariaDB backend, the published copy users read is still ``db.published`` of this path."""
    return db.private_dir(config.state_dir) / "ledger.db"


def on_mariadb(config: Config) -> bool:
    """Whether the books are on the site's MariaDB (``ledger.backend``) rather than the SQLite file."""
    return config.ledger.backend == "mariadb"


def options_path(config: Config) -> Path:
    """The MariaDB option file with the ledger's database and credentials (the SlurmUser's alone)."""
    return Path(config.ledger.mariadb_options)


def where(config: Config) -> str:
    """Where the books are, for messages: for a reader who does not keep them, the copy she reads."""
    if reads_mariadb(config):
        return f"MariaDB ({options_path(config)})"
    if not is_keeper(config) or on_mariadb(config):
        return f"{db.published(db_path(config), config.public_dir)} (the published copy)"
    return str(db_path(config))


def reads_mariadb(config: Config) -> bool:
    """Whether this process reads the MariaDB books themselves: root or the SlurmUser on a host with
    the option file (without it, a login node's root reads the published copy where there is one)."""
    copy = db.published(db_path(config), config.public_dir)
    return (
        on_mariadb(config) and is_keeper(config) and (os.path.lexists(options_path(config)) or not os.path.isfile(copy))
    )


def exists(config: Config) -> bool:
    """Whether there are books yet (a MariaDB ledger makes its schema on first use: always)."""
    return on_mariadb(config) or os.path.exists(db_path(config))  # os.path: False where a user may not look


def is_keeper(config: Config) -> bool:
    """Whether this process keeps the books (root or the SlurmUser): it reads them where they are,
    and a problem there is its error; everyone else reads the published copy."""
    return db.is_keeper(config.paths.owner)


def _store(config: Config) -> store.Store:
    """A writer's connection to the books, reused within a long-lived server (``db.reuse_connections``)."""
    if on_mariadb(config):
        from slurm_yolo.state.ledger import mariadb  # the backend a site chose, loaded only there

        key = str(options_path(config))
        conn: mariadb.Connection = db.idle(key) or mariadb.connect(options_path(config), config.paths.owner)
        conn.pool_key = key
        return conn
    path = db_path(config)
    raw = db.connect_write(db.writable(path, config.paths.owner), MIGRATIONS, wal=True)
    return store.SqliteStore(raw, on_close=lambda c: db.release(path, c))


@contextmanager
def writer(config: Config, publish: bool = True) -> Iterator[Ledger]:
    """A read-write ledger (as the state's owner: see ``db.as_state_owner``). ``publish``: once it
    has written, publish what readers see (hookd publishes once per batch instead)."""
    with db.as_state_owner(config.state_dir, config.paths.owner):
        conn = _store(config)
        try:
            lg = Ledger(conn)
            yield lg
            if lg.wrote and publish:
                publish_from(lg, config)
        finally:
            conn.close()


def publish_from(lg: Ledger, config: Config) -> None:
    """What readers see, from the ledger as it is once this writer has its turn: the balances for
    slurmctld's admission (``availability``) and the published copy users read. A failure leaves the
    last ones (the admission file's stamp makes admission count every run started since as unheld:
    stale, never generous), and says so."""
    try:
        db.make_private(config.state_dir)
        with db.locked(db.private_dir(config.state_dir) / "publish.lock", "publishing the ledger"):
            availability.publish(
                config,
                lambda now: availability.render(config, now, lg.accounts(), lg.prices(), lg.tiers(), lg.held_jobs()),
            )
            db.publish_copy(
                lg.conn.snapshot,
                db_path(config),
                config.public_dir,
                redact_jobs if visibility.hides_jobs(config) else None,
            )
    except (OSError, sqlite3.Error, SlurmYoloError) as e:
        logger.warning("slurm-yolo: the ledger's published copies not updated: %s", e)


def redact_jobs(copy: sqlite3.Connection) -> None:
    """Leave each job's rows, user and summary out of a published copy (Slurm's PrivateData hides
    them): no runs, inbox, incidents or AdminComments, and movements without their job or user or the
    hold's reckoning. Balances, prices, tiers, quotas and each account's movements stay: what a login
    node plans with, per account and partition."""
    copy.executescript(f"""
        BEGIN;
        DELETE FROM jobs; DELETE FROM inbox; DELETE FROM incidents; DELETE FROM admin_comments;
        UPDATE movements SET reason = '' WHERE job_key IS NOT NULL;
        UPDATE movements SET job_key = NULL, user = NULL;
        CREATE TABLE {REDACTED} (what TEXT NOT NULL); INSERT INTO {REDACTED} VALUES ('jobs');
        COMMIT;
    """)


def publish(config: Config) -> None:
    """Publish from a fresh read of the ledger (a new install; hookd's batches; cron after a failure)."""
    with writer(config, publish=False) as lg:
        publish_from(lg, config)


def reader(config: Config) -> Ledger | None:
    """A read-only ledger for any user: the books themselves for root and the SlurmUser (who can
    read the MariaDB option file, or enter the private folder), the published copy for everyone
    else, and on a host that has no option file but the copy (a login node's root); None when there
    is neither."""
    if reads_mariadb(config):
        from slurm_yolo.state.ledger import mariadb

        return Ledger(mariadb.connect(options_path(config), config.paths.owner))
    conn = db.connect_read(db_path(config), config.public_dir)
    return Ledger(store.SqliteStore(conn)) if conn else None


class Ledger(Queries, Runs, Pricing, Inbox):
    """Ledger operations over one connection, in one class of parts: accounts, pricing, runs, the
    inbox and the outbox, the clusters sharing the books, and the queries; writes are short ``BEGIN
    IMMEDIATE`` transactions (``LedgerBase._atomic``)."""
