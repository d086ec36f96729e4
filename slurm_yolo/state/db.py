"""Opening the project's SQLite files: writers migrate, readers never write, users never touch them.

The databases (ledger, calibration), their -wal/-shm files and every lock live in ``STATE/private``,
a folder only the SlurmUser (and root) can enter: a file a user can open is a file she can lock (a
read-only descriptor takes an ``flock``, and a POSIX read lock on one byte of -shm stops every
SQLite writer), so nothing a writer waits on may be openable by users. What users read (balances,
k) is a **published copy**: ``publish_copy`` writes a consistent snapshot in the public folder
(``paths.public_dir``, by default the state folder itself: ``STATE/ledger.db``) and swaps it in with
a rename, so a reader holds an old inode that no writer ever opens again. Readers who can enter the folder read the live database; others read the copy,
``immutable=1`` (no locks taken). Every wait (SQLite's busy handler, a lock file) has a bound: past
it is one error line, never a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slurm_yolo.core.errors import SlurmYoloError

BUSY_TIMEOUT_MS = 20_000  # the longest a writer waits for another (only root and the SlurmUser can be one)
LOCK_SECONDS = 20.0  # the longest a lock file is waited for
PRIVATE = "private"  # STATE/private: the databases and locks, the SlurmUser's alone
LEGACY_LOCKS = ("availability.lock", "enforce.lock")  # kept in STATE itself by earlier releases
PUBLISHED_ID = 0x5959_5055  # PRAGMA application_id of a published copy ("YYPU"): never taken for the books
MOVED_ID = 0x5959_4D56  # of books moved to the site's MariaDB ("YYMV", ``ledger.transfer``): written no more


def private_dir(state_dir: Path) -> Path:
    """Where the databases, their -wal/-shm files and the locks live (mode 0700)."""
    return state_dir / PRIVATE


def published(path: Path, public: Path) -> Path:
    """The published copy of the private database ``path`` in the folder ``public`` (the config's
    ``public_dir``: ``STATE/private/x.db`` -> ``PUBLIC/x.db``)."""
    return public / path.name


PUBLISHED = ("ledger.db", "calibration.db")  # the copies a login node plans with (balances and prices; time models)


def public_problem(public: Path) -> str:
    """What keeps this user from the published copies in ``public`` ('' when both are readable),
    never an exception: a login node must be told, not crash."""
    if not os.path.isdir(public):
        return f"{public} is not on this host"
    try:
        missing = [n for n in PUBLISHED if not (public / n).is_file()]
        unreadable = [n for n in PUBLISHED if n not in missing and not os.access(public / n, os.R_OK)]
    except OSError as e:  # a folder this user may not enter
        return f"{public}: {e.strerror}"
    if missing:
        return f"{public} has no {' or '.join(missing)}"
    return f"{', '.join(str(public / n) for n in unreadable)} not readable" if unreadable else ""


def public_folder(public: Path) -> Path:
    """The public folder, made (world-readable, not writable) when it is not there yet."""
    public.mkdir(mode=0o755, parents=True, exist_ok=True)
    return public


def legacy(path: Path) -> Path:
    """Where an earlier release kept the private database ``path``: in the state folder itself."""
    return path.parent.parent / path.name


def make_private(state_dir: Path) -> Path:
    """Create (or tighten) ``STATE/private`` for the current (effective) user (root writes as the
    SlurmUser: ``as_state_owner``); its path."""
    folder = private_dir(state_dir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o777 != 0o700:  # whatever the umask of the moment (hookd's socket: 0o177)
        folder.chmod(0o700)
    for name in LEGACY_LOCKS:  # an earlier release's, in reach of users: no writer takes them now
        (state_dir / name).unlink(missing_ok=True)
    for entry in os.scandir(folder):  # files an earlier release (or umask) left open to others
        with contextlib.suppress(OSError):  # gone meanwhile (a temporary file), or not ours: never a writer's failure
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mode & 0o077:
                os.chmod(entry.path, 0o600)
    return folder


def create_private(path: Path) -> None:
    """Create ``path`` mode 0600 if it is missing (SQLite gives -wal and -shm the database's mode).
    Never on a database this process may have open: closing any descriptor of a file drops every
    POSIX lock the process holds on it, SQLite's included, and two writers then corrupt the file."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


@contextmanager
def locked(path: Path, what: str, seconds: float = LOCK_SECONDS) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (in the private folder), waited for at most ``seconds``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SlurmYoloError(f"{what}: {path} stayed locked for {seconds:.0f} s (another writer)") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def publish_copy(
    snapshot: Callable[[Path], None],
    path: Path,
    public: Path,
    redact: Callable[[sqlite3.Connection], None] | None = None,
) -> None:
    """Publish a consistent snapshot of the books at ``published(path, public)``, world-readable,
    swapped in with a rename (a reader keeps the inode it opened; no writer opens it again).
    ``snapshot(tmp)`` writes the copy as a new SQLite file (``backup_into``, or a MariaDB ledger's
    rows), beside its target (one file system, whatever the public folder is). ``redact(copy)``
    takes out what users may not read (Slurm's PrivateData) before anyone can: the copy is then
    rewritten whole (VACUUM), so no page of it keeps a deleted row."""
    target = published(path, public_folder(public))
    tmp = target.with_name(f".{path.name}.publish.{os.getpid()}.{threading.get_ident()}")
    tmp.unlink(missing_ok=True)
    _remove_abandoned(target.parent, path.name)
    try:
        # the copy is the owner's alone while it is written (SQLite gives its journal the file's mode):
        # world-readable only once it is whole, a moment before the rename
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        snapshot(tmp)
        copy = sqlite3.connect(tmp, isolation_level=None)
        try:
            copy.execute("PRAGMA journal_mode = DELETE")
            copy.execute(f"PRAGMA application_id = {PUBLISHED_ID}")
            if redact is not None:
                copy.execute("PRAGMA secure_delete = ON")
                redact(copy)
                copy.execute("VACUUM")
        finally:
            copy.close()
        tmp.chmod(0o644)
        os.replace(tmp, target)  # across folders of one file system: atomic
    finally:
        tmp.unlink(missing_ok=True)


def _remove_abandoned(folder: Path, name: str) -> None:
    """The copies (and their journals) of publishers killed mid-publish (kill -9, OOM): their process
    is gone, so nothing else removes them, and each is a whole ledger's size."""
    for leftover in folder.glob(f".{name}.publish.*"):
        pid = leftover.name.removeprefix(f".{name}.publish.").split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except PermissionError:
            pass  # another user's live process: its publish may be going on


def backup_into(conn: sqlite3.Connection) -> Callable[[Path], None]:
    """A ``publish_copy`` snapshot of the SQLite database ``conn``: SQLite's online backup."""

    def write(path: Path) -> None:
        copy = sqlite3.connect(path, isolation_level=None)
        try:
            conn.backup(copy)
        finally:
            copy.close()

    return write


def adopt_legacy(path: Path) -> None:
    """An earlier release kept ``path`` in the state folder itself, where users could open (and lock)
    it: copy its books into the private folder (a new inode no user holds), once, before any writer
    opens ``path``. The old file is then overwritten by the first published copy."""
    old = legacy(path)
    if os.path.exists(path) or not old.is_file():
        return
    src = sqlite3.connect(old, timeout=BUSY_TIMEOUT_MS / 1000)  # the owner's: its -wal is read too
    try:
        if src.execute("PRAGMA application_id").fetchone()[0] == PUBLISHED_ID:
            return  # a published copy, never the books
        tmp = path.with_name(f".{path.name}.adopt.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        create_private(tmp)
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
        os.replace(tmp, path)
    finally:
        src.close()
    for suffix in ("-wal", "-shm"):  # the old database's: a published copy has none
        old.with_name(old.name + suffix).unlink(missing_ok=True)


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


def is_keeper(owner: str) -> bool:
    """Whether this process keeps the books: root, or the SlurmUser ``owner`` (a name unknown here:
    root alone)."""
    import pwd

    try:
        return os.geteuid() in (0, pwd.getpwnam(owner).pw_uid)
    except KeyError:
        return os.geteuid() == 0


def writable(path: Path, owner: str) -> Path:
    """``path``, or a one-line refusal when this user may not write it."""
    target = path if os.path.exists(path) else path.parent  # os.path: False, not an error, where it may not look
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise SlurmYoloError(f"permission denied: {path} is written only by root or the SlurmUser ({owner})")
    return path


def reuse_connections() -> None:
    """Keep writer connections open between uses, for a long-lived server (hookd): opening one, and
    closing a WAL database's last one (a checkpoint), cost more than the transactions they carry."""
    global _idle
    _idle = {}


_idle: dict[str, list[Any]] | None = None  # reusable writer connections (SQLite's, MariaDB's), by where they go
_idle_lock = threading.Lock()


def idle(key: str) -> Any | None:
    """A kept writer connection to ``key`` (a database's path, a MariaDB option file), if any."""
    if _idle is None:
        return None
    with _idle_lock:
        return _idle[key].pop() if _idle.get(key) else None


def keep(key: str, conn: Any) -> bool:
    """Keep ``conn`` for the next writer to ``key`` when reusing (and it is not inside a
    transaction); whether it was kept."""
    if _idle is None or conn.in_transaction:
        return False
    with _idle_lock:
        _idle.setdefault(key, []).append(conn)
    return True


def close_idle() -> None:
    """Close every kept connection and keep no more (a server's last act: a MariaDB socket left to
    the interpreter's exit is closed after the modules it needs are gone, and says so on stderr)."""
    global _idle
    with _idle_lock:
        kept = [conn for conns in (_idle or {}).values() for conn in conns]
        _idle = None  # closing one must not keep it again
    for conn in kept:
        with contextlib.suppress(Exception):  # a connection its server dropped already
            conn.close()


def release(path: Path, conn: sqlite3.Connection) -> None:
    """Done with a ``connect_write`` connection: kept for the next writer when reusing, else closed."""
    if not keep(str(path), conn):
        conn.close()


def connect_write(path: Path, migrations: Sequence[str], wal: bool = False) -> sqlite3.Connection:
    """A read-write connection with the schema brought up to date (numbered migrations)."""
    kept = idle(str(path))
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    try:
        make_private(path.parent.parent)
        if not os.path.exists(path):  # made once, under a lock: see create_private
            with locked(path.parent / "adopt.lock", f"moving {legacy(path)} into {path.parent}"):
                adopt_legacy(path)
                if not os.path.exists(path):
                    create_private(path)
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=_idle is None
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a commit (a hold, an inbox row) survives power loss too
        refuse_moved(conn, path)
        migrate(conn, migrations)
    except (OSError, sqlite3.Error) as e:
        raise SlurmYoloError(f"cannot open {path} for writing: {e}") from None
    return conn


def connect_read(path: Path, public: Path) -> sqlite3.Connection | None:
    """A read-only connection to the private database ``path`` when this user can enter its folder,
    else to its published copy in ``public`` (``immutable=1``: no lock taken); None when neither
    exists (yet, or on this host)."""
    suffixes: tuple[str, ...] = ("?mode=ro", "?immutable=1")
    if os.access(path.parent, os.X_OK) and os.path.exists(path):
        pass
    elif _is_file(published(path, public)):
        path, suffixes = published(path, public), ("?immutable=1",)
    else:
        return None
    uri = "file:" + str(path.resolve()).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    last: sqlite3.Error | None = None
    for suffix in suffixes:
        try:
            conn = sqlite3.connect(uri + suffix, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.row_factory = sqlite3.Row
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            refuse_moved(conn, path)  # the books are elsewhere now: never a reading of the old ones
            return conn
        except sqlite3.Error as e:
            last = e
    raise SlurmYoloError(f"cannot read {path}: {last}")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError as e:  # a public folder this user may not enter
        raise SlurmYoloError(
            f"cannot read {path}: {e.strerror}: the public folder must be open to every user (chmod 755)"
        ) from None


def refuse_moved(conn: sqlite3.Connection, path: Path | str) -> None:
    """One error line, never a write, for books that were moved to MariaDB (``mark_moved``)."""
    if conn.execute("PRAGMA application_id").fetchone()[0] == MOVED_ID:
        raise SlurmYoloError(f'{path}: these books were moved to MariaDB; set ledger.backend = "mariadb"')


def mark_moved(conn: sqlite3.Connection) -> None:
    """Mark the books of ``conn`` (in its write transaction) as moved: no writer opens them again."""
    conn.execute(f"PRAGMA application_id = {MOVED_ID}")


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
