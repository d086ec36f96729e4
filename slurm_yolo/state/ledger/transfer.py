"""Moving a site's books from the SQLite file to its MariaDB server, checked before anything is kept.

The copy runs while the SQLite writer's lock is held, so no hook moves a token in between, and in
one MariaDB transaction, so a copy that does not check out leaves the server as it was. What is
checked: both ledgers pass ``Ledger.check`` (the invariant, to the token), every account's totals
are equal, every table has as many rows. Once kept, the SQLite file is marked as moved: a writer
still configured for it (a hookd not yet restarted, a cron job) refuses it with one line that says
where the books are now, rather than writing into books nobody reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.state import db
from slurm_yolo.state.ledger import Ledger, db_path, is_keeper, mariadb, on_mariadb, store
from slurm_yolo.state.ledger.schema import MIGRATIONS

TOTALS = ("balance", "held", "charged", "expired", "credited", "rate_per_day", "capacity", "blocked")
BOOKS = ("accounts", "movements", "jobs")  # a source without any of these has nothing to move


class Transferred(NamedTuple):
    rows: dict[str, int]  # per table, rows copied
    accounts: int


def to_mariadb(config: Config, options: Path) -> Transferred:
    """Copy the SQLite books of ``config`` into the (empty) MariaDB ledger of ``options``, check them,
    keep them, and mark the SQLite file as moved; what was copied."""
    if on_mariadb(config):
        raise UsageError(
            f'ledger.backend is "mariadb" in {config.path or "the config"} already: run the move with'
            " the SQLite config, and switch it afterwards"
        )
    if not is_keeper(config):
        raise UsageError(f"permission denied: the books are moved by root or the SlurmUser ({config.paths.owner})")
    path = db_path(config)
    if not path.exists() and not db.published(path, config.public_dir).is_file():
        raise UsageError(f"no SQLite ledger at {path} to move (a new site: just set ledger.backend)")
    target = mariadb.connect(options, config.paths.owner)
    try:
        with db.as_state_owner(config.state_dir, config.paths.owner):
            source = store.SqliteStore(db.connect_write(path, MIGRATIONS, wal=True))  # adopts an earlier layout's
        try:
            source.begin()  # the writers' lock, until the copy is kept and the file marked
            try:
                copied = _copy(source, target, options)
                db.mark_moved(source.raw)
                source.commit()
            except BaseException:
                source.rollback()
                raise
        finally:
            source.close()
    finally:
        target.close()
    return copied


def _copy(source: store.SqliteStore, target: mariadb.Connection, options: Path) -> Transferred:
    tables = [
        r[0]
        for r in source.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name"
        )
    ]
    if not any(source.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0] for table in BOOKS):
        raise UsageError("the SQLite ledger has no books to move (a new site: just set ledger.backend)")
    for table in tables:
        if target.execute(f"SELECT EXISTS (SELECT 1 FROM `{table}`)").fetchall()[0][0]:
            raise UsageError(
                f"the MariaDB ledger of {options} has {table} already: the move takes only a new, empty database"
            )
    rows: dict[str, int] = {}
    target.begin()
    try:
        for table in tables:
            columns = [r[1] for r in source.execute(f"PRAGMA table_info({table})")]
            data = [tuple(r) for r in source.execute(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM {table}")]
            target.insert_many(table, columns, data)
            rows[table] = len(data)
        problems = _differences(Ledger(source), Ledger(target), rows)
        if problems:
            raise UsageError("the copy does not check out, nothing kept: " + "; ".join(problems[:5]))
        target.commit()
    except BaseException:
        target.rollback()
        raise
    return Transferred(rows, rows.get("accounts", 0))


def _differences(old: Ledger, new: Ledger, rows: dict[str, int]) -> list[str]:
    """What tells the copy from its source (empty: the same books)."""
    problems = [f"SQLite: {p}" for p in old.check()] + [f"MariaDB: {p}" for p in new.check()]
    before = {a["name"]: tuple(a[c] for c in TOTALS) for a in old.accounts()}
    after = {a["name"]: tuple(a[c] for c in TOTALS) for a in new.accounts()}
    problems += [
        f"account {name}: {before.get(name)} became {after.get(name)}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    ]
    for table, n in rows.items():
        copied = new.conn.execute(f"SELECT count(*) FROM `{table}`").fetchone()[0]
        if copied != n:
            problems.append(f"{table}: {n} rows, {copied} copied")
    return problems
