"""The token ledger (ledger.db, SQLite in WAL mode): accounts, append-only movements, per-run holds.

Every change is a movement row (deposit, refill, adjustment, hold, charge, refund, expiry) written in
the same ``BEGIN IMMEDIATE`` transaction as the account totals it moves, so the invariant

    credited (deposits + refills + adjustments) = balance + held + charged + expired

holds after every commit, and ``check`` can prove it from the movements alone. A job run is keyed by
cluster, job id and the run's submit time: its hold and its settlement happen at most once,
whatever order or number of prolog/epilog invocations Slurm produces.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from slurm_yolo.core.billing import bucket, comment, policy
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.slurm import visibility
from slurm_yolo.state import availability, db
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.schema import MIGRATIONS

if TYPE_CHECKING:
    from slurm_yolo.state.ledger import mariadb

CREDITS = ("deposit", "refill", "adjustment")
KINDS = (*CREDITS, "hold", "charge", "refund", "expiry", "overrun")
_WRITE_TURN = threading.Lock()
T = TypeVar("T")


class Run(NamedTuple):
    """One run of a job, from facts slurmctld sets, with the price and tier rate it is billed at."""

    cluster: str
    job_id: int
    submit: int  # epoch seconds: a requeued job's next run has its own
    restart: int
    account: str
    user: str
    partition: str
    qos: str
    gpus: Fraction  # whole GPUs, or shards as a share of one
    time_limit: int | None  # seconds; None: unlimited
    hold_seconds: int  # what the hold covers (the limit, or the configured cap)
    price: int  # tokens per GPU-second, the partition's price when the run was held
    rate_ppm: int  # the QOS tier's rate when the run was held, in parts per million

    @property
    def key(self) -> str:
        return run_key(self.cluster, self.job_id, self.submit)


def run_key(cluster: str, job_id: int, submit: int) -> str:
    """A run's key from Slurm's own numbers (the cluster's name, the job id, the run's submit time in
    epoch seconds): the same whichever hook or reconcile meets the run first."""
    return f"{cluster}:{int(job_id)}:{int(submit)}"


def limit_seconds(time_limit: int | None, config: Config) -> int:
    """A run's time limit as Slurm reports it (seconds; None: unlimited), or the configured cap: what
    its hold covers at the start, and what a TIMEOUT pays at least at the end (the limit then)."""
    return policy.hold_seconds(time_limit, policy.unlimited_cap(config.ledger.unlimited_hold_hours))


def run_share(row: store.Row) -> Fraction:
    """A held run's GPU share as the exact rational it was held at (a row of the jobs table)."""
    return Fraction(row["gpus_num"], row["gpus_den"])


class Admission(NamedTuple):
    """``Ledger.admit``'s answer, with the numbers a refusal shows."""

    ok: bool
    balance: int
    committed_here: int  # the account's pending worst cases on the asking cluster, before this job
    committed_elsewhere: int  # and on the ledger's other clusters
    wait: float = 0.0  # not ok now, but the account's refill covers it in this many seconds: it waits


class Settlement(NamedTuple):
    """What an epilog did: charged, refunded, and whether the account crossed zero."""

    key: str
    account: str
    hold: int
    charge: int
    refund: int
    balance: int
    blocked: bool | None  # the account's new blocked state, when this settlement changed it


def parse_when(text: str) -> float:
    """``now`` or a local ISO time (``2026-12-01T00:00``) as epoch seconds, for prices that take effect later."""
    from datetime import datetime

    if text.strip().lower() == "now":
        return time.time()
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(f"time {text!r} not understood (now, or e.g. 2026-12-01T00:00)") from None


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
        print(f"slurm-yolo: the ledger's published copies not updated: {e}", file=sys.stderr)


REDACTED = "redacted"  # the published copy's table that says what was left out of it


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


def _of(cluster: str | None, unknown: bool = False) -> tuple[str, tuple[str, ...]]:
    """The SQL that keeps the rows of one cluster (None: every cluster; ``unknown``: with the rows of
    no known cluster): several clusters' runs share one MariaDB ledger, and each cluster's settler,
    reconcile and audit ask its own Slurm about its own runs only."""
    if cluster is None:
        return "", ()
    return ("AND cluster IN (?, '')", (cluster,)) if unknown else ("AND cluster = ?", (cluster,))


class Ledger:
    """Ledger operations; writes are short ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, conn: store.Store) -> None:
        self.conn = conn
        self.wrote = False  # a transaction committed: the admission file is out of date

    def close(self) -> None:
        self.conn.close()

    def version(self) -> int | None:
        """A number every write transaction changes, whoever wrote (None: only this host writes: SQLite)."""
        return self.conn.version()

    def __enter__(self) -> Ledger:
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

    # --- movements (called inside a transaction) -------------------------------------------------

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

    # --- public writes --------------------------------------------------------------------------

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

    def set_tier(self, qos: str, rate: str, cluster: str = "") -> int:
        """Charge multiplier for jobs of ``qos`` (e.g. prod 0.8, explore 1.5), read exactly from its
        decimal text (``policy.parse_rate``), on ``cluster`` alone or ('') on every cluster of this
        ledger that has no rate of its own for the QOS; the rate kept, in parts per million."""
        ppm = policy.parse_rate(rate)

        def body() -> Any:
            self.conn.execute(
                "INSERT INTO tiers (cluster, qos, rate, rate_ppm) VALUES (?, ?, ?, ?) ON CONFLICT (cluster, qos) DO UPDATE"
                " SET rate = excluded.rate, rate_ppm = excluded.rate_ppm",
                (cluster, qos, ppm / policy.RATE_SCALE, ppm),
            )

        self._atomic(body)
        return ppm

    def remove_tier(self, qos: str, cluster: str = "") -> bool:
        """Jobs of ``qos`` held from now on pay the price again (or every cluster's rate, when a
        cluster's own is removed); runs already held keep the rate they were held at. Whether there
        was such a tier."""

        def body() -> Any:
            return self.conn.execute("DELETE FROM tiers WHERE cluster = ? AND qos = ?", (cluster, qos)).rowcount > 0

        return bool(self._atomic(body))

    def tiers(self) -> list[store.Row]:
        return self.conn.execute("SELECT cluster, qos, rate_ppm FROM tiers ORDER BY qos, cluster").fetchall()

    def tier_rate(self, qos: str, cluster: str = "") -> int:
        """The tier's rate in parts per million on ``cluster`` (its own, else every cluster's;
        1,000,000: a QOS without a tier pays the price)."""
        row = self.conn.execute(
            "SELECT rate_ppm FROM tiers WHERE qos = ? AND cluster IN (?, '') ORDER BY cluster DESC LIMIT 1",
            (qos, cluster),
        ).fetchone()
        return int(row["rate_ppm"]) if row else policy.RATE_SCALE

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

    def hold(self, run: Run, amount: int, estimate: int | None, actor: str) -> tuple[bool, bool | None]:
        """Hold ``amount`` for this run unless it is held already: (held now, new blocked state)."""
        now = time.time()

        def body() -> Any:
            if self.conn.execute("SELECT 1 FROM jobs WHERE job_key = ?", (run.key,)).fetchone():
                return False, None
            self._refill(run.account, now)
            self._join(run.cluster, now)
            self._insert_run(run, amount, estimate, now, actor)
            self.conn.execute(  # no longer pending: what admission elsewhere counted for it is in the hold now
                "UPDATE commitments SET tokens = CASE WHEN tokens > ? THEN tokens - ? ELSE 0 END"
                " WHERE cluster = ? AND account = ?",
                (amount, amount, run.cluster, run.account),
            )
            self._move(
                run.account,
                "hold",
                amount,
                now,
                actor,
                job_key=run.key,
                user=run.user,
                reason=f"{run.hold_seconds}s x {run.gpus} GPU x {run.price} tok/GPU-s x {policy.rate_text(run.rate_ppm)}",
            )
            return True, self._update_block(run.account)

        return self._atomic(body)

    def admit(
        self, cluster: str, account: str, need: int, committed: dict[str, int], max_wait: float = 0.0
    ) -> Admission:
        """Admission on a ledger several clusters share, in one turn with every other cluster's: the
        job (worst case ``need``) fits when the account's balance covers what ``cluster`` commits to it
        (``committed``: its pending GPU jobs per account, as its job_submit.lua counts them), what the
        other clusters committed at their last admission, and ``need``; or, when the account's refill
        covers all that within ``max_wait`` seconds, it waits that long (``Admission.wait``). This
        cluster's commitments are replaced by ``committed`` (and ``need`` when admitted or waiting):
        what the next admission anywhere sees. Stale only upward (a job started since is counted until
        its cluster's next admission, a hold takes its amount off at once): never generous."""
        now = time.time()

        def body() -> Admission:
            self.conn.execute("DELETE FROM commitments WHERE cluster = ?", (cluster,))
            mine = dict(committed)
            balance, capacity, rate = 0, 0, 0  # an account without a ledger entry has nothing to spend
            if self.conn.execute("SELECT 1 FROM accounts WHERE name = ?", (account,)).fetchone() is not None:
                self._refill(account, now)
                row = self._account(account, now)
                balance, capacity, rate = row["balance"], row["capacity"], row["rate_per_day"]
            elsewhere = self.conn.execute(
                "SELECT coalesce(sum(tokens), 0) FROM commitments WHERE account = ? AND cluster <> ?",
                (account, cluster),
            ).fetchone()[0]
            total = need + mine.get(account, 0) + elsewhere
            ok = total <= balance
            wait = None if ok or max_wait <= 0 else bucket.seconds_to_cover(total, balance, capacity, rate)
            waits = wait is not None and wait <= max_wait
            if ok or waits:
                mine[account] = mine.get(account, 0) + need
            for name, tokens in mine.items():
                if tokens > 0:
                    self.conn.execute(
                        "INSERT INTO commitments (cluster, account, tokens, counted_at) VALUES (?, ?, ?, ?)",
                        (cluster, name, tokens, now),
                    )
            return Admission(
                ok, int(balance), committed.get(account, 0), int(elsewhere), float(wait or 0) if waits else 0.0
            )

        return self._atomic(body)

    def commitments(self, cluster: str | None = None) -> list[store.Row]:
        """What each cluster's (or ``cluster``'s) pending GPU jobs may still hold, per account (``admit``)."""
        where, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM commitments WHERE tokens > 0 {where} ORDER BY cluster, account", args
        ).fetchall()

    def forget_commitments(self, cluster: str, accounts: Iterable[str], counted_before: float) -> None:
        """``cluster`` has no job of these accounts pending any more: what its last admission counted
        for them (before ``counted_before``) is gone, and admission elsewhere stops counting it."""
        names = sorted(set(accounts))

        def body() -> None:
            for name in names:
                self.conn.execute(
                    "DELETE FROM commitments WHERE cluster = ? AND account = ? AND counted_at < ?",
                    (cluster, name, counted_before),
                )

        if names:
            self._atomic(body)

    def _join(self, cluster: str, now: float) -> float:
        row = self.conn.execute("SELECT joined_at FROM clusters WHERE name = ?", (cluster,)).fetchone()
        if row is not None:
            return float(row["joined_at"])
        self.conn.execute("INSERT INTO clusters (name, joined_at) VALUES (?, ?)", (cluster, now))
        return now

    def join(self, cluster: str) -> float:
        """Since when this ledger keeps ``cluster``'s runs, from now on if it did not yet (its hookd's
        start, its first hold or reconcile): runs that started before were billed elsewhere, if at all."""
        return self._atomic(lambda: self._join(cluster, time.time()))

    def clusters(self) -> list[str]:
        """The clusters whose runs this ledger keeps (``join``)."""
        return [str(r["name"]) for r in self.conn.execute("SELECT name FROM clusters ORDER BY name")]

    def joined_at(self, cluster: str) -> float | None:
        """Since when this ledger keeps ``cluster``'s runs (None: not yet)."""
        row = self.conn.execute("SELECT joined_at FROM clusters WHERE name = ?", (cluster,)).fetchone()
        return float(row["joined_at"]) if row else None

    def _insert_run(self, run: Run, amount: int, estimate: int | None, now: float, actor: str) -> None:
        self.conn.execute(
            "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, `partition`, qos, gpus,"
            " gpus_num, gpus_den, price, rate, rate_ppm, time_limit, hold_seconds, estimate, hold, held_at, held_by)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.key,
                run.cluster,
                run.job_id,
                run.submit,
                run.restart,
                run.account,
                run.user,
                run.partition,
                run.qos,
                float(run.gpus),
                run.gpus.numerator,
                run.gpus.denominator,
                run.price,
                run.rate_ppm / policy.RATE_SCALE,
                run.rate_ppm,
                run.time_limit,
                run.hold_seconds,
                estimate,
                amount,
                now,
                actor,
            ),
        )

    def run(self, key: str) -> store.Row | None:
        return self.conn.execute("SELECT * FROM jobs WHERE job_key = ?", (key,)).fetchone()

    def held_runs(self, cluster: str, job_id: int) -> list[store.Row]:
        """The job's runs still holding tokens."""
        return self.conn.execute(
            "SELECT * FROM jobs WHERE cluster = ? AND job_id = ? AND state = 'held'", (cluster, job_id)
        ).fetchall()

    def held_jobs(self) -> list[tuple[str, int]]:
        """(cluster, job id) of every run holding tokens now."""
        return [
            (r["cluster"], r["job_id"])
            for r in self.conn.execute("SELECT DISTINCT cluster, job_id FROM jobs WHERE state = 'held'")
        ]

    def stale_holds(self, older_than: float, cluster: str | None = None) -> list[store.Row]:
        """Runs (of ``cluster``; None: of every cluster) held since before ``older_than`` (epoch
        seconds) and still not settled."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM jobs WHERE state = 'held' AND held_at < ? {of} ORDER BY held_at", (older_than, *args)
        ).fetchall()

    # --- prices (admin-set, versioned) -----------------------------------------------------------

    def set_price(
        self, partition: str, price: int, effective_at: float, actor: str, reason: str = "", cluster: str = ""
    ) -> None:
        """From ``effective_at`` on, runs of ``partition`` are held and billed at ``price`` tokens per
        GPU-second, on ``cluster`` alone or ('') on every cluster of this ledger that has no price of
        its own for the partition. Runs already held keep the price they were held at."""
        if not isinstance(price, int) or price <= 0:
            raise UsageError(f"a price must be a positive whole number of tokens per GPU-second (got {price})")
        if not partition or not partition.isprintable():
            raise UsageError("a price needs a plain partition name")
        now = time.time()

        def body() -> Any:
            self.conn.execute(
                "INSERT INTO prices (cluster, `partition`, price, effective_at, set_at, actor, reason)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cluster, partition, price, max(effective_at, now), now, actor, reason),
            )

        self._atomic(body)

    def price_at(self, partition: str, at: float, default: int, cluster: str = "") -> int:
        """The partition's price at ``at`` on ``cluster``: the newest version in effect then of the
        cluster's own prices, else of every cluster's, else ``default``."""
        row = self.conn.execute(
            "SELECT price FROM prices WHERE `partition` = ? AND cluster IN (?, '') AND effective_at <= ?"
            " ORDER BY cluster DESC, effective_at DESC, id DESC LIMIT 1",
            (partition, cluster, at),
        ).fetchone()
        return int(row["price"]) if row else default

    def has_cluster_prices(self) -> bool:
        """Some cluster of this ledger has prices or tiers of its own (``set_price``, ``set_tier``)."""
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM prices WHERE cluster <> '')"
            " OR EXISTS (SELECT 1 FROM tiers WHERE cluster <> '')"
        ).fetchone()
        return bool(row[0])

    def cancel_prices(self, partition: str, cluster: str = "") -> list[store.Row]:
        """Drop the versions of ``partition``'s price (on ``cluster``, or '' every cluster's) that
        have not taken effect yet: a price scheduled by mistake. Versions in effect stay (runs were
        held at them, and the books show when each applied). The versions dropped."""
        now = time.time()
        where = "cluster = ? AND `partition` = ? AND effective_at > ?"

        def body() -> Any:
            rows = self.conn.execute(
                f"SELECT * FROM prices WHERE {where} ORDER BY effective_at, id", (cluster, partition, now)
            ).fetchall()
            self.conn.execute(f"DELETE FROM prices WHERE {where}", (cluster, partition, now))
            return rows

        return list(self._atomic(body))

    def prices(self) -> list[store.Row]:
        return self.conn.execute("SELECT * FROM prices ORDER BY cluster, `partition`, effective_at, id").fetchall()

    # --- the settler's inbox: epilog events hookd acknowledged, until their runs are settled -------

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

    # --- incidents (a hook that failed: visible until its runs are settled) -----------------------

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

    def inbox_row_due(self, row_id: int) -> float | None:
        """When the inbox row falls due again (None: done)."""
        row = self.conn.execute("SELECT due_at FROM inbox WHERE id = ? AND done_at IS NULL", (row_id,)).fetchone()
        return None if row is None else float(row["due_at"])

    def held_between(self, since: float, before: float, cluster: str | None = None) -> list[store.Row]:
        """(job_key, job_id) of the runs (of ``cluster``; None: of every cluster) held in [since, before)."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT job_key, job_id FROM jobs WHERE held_at >= ? AND held_at < ? {of}", (since, before, *args)
        ).fetchall()

    def last_charges(self) -> dict[str, float]:
        """When each account was last charged."""
        rows = self.conn.execute("SELECT account, max(at) FROM movements WHERE kind = 'charge' GROUP BY account")
        return {r[0]: float(r[1]) for r in rows}

    def billed_runs(self) -> list[store.Row]:
        """Every run's job id, submit time, what it was held and billed at, and its estimate (reports)."""
        return self.conn.execute(
            "SELECT job_id, submit_time, hold, charge, refund, price, estimate FROM jobs"
        ).fetchall()

    def charged_since(self, since: float) -> dict[str, int]:
        """Per account, what was charged (overruns included) since ``since``."""
        rows = self.conn.execute(
            "SELECT account, sum(amount) FROM movements WHERE kind IN ('charge', 'overrun') AND at >= ?"
            " GROUP BY account",
            (since,),
        )
        return {r[0]: int(r[1]) for r in rows}

    def settled_since(self, since: float) -> list[store.Row]:
        """(account, partition, gpus, elapsed) of the runs settled since ``since``: GPU-hours, and so
        money at each partition's cost_per_gpu_hour, per account (``alerts``)."""
        return self.conn.execute(
            "SELECT account, `partition`, gpus, elapsed FROM jobs WHERE state = 'settled' AND settled_at >= ?",
            (since,),
        ).fetchall()

    def first_movements(self) -> dict[str, float]:
        """Per account, when its first movement was: how long it has had a budget at all."""
        rows = self.conn.execute("SELECT account, min(at) FROM movements GROUP BY account")
        return {r[0]: float(r[1]) for r in rows}

    def movements_since(self, since: float, accounts: list[str]) -> list[store.Row]:
        """(account, at, kind, amount) of the accounts' movements since ``since``."""
        marks = ",".join("?" * len(accounts))
        return self.conn.execute(
            f"SELECT account, at, kind, amount FROM movements WHERE at >= ? AND account IN ({marks})",
            (since, *accounts),
        ).fetchall()

    def open_incidents(self, cluster: str | None = None) -> list[store.Row]:
        """Hook failures not yet over, of ``cluster`` (and those of no known cluster; None: of every cluster)."""
        of, args = _of(cluster, unknown=True)
        return self.conn.execute(f"SELECT * FROM incidents WHERE resolved_at IS NULL {of} ORDER BY at", args).fetchall()

    # --- the site's own Slurm limits, kept while a block replaces them (``enforcement``) ----------

    def site_limits(self, cluster: str) -> dict[str, str]:
        """The kept GrpTRESRunMins (sacctmgr's text) of each account blocked on ``cluster``."""
        rows = self.conn.execute("SELECT account, grp_tres_run_mins FROM site_limits WHERE cluster = ?", (cluster,))
        return {r["account"]: r["grp_tres_run_mins"] for r in rows}

    def keep_site_limits(self, cluster: str, account: str, grp_tres_run_mins: str) -> None:
        def body() -> Any:
            self.conn.execute(
                "INSERT INTO site_limits (cluster, account, grp_tres_run_mins, kept_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (cluster, account) DO UPDATE SET grp_tres_run_mins = excluded.grp_tres_run_mins,"
                " kept_at = excluded.kept_at",
                (cluster, account, grp_tres_run_mins, time.time()),
            )

        self._atomic(body)

    def forget_site_limits(self, cluster: str, account: str) -> None:
        def body() -> Any:
            self.conn.execute("DELETE FROM site_limits WHERE cluster = ? AND account = ?", (cluster, account))

        self._atomic(body)

    def release(self, key: str, charge: int, actor: str, reason: str) -> Settlement:
        """An admin's end for a hold that Slurm's records can no longer settle (purged from sacct, a
        run sacct never showed): charge ``charge`` (0: release it all), refund the rest, with why."""
        if not reason.strip():
            raise UsageError("a release needs a --reason (it stays with the movements)")
        row = self.run(key)
        if row is None:
            raise UsageError(f"no run {key!r} in the ledger (ledger audit lists the open holds)")
        if row["state"] != "held":
            raise UsageError(f"run {key} is settled already ({row['end_state']}, charged {row['charge']})")
        if not 0 <= charge <= row["hold"]:
            raise UsageError(f"a release charges between 0 and the run's hold ({row['hold']}), not {charge}")
        done = self.settle(key, charge, "RELEASED", 0, actor, reason=f"released: {reason.strip()}")
        if done is None:  # settled meanwhile (its epilog, the settler)
            raise UsageError(f"run {key} was settled meanwhile")
        return done

    def settle(
        self, key: str, charge: int, end_state: str, elapsed: int, actor: str, reason: str = ""
    ) -> Settlement | None:
        """Charge ``charge`` and refund the rest of the hold, once; None if already settled. A charge
        past the hold (a run that outlived its limit) takes the rest from the balance ("overrun").
        ``reason``: kept with the movements (default: the end state)."""
        now = time.time()
        charge = max(0, charge)

        def body() -> Any:
            row = self.conn.execute("SELECT * FROM jobs WHERE job_key = ?", (key,)).fetchone()
            if row is None or row["state"] != "held":
                return None
            from_hold = min(charge, row["hold"])
            refund = row["hold"] - from_hold
            who = {"job_key": key, "user": row["user"], "reason": reason or end_state}
            self._move(row["account"], "charge", from_hold, now, actor, **who)
            self._move(row["account"], "refund", refund, now, actor, **who)
            if charge > from_hold:
                self._move(row["account"], "overrun", charge - from_hold, now, actor, **who)
            self.conn.execute(
                "UPDATE jobs SET state = 'settled', charge = ?, refund = ?, end_state = ?, elapsed = ?, settled_at = ?,"
                " settled_by = ? WHERE job_key = ?",
                (charge, refund, end_state, elapsed, now, actor, key),
            )
            self.conn.execute(
                "UPDATE incidents SET resolved_at = ? WHERE resolved_at IS NULL AND cluster IN (?, '') AND job_id = ?",
                (now, row["cluster"], row["job_id"]),
            )
            self._queue_comment(row["cluster"], row["job_id"], now)
            blocked = self._update_block(row["account"])
            balance = self.conn.execute("SELECT balance FROM accounts WHERE name = ?", (row["account"],)).fetchone()[0]
            return Settlement(key, row["account"], row["hold"], charge, refund, balance, blocked)

        return self._atomic(body)

    # --- AdminComments (the books in sacct), queued with the settlement until sacctmgr takes them ---

    def _queue_comment(self, cluster: str, job_id: int, now: float) -> None:
        settled = self.conn.execute(
            "SELECT * FROM jobs WHERE cluster = ? AND job_id = ? AND state = 'settled'", (cluster, job_id)
        ).fetchall()
        self.conn.execute(
            "INSERT INTO admin_comments (cluster, job_id, text, queued_at) VALUES (?, ?, ?, ?) ON CONFLICT (cluster,"
            " job_id) DO UPDATE SET text = excluded.text, queued_at = excluded.queued_at, written_at = NULL,"
            " attempts = 0, error = ''",
            (cluster, job_id, comment.render(settled), now),
        )

    def requeue_comment(self, cluster: str, job_id: int) -> None:
        """Queue the job's AdminComment again (the audit found sacct without it: written, then lost)."""

        def body() -> Any:
            self._queue_comment(cluster, job_id, time.time())

        self._atomic(body)

    def unwritten_comments(self, limit: int | None = None, cluster: str | None = None) -> list[store.Row]:
        """AdminComments sacctmgr has not taken yet (the first ``limit``; None: all), of ``cluster``
        (None: of every cluster), least tried and oldest first: one that keeps failing does not stand
        before the others."""
        of, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM admin_comments WHERE written_at IS NULL {of} ORDER BY attempts, queued_at LIMIT ?",
            (*args, 2**62 if limit is None else limit),
        ).fetchall()

    def unwritten_count(self, cluster: str | None = None) -> int:
        of, args = _of(cluster)
        return int(
            self.conn.execute(f"SELECT count(*) FROM admin_comments WHERE written_at IS NULL {of}", args).fetchone()[0]
        )

    def comment_done(self, cluster: str, job_id: int, text: str, error: str = "") -> None:
        """Mark a comment written (``error`` empty), or count a failed attempt; a comment re-queued
        meanwhile (another run settled) stays to be written."""
        self.comments_done([(cluster, job_id, text, error)])

    def comments_done(self, outcomes: Iterable[tuple[str, int, str, str]]) -> None:
        """``comment_done`` for a batch (cluster, job id, text, error), in one transaction."""
        now = time.time()
        outcomes = list(outcomes)  # read again if the transaction runs again

        def body() -> Any:
            for cluster, job_id, text, error in outcomes:
                if error:
                    self.conn.execute(
                        "UPDATE admin_comments SET attempts = attempts + 1, error = ? WHERE cluster = ? AND job_id = ?"
                        " AND text = ? AND written_at IS NULL",
                        (error[:500], cluster, job_id, text),
                    )
                else:
                    self.conn.execute(
                        "UPDATE admin_comments SET written_at = ? WHERE cluster = ? AND job_id = ? AND text = ?",
                        (now, cluster, job_id, text),
                    )

        self._atomic(body)

    # --- reads ----------------------------------------------------------------------------------

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

    def job_movements(self, job_id: int, cluster: str | None = None) -> list[store.Row]:
        """The movements of the job's runs (on ``cluster``; None: on any cluster that shares this
        ledger, where another cluster's job of the same number is another job)."""
        where, args = ("AND j.cluster = ?", (cluster,)) if cluster is not None else ("", ())
        return self.conn.execute(
            f"SELECT m.* FROM movements m JOIN jobs j ON m.job_key = j.job_key WHERE j.job_id = ? {where} ORDER BY m.id",
            (job_id, *args),
        ).fetchall()

    def hides_jobs(self) -> bool:
        """A published copy that Slurm's PrivateData left without job rows (``redact_jobs``)."""
        if not isinstance(self.conn, store.SqliteStore):
            return False
        found = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (REDACTED,))
        return bool(found.fetchall())

    def runs(self, job_id: int, cluster: str | None = None) -> list[store.Row]:
        """The job's runs (on ``cluster``; None: on any cluster that shares this ledger)."""
        where, args = _of(cluster)
        return self.conn.execute(
            f"SELECT * FROM jobs WHERE job_id = ? {where} ORDER BY held_at", (job_id, *args)
        ).fetchall()

    def check(self) -> list[str]:
        """Every violation of the ledger's invariants (empty: the books balance, to the token), read
        from one moment of them: on a ledger other controllers and clusters write meanwhile, a hold
        committed between two of its reads would otherwise read as a difference."""
        with self.conn.consistent():
            return self._check()

    def _check(self) -> list[str]:
        problems = []
        sums = {
            (r["account"], r["kind"]): r["total"]
            for r in self.conn.execute(
                "SELECT account, kind, sum(amount) AS total FROM movements GROUP BY account, kind"
            )
        }
        for a in self.accounts():
            name = a["name"]
            s = {k: sums.get((name, k), 0) for k in KINDS}
            credited = s["deposit"] + s["refill"] + s["adjustment"]
            expect = {
                "credited": credited,
                "balance": credited - s["hold"] + s["refund"] - s["expiry"] - s["overrun"],
                "held": s["hold"] - s["charge"] - s["refund"],
                "charged": s["charge"] + s["overrun"],
                "expired": s["expiry"],
            }
            for col, value in expect.items():
                if a[col] != value:
                    problems.append(f"{name}: {col} is {a[col]}, movements say {value}")
            if a["credited"] != a["balance"] + a["held"] + a["charged"] + a["expired"]:
                problems.append(f"{name}: credited != balance + held + charged + expired")
            open_holds = self.conn.execute(
                "SELECT coalesce(sum(hold), 0) FROM jobs WHERE account = ? AND state = 'held'", (name,)
            ).fetchone()[0]
            if open_holds != a["held"]:
                problems.append(f"{name}: held is {a['held']}, open job holds sum to {open_holds}")
        for r in self.conn.execute(
            "SELECT job_key, count(*) AS n FROM movements WHERE kind IN ('charge', 'hold', 'overrun')"
            " GROUP BY job_key, kind HAVING n > 1"
        ):
            problems.append(f"job {r['job_key']}: moved more than once")
        return problems
