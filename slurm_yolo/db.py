"""Opening the project's SQLite files: writers migrate, readers never write.

Users read k and balances from files owned by the SlurmUser that they cannot write. A read-only
connection cannot create a WAL database's -shm file, so readers open ``mode=ro`` and, when SQLite
refuses that, ``immutable=1`` (safe when no writer is connected, which is when -shm is missing).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import SlurmYoloError

BUSY_TIMEOUT_MS = 30_000


@contextmanager
def as_state_owner(state_dir: Path, owner: str) -> Iterator[None]:
    """Root writes the state as its owner (the SlurmUser), so the databases and their -wal/-shm files
    stay writable by the slurmctld-side hooks; everyone else writes as themselves."""
    ids = None
    if os.geteuid() == 0:
        import pwd

        try:
            pw = pwd.getpwnam(owner)
            if state_dir.exists() and state_dir.stat().st_uid == pw.pw_uid:
                ids = (pw.pw_uid, pw.pw_gid)
        except KeyError:
            pass
    old_umask = os.umask(0o022)
    try:
        if ids:
            os.setegid(ids[1])
            os.seteuid(ids[0])
        yield
    finally:
        if ids:
            os.seteuid(0)
            os.setegid(0)
        os.umask(old_umask)


def writable(path: Path, owner: str) -> Path:
    """``path``, or a one-line refusal when this user may not write it."""
    target = path if path.exists() else path.parent
    if target.exists() and not os.access(target, os.W_OK):
        raise SlurmYoloError(f"permission denied: {path} is written only by root or the SlurmUser ({owner})")
    return path


def reuse_connections() -> None:
    """Keep writer connections open between uses, for a long-lived server (hookd): opening one, and
    closing a WAL database's last one (a checkpoint), cost more than the transactions they carry."""
    global _idle
    _idle = {}


_idle: dict[Path, list[sqlite3.Connection]] | None = None  # reusable writer connections, by path
_idle_lock = threading.Lock()


def release(path: Path, conn: sqlite3.Connection) -> None:
    """Done with a ``connect_write`` connection: kept for the next writer when reusing, else closed."""
    if _idle is not None and not conn.in_transaction:
        with _idle_lock:
            _idle.setdefault(path, []).append(conn)
        return
    conn.close()


def connect_write(path: Path, migrations: Sequence[str], wal: bool = False) -> sqlite3.Connection:
    """A read-write connection with the schema brought up to date (numbered migrations)."""
    if _idle is not None:
        with _idle_lock:
            if _idle.get(path):
                return _idle[path].pop()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=_idle is None
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn, migrations)
    except (OSError, sqlite3.Error) as e:
        raise SlurmYoloError(f"cannot open {path} for writing: {e}") from None
    return conn


def connect_read(path: Path) -> sqlite3.Connection | None:
    """A read-only connection, or None when the database does not exist yet."""
    if not path.exists():
        return None
    uri = "file:" + str(path.resolve()).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    last: sqlite3.Error | None = None
    for suffix in ("?mode=ro", "?immutable=1"):
        try:
            conn = sqlite3.connect(uri + suffix, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.row_factory = sqlite3.Row
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as e:
            last = e
    raise SlurmYoloError(f"cannot read {path}: {last}")


def migrate(conn: sqlite3.Connection, migrations: Sequence[str]) -> None:
    """Apply the migrations past ``PRAGMA user_version``, each in its own transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, script in enumerate(migrations[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another writer may have migrated while we waited for the lock.
            if conn.execute("PRAGMA user_version").fetchone()[0] >= number:
                conn.execute("COMMIT")
                continue
            for statement in script.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
