"""The ledger on real SQLite: movements, buckets, once-only holds and settlements, the invariant."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_yolo.controller import settler
from slurm_yolo.core import config
from slurm_yolo.core.billing import bucket
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.login import admission
from slurm_yolo.state import db, ledger
from slurm_yolo.state.ledger.schema import MIGRATIONS

DAY = bucket.DAY


def run(job_id: int = 1, submit: int = 1_764_460_800, account: str = "acct", qos: str = "") -> ledger.Run:
    return ledger.Run("c", job_id, submit, 0, account, "u", "p", qos, Fraction(1), 600, 600, 1_000_000, 1_000_000)


@pytest.fixture
def cfg(backend: str) -> config.Config:
    """The test's config, on each backend in turn (``conftest.backend``)."""
    return config.load()


@pytest.fixture
def sqlite_cfg() -> config.Config:
    """The test's config on SQLite (what only the SQLite file has: its migrations, its folders)."""
    return config.load()


def test_refill_math() -> None:
    assert bucket.refill(0, 100, 50, 0.0, DAY) == (50, DAY)
    assert bucket.refill(80, 100, 50, 0.0, DAY) == (20, DAY)  # capped at capacity
    assert bucket.refill(100, 100, 50, 0.0, DAY) == (0, DAY)  # full: time earns nothing
    add, mark = bucket.refill(0, 100, 24, 0.0, 3600 * 1.5)  # 1.5 tokens earned: 1 credited, the half kept
    assert add == 1 and mark == pytest.approx(3600)
    assert bucket.refill(0, 100, 0, 0.0, DAY) == (0, DAY)
    assert bucket.seconds_until(10, 240) == 3600 and bucket.seconds_until(10, 0) is None


def test_hold_settle_once(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        assert lg.hold(run(), 300, 250, "prolog") == (True, None)
        assert lg.hold(run(), 300, 250, "prolog") == (False, None)  # repeated prolog
        s = lg.settle(run().key, 120, "COMPLETED", 60, "epilog")
        assert s is not None and (s.charge, s.refund, s.balance) == (120, 180, 880)
        assert lg.settle(run().key, 120, "COMPLETED", 60, "epilog") is None  # repeated epilog
        assert lg.settle(run().key, 999, "COMPLETED", 60, "epilog") is None
        a = lg.account("acct")
        assert (a["balance"], a["held"], a["charged"], a["credited"]) == (880, 0, 120, 1000)
        assert lg.check() == []


def test_a_charge_past_the_hold_is_an_overrun_and_requeued_runs_are_separate(cfg: config.Config) -> None:
    first, second = run(submit=100), run(submit=160)  # a requeued job's next run has its own submit time
    assert first.key == "c:1:100" and second.key == "c:1:160"
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.hold(first, 100, None, "prolog")
        lg.hold(second, 100, None, "prolog")
        over = lg.settle(first.key, 500, "COMPLETED", 10, "epilog")  # ran past its limit (an admin extended it)
        assert over is not None and (over.charge, over.refund) == (500, 0)
        assert lg.settle(second.key, 40, "COMPLETED", 10, "epilog").charge == 40  # type: ignore[union-attr]
        a = lg.account("acct")
        assert (a["charged"], a["held"], a["balance"]) == (540, 0, 460) and lg.check() == []
        kinds = [m["kind"] for m in lg.history("acct") if m["job_key"] == first.key]
        assert sorted(kinds) == ["charge", "hold", "overrun", "refund"]


def test_prices_are_versioned_and_never_retroactive(cfg: config.Config) -> None:
    import time

    with ledger.writer(cfg) as lg:
        assert lg.price_at("t4", time.time(), 7) == 7  # the default until an admin sets one
        lg.set_price("t4", 2_000_000, 0.0, "admin")  # "from 1970" means from now
        now = time.time()
        assert lg.price_at("t4", now - 60, 7) == 7 and lg.price_at("t4", now + 1, 7) == 2_000_000
        lg.set_price("t4", 3_000_000, now + 3600, "admin", "next hour")
        assert lg.price_at("t4", now + 1, 7) == 2_000_000 and lg.price_at("t4", now + 3601, 7) == 3_000_000
        assert lg.price_at("a100", now + 3601, 7) == 7
        for bad in (0, -5):
            with pytest.raises(UsageError):
                lg.set_price("t4", bad, now, "admin")
        assert [r["price"] for r in lg.prices()] == [2_000_000, 3_000_000]
        lg.set_price("t4", 500, now + 1800, "admin", "east is cheaper", cluster="east")
        lg.set_price("a100", 9, 0.0, "admin", cluster="east")
        # east's own price where one is in effect, else every cluster's; west has none of its own
        assert lg.price_at("t4", now + 1, 7, "east") == 2_000_000 and lg.price_at("t4", now + 1801, 7, "east") == 500
        assert lg.price_at("t4", now + 3601, 7, "east") == 500 and lg.price_at("t4", now + 3601, 7, "west") == 3_000_000
        assert lg.price_at("a100", now + 1, 7, "east") == 9 and lg.price_at("a100", now + 1, 7, "west") == 7
        assert lg.price_at("a100", now + 1, 7) == 7


def test_version_1_ledger_migrates_with_its_runs(sqlite_cfg: config.Config) -> None:
    """A ledger written by the previous release keeps its accounts, movements and open holds."""
    from slurm_yolo.state import db
    from slurm_yolo.state.ledger.schema import MIGRATIONS

    path = ledger.db_path(sqlite_cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = db.connect_write(path, MIGRATIONS[:1], wal=True)
    conn.execute("INSERT INTO accounts (name, balance, held, credited, refilled_at) VALUES ('a', 700, 300, 1000, 0)")
    conn.execute("INSERT INTO movements (at, account, kind, amount, actor) VALUES (0, 'a', 'deposit', 1000, 't')")
    old = "c:9:2026-11-30T00:00:00:0"
    conn.execute(
        "INSERT INTO movements (at, account, kind, amount, job_key, actor) VALUES (0, 'a', 'hold', 300, ?, 't')", (old,)
    )
    conn.execute(
        "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, partition, gpus, k,"
        " time_limit, hold, held_at) VALUES (?, 'c', 9, '2026-11-30T00:00:00', 0, 'a', 'u', 'p', 1, 2.0, 60, 300, 0)",
        (old,),
    )
    conn.close()
    submit = int(
        time.mktime(time.strptime("2026-11-30T00:00:00", "%Y-%m-%dT%H:%M:%S"))
    )  # local time, as Slurm printed it
    key = ledger.run_key("c", 9, submit)
    with ledger.writer(sqlite_cfg) as lg:
        row = lg.run(key)
        assert row is not None and (row["submit_time"], row["price"], row["rate_ppm"], row["hold_seconds"]) == (
            submit,
            500_000,
            1_000_000,
            60,
        )
        assert [m["job_key"] for m in lg.history("a")] == [key, None]
        assert lg.settle(key, 100, "COMPLETED", 20, "epilog") is not None and lg.check() == []


def test_dry_account_is_blocked_and_deposit_lifts(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 100, "t")
        held, blocked = lg.hold(run(), 150, None, "prolog")
        assert held and blocked is True and lg.account("acct")["balance"] == -50
        assert lg.credit("acct", 100, "t") is False


def test_quota_refills_lazily(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 10, "t")
        lg.set_quota("acct", rate_per_day=86400, capacity=1000, actor="t")  # one token a second
        lg.conn.execute("UPDATE accounts SET refilled_at = refilled_at - 100")
        lg.refill_all()
        a = lg.account("acct")
        assert 10 + 100 <= a["balance"] <= 10 + 102 and lg.check() == []
        lg.conn.execute("UPDATE accounts SET refilled_at = refilled_at - 10 * 86400")
        lg.refill_all()
        assert lg.account("acct")["balance"] == 1000  # burst cap


def test_tiers(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.set_tier("yolo-prod", "0.8")
        assert lg.tier_rate("yolo-prod") == 800_000 and lg.tier_rate("other") == 1_000_000
        for bad in ("0", "-1", "0.0000001", "1e-7", "nan", "inf", "x", ""):
            with pytest.raises(UsageError):
                lg.set_tier("x", bad)
        assert [tuple(r) for r in lg.tiers()] == [("", "yolo-prod", 800_000)]
        lg.set_tier("yolo-prod", "0.5", cluster="east")  # one cluster of a shared ledger: its own rate
        assert lg.tier_rate("yolo-prod", "east") == 500_000
        assert lg.tier_rate("yolo-prod", "west") == lg.tier_rate("yolo-prod") == 800_000
        assert lg.tier_rate("other", "east") == 1_000_000
        assert [tuple(r) for r in lg.tiers()] == [("", "yolo-prod", 800_000), ("east", "yolo-prod", 500_000)]


def test_migration_keeps_old_runs_and_tiers_exact(sqlite_cfg: config.Config) -> None:
    """Runs and tiers written before the whole-number columns get them from their REAL values."""
    path = ledger.db_path(sqlite_cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    db.migrate(conn, MIGRATIONS[:4])
    conn.execute("INSERT INTO tiers (qos, rate) VALUES ('prod', 0.8), ('cheap', 0.001)")
    for job, (gpus, rate) in enumerate([(2.0, 0.8), (0.5, 1.5), (1 / 3, 1.0), (0.75, 0.001)]):
        conn.execute(
            "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, partition, gpus, price,"
            " rate, time_limit, hold_seconds, hold, held_at) VALUES (?, 'c', ?, 1, 0, 'a', 'u', 'p', ?, 1, ?, 60, 60,"
            " 1, 0)",
            (f"c:{job}:1", job, gpus, rate),
        )
    conn.close()
    with ledger.writer(sqlite_cfg) as lg:
        runs = [(ledger.run_share(r), r["rate_ppm"]) for r in lg.conn.execute("SELECT * FROM jobs ORDER BY job_id")]
        assert runs == [(2, 800_000), (Fraction(1, 2), 1_500_000), (Fraction(1, 3), 1_000_000), (Fraction(3, 4), 1_000)]
        assert lg.tier_rate("prod") == 800_000 and lg.tier_rate("cheap") == 1_000


def test_check_finds_tampering(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.conn.execute("UPDATE accounts SET balance = balance + 5")
        assert any("balance" in p for p in lg.check())


def test_movements_are_parameterised(cfg: config.Config) -> None:
    evil = "x'); DROP TABLE movements; --"
    with ledger.writer(cfg) as lg:
        lg.credit(evil, 10, evil, evil)
        assert lg.account(evil)["balance"] == 10 and lg.check() == []


def test_readers_see_a_ledger_they_cannot_write(sqlite_cfg: config.Config, home: Path) -> None:
    with ledger.writer(sqlite_cfg) as lg:
        lg.credit("acct", 10, "t")
    ro = ledger.reader(sqlite_cfg)
    assert ro is not None and ro.account("acct")["balance"] == 10
    with pytest.raises(SlurmYoloError, match="readonly"):
        ro.credit("acct", 1, "t")


@pytest.mark.parametrize(
    ("text", "value"), [("50G", 50 * 10**9), ("120M", 120 * 10**6), ("1.5GTok", 1_500_000_000), ("7", 7), ("2k", 2000)]
)
def test_parse_tokens(text: str, value: int) -> None:
    assert admission.parse_tokens(text) == value


@pytest.mark.parametrize("text", ["", "ten", "5X", "-5G", "1e30"])
def test_parse_tokens_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        admission.parse_tokens(text)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["credit", "hold", "settle", "adjust"]), st.integers(0, 5), st.integers(0, 10**6)),
        max_size=40,
    )
)
def test_invariant_under_any_sequence(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    cfg = config.load()
    cfg.paths = replace(cfg.paths, state_dir=str(tmp_path_factory.mktemp("inv")))
    with ledger.writer(cfg) as lg:
        for op, job, amount in ops:
            if op == "credit":
                lg.credit("a", amount + 1, "t")
            elif op == "adjust":
                lg.credit("a", -amount, "t", kind="adjustment")
            elif op == "hold":
                lg.hold(run(job_id=job, account="a"), amount, None, "p")
            else:
                lg.settle(run(job_id=job, account="a").key, amount, "COMPLETED", 1, "e")  # may pass the hold
        assert lg.check() == []


def test_unspent_tokens_expire_first_in_first_out(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.hold(run(), 300, None, "prolog")
        lg.settle(run().key, 100, "COMPLETED", 1, "epilog")  # 100 used
        lg.conn.execute("UPDATE movements SET at = at - 40 * 86400")  # all of that 40 days ago
        lg.credit("acct", 500, "t")  # fresh tokens do not expire
        assert lg.expire(30) == {"acct": 900}
        assert lg.expire(30) == {}  # nothing twice
        a = lg.account("acct")
        assert (a["balance"], a["expired"], a["charged"]) == (500, 900, 100) and lg.check() == []


def test_an_admin_releases_a_hold_slurm_can_no_longer_settle(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.hold(run(), 300, None, "prolog")
        for key, charge, reason, message in [
            (run().key, 0, " ", "needs a --reason"),
            ("c:404:1", 0, "purged", "no run 'c:404:1'"),
            (run().key, 301, "purged", r"between 0 and the run's hold \(300\)"),
        ]:
            with pytest.raises(UsageError, match=message):
                lg.release(key, charge, "admin", reason)
        done = lg.release(run().key, 100, "admin", "sacct purged the job")
        assert (done.charge, done.refund, done.balance) == (100, 200, 900)
        with pytest.raises(UsageError, match="settled already"):
            lg.release(run().key, 0, "admin", "again")
        assert {m["reason"] for m in lg.job_movements(1) if m["kind"] != "hold"} == {"released: sacct purged the job"}
        assert lg.run(run().key)["end_state"] == "RELEASED" and lg.check() == []


def test_the_books_are_private_and_users_read_a_published_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The database, its -wal/-shm and the locks sit in a 0700 folder; what a user can open is a
    copy swapped in by rename, which no writer ever opens again (alice reads it)."""
    home = Path(tempfile.mkdtemp(dir="/var/tmp"))  # a folder alice can reach
    home.chmod(0o755)
    monkeypatch.setenv("SLURM_YOLO_HOME", str(home))
    cfg = config.load()
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 10, "t")
    private = home / "private"
    assert private.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in private.iterdir())
    copy = home / "ledger.db"
    assert copy.stat().st_mode & 0o777 == 0o644
    inode = copy.stat().st_ino
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 5, "t")
    assert copy.stat().st_ino != inode  # a new file each time: a reader's descriptor holds the old one
    read = (
        "from slurm_yolo.core import config; from slurm_yolo.state import ledger; lg = ledger.reader(config.load());"
        "print(lg.balance('acct'), lg.conn.execute('PRAGMA application_id').fetchone()[0])"
    )
    res = subprocess.run(
        ["/usr/sbin/runuser", "-u", "alice", "--", sys.executable, "-c", read],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_YOLO_HOME": str(home)},
        cwd="/tmp",
        check=False,
    )
    assert res.stdout.split() == ["15", str(db.PUBLISHED_ID)], res.stderr
    shutil.rmtree(home)


def test_a_ledger_of_an_earlier_release_is_moved_into_the_private_folder(sqlite_cfg: config.Config, home: Path) -> None:
    legacy = home / "ledger.db"
    conn = sqlite3.connect(legacy, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    db.migrate(conn, MIGRATIONS)
    conn.execute("INSERT INTO accounts (name, balance, credited, refilled_at) VALUES ('old', 42, 42, 0)")
    conn.execute("INSERT INTO movements (at, account, kind, amount, actor) VALUES (0, 'old', 'deposit', 42, 't')")
    held_open = open(legacy, "rb")  # noqa: SIM115 - a user's descriptor on the old file, kept across the move
    try:
        with ledger.writer(sqlite_cfg) as lg:
            assert lg.balance("old") == 42 and lg.check() == []
            lg.credit("old", 1, "t")
        assert os.stat(held_open.fileno()).st_ino != (home / "private" / "ledger.db").stat().st_ino
        assert not (home / "ledger.db-wal").exists() and not (home / "ledger.db-shm").exists()
    finally:
        held_open.close()
        conn.close()
    with ledger.reader(sqlite_cfg) as lg:
        assert lg.balance("old") == 43


def test_a_lock_file_is_waited_for_within_a_bound(home: Path) -> None:
    lock = db.make_private(home) / "publish.lock"
    with db.locked(lock, "first"):
        start = time.monotonic()
        with pytest.raises(SlurmYoloError, match="stayed locked for 0 s"), db.locked(lock, "second", seconds=0.2):
            pass
        assert time.monotonic() - start < 5


def test_each_cluster_reads_its_own_rows_of_a_shared_ledger(cfg: config.Config) -> None:
    """Two clusters on one ledger: each one's settler, reconcile and audit read their own inbox,
    holds, incidents and AdminComments (an incident of no known cluster is everyone's)."""
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 10_000, "t")
        for cluster in ("yolo", "yolo2411"):
            r = run(7)._replace(cluster=cluster)
            lg.hold(r, 100, None, "prolog")
            lg.receive(cluster, 7, "epilog", {"state": "COMPLETED"})
            lg.record_incident(cluster, 7, "prolog", "boom")
        lg.record_incident("", 8, "prolog", "no cluster known")
        lg.hold(run(9)._replace(cluster="yolo2411"), 100, None, "prolog")
        lg.settle(run(9)._replace(cluster="yolo2411").key, 50, "COMPLETED", 5, "epilog")
        for cluster in ("yolo", "yolo2411"):
            assert {r["cluster"] for r in lg.due(None, 10, cluster=cluster)} == {cluster}
            assert {r["cluster"] for r in lg.stale_holds(time.time() + 1, cluster)} == {cluster}
            assert {r["cluster"] for r in lg.open_incidents(cluster)} == {cluster, ""}
            assert {r["job_key"].split(":")[0] for r in lg.held_between(0, time.time() + 1, cluster)} == {cluster}
        assert len(lg.held_between(0, time.time() + 1, "yolo")) == 1
        assert len(lg.held_between(0, time.time() + 1)) == 3
        assert lg.next_due("nowhere") is None and lg.next_due("yolo") is not None
        assert [r["job_id"] for r in lg.unwritten_comments(cluster="yolo2411")] == [9]
        assert lg.unwritten_count("yolo") == 0 and lg.unwritten_count() == 1


def test_every_write_moves_a_shared_ledgers_version(cfg: config.Config, backend: str) -> None:
    """What tells a controller that another one (or another cluster) wrote: MariaDB's version moves
    with every write transaction; SQLite, one controller's file, has none."""
    with ledger.writer(cfg) as lg:
        before = lg.version()
        lg.credit("acct", 5, "t")
        after = lg.version()
    if backend == "sqlite":
        assert before is None and after is None
    else:
        assert before is not None and after is not None and after > before


def test_admit_across_clusters_never_overcommits(cfg: config.Config) -> None:
    """Two clusters admitting from one budget take turns in the ledger: each sees the other's pending
    worst cases, a hold takes its amount off its cluster's commitment, and a refusal changes nothing."""
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        a = lg.admit("east", "acct", 400, {})
        assert a == (True, 1000, 0, 0, 0.0)
        b = lg.admit("west", "acct", 500, {"other": 7})
        assert b == (True, 1000, 0, 400, 0.0)  # east's 400 counted; 400 + 500 <= 1000
        c = lg.admit("east", "acct", 200, {"acct": 400})  # east's own count: its job still pending
        assert c == (False, 1000, 400, 500, 0.0)  # 400 + 500 + 200 > 1000
        assert {(r["cluster"], r["account"], r["tokens"]) for r in lg.commitments()} == {
            ("east", "acct", 400),
            ("west", "acct", 500),
            ("west", "other", 7),
        }
        lg.hold(run()._replace(cluster="west"), 500, None, "prolog")  # west's job started: its hold, not its commitment
        assert lg.account("acct")["balance"] == 500
        assert {(r["cluster"], r["tokens"]) for r in lg.commitments() if r["account"] == "acct"} == {("east", 400)}
        assert lg.admit("east", "acct", 100, {"acct": 400}) == (True, 500, 400, 0, 0.0)
        assert lg.admit("west", "acct", 1, {}) == (False, 500, 0, 500, 0.0)
        assert lg.admit("west", "nobody", 1, {}) == (False, 0, 0, 0, 0.0)  # no ledger entry: nothing to spend
        assert lg.admit("west", "ACCT", 1, {"acct": 0}) == (False, 0, 0, 0, 0.0)  # names compare byte for byte
        assert lg.admit("west", "acct", 1, {"ACCT": 1}) == (False, 500, 0, 500, 0.0)  # on both backends
        assert [(r["cluster"], r["account"]) for r in lg.commitments("west")] == [("west", "ACCT")]
        lg.admit("west", "nobody", 1, {})  # west's next admission: what it counts now, nothing
        assert lg.account("nobody") is None
        assert [(r["cluster"], r["account"], r["tokens"]) for r in lg.commitments()] == [("east", "acct", 500)]
        lg.forget_commitments("east", ["acct"], 0.0)  # counted since: kept
        assert [r["tokens"] for r in lg.commitments("east")] == [500] and lg.commitments("west") == []
        lg.forget_commitments("east", ["acct"], time.time() + 1)  # east has no job of acct pending any more
        assert lg.commitments() == []
        assert lg.check() == []


def test_admit_lets_a_job_wait_for_what_the_refill_brings_within_the_wait(cfg: config.Config) -> None:
    """Short of a job's worst case, an account whose quota refills the rest within ``max_wait`` is
    admitted to wait (how long: what its refill takes, counted from now), and the job counts as this
    cluster's commitment as an admitted one does; beyond the wait, or past the bucket's capacity, it is
    refused and counts nothing."""
    day = 86400
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.set_quota("acct", 864_000, 5000, "t")  # 10 tokens a second, up to 5000
        got = lg.admit("east", "acct", 1600, {}, max_wait=120)
        assert (
            got.ok is False and 61 <= got.wait <= 62 and got.balance in (1000, 1010)
        )  # 600 short: a minute, 2 s margin
        assert [(r["account"], r["tokens"]) for r in lg.commitments("east")] == [("acct", 1600)]
        later = lg.admit("east", "acct", 1000, {"acct": 1600}, max_wait=120)  # behind the first: 160 s
        assert later.ok is False and later.wait == 0.0 and later.committed_here == 1600
        assert [(r["account"], r["tokens"]) for r in lg.commitments("east")] == [("acct", 1600)]
        assert lg.admit("east", "acct", 1000, {"acct": 1600}, max_wait=day).wait > 150
        assert lg.admit("west", "acct", 6000, {}, max_wait=day).wait == 0.0  # the bucket never holds it
        assert lg.admit("west", "acct", 2000, {}, max_wait=0).wait == 0.0  # no waiting configured
        assert lg.account("acct")["held"] == 0 and lg.check() == []


def test_a_cluster_joins_once_and_a_migrated_ledger_keeps_its_history(sqlite_cfg: config.Config) -> None:
    """Since when a ledger keeps a cluster's runs: its first hold (or hookd's start, or reconcile)
    sets it once; a ledger written before clusters joined has every cluster with runs since 0."""
    from slurm_yolo.state import db
    from slurm_yolo.state.ledger.schema import MIGRATIONS

    path = ledger.db_path(sqlite_cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = db.connect_write(path, MIGRATIONS[:8], wal=True)
    conn.execute("INSERT INTO accounts (name, refilled_at) VALUES ('acct', 0)")
    conn.execute(
        "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, `partition`, qos, gpus, price,"
        " rate, time_limit, hold_seconds, hold, held_at, held_by) VALUES ('old:1:1', 'old', 1, 1, 0, 'acct', 'u',"
        " 'p', '', 1, 1, 1, 60, 60, 0, 1, 'prolog')"
    )
    conn.close()
    with ledger.writer(sqlite_cfg) as lg:
        assert lg.joined_at("old") == 0.0 and lg.joined_at("c") is None
        started = time.time()
        lg.credit("acct", 1000, "t")
        lg.hold(run(), 300, None, "prolog")  # cluster "c"'s first hold
        first = lg.joined_at("c")
        assert first is not None and first >= started
        assert lg.join("c") == first and lg.join("old") == 0.0


def test_a_cluster_follows_a_block_that_turned_round_since_its_last_look() -> None:
    """The CI run that found it: 24.11's settler looked between its own CLI's ledger write (vision
    blocked) and that CLI's own Slurm block, and asked for the block; then a deposit through 22.05
    funded vision while 24.11 still kept the block. The same account apart the other way round is
    a new disagreement, asked for; one already asked is not asked again; one settled is forgotten."""
    apart, ask = settler.blocks_apart({"vision"}, set(), set())
    assert (apart, ask) == ({("vision", True)}, {"vision"})
    apart, ask = settler.blocks_apart(set(), {"vision"}, apart)  # funded through the other cluster
    assert (apart, ask) == ({("vision", False)}, {"vision"})
    apart, ask = settler.blocks_apart(set(), {"vision"}, apart)  # this Slurm cannot lift it: asked once
    assert (apart, ask) == ({("vision", False)}, set())
    apart, ask = settler.blocks_apart(set(), set(), apart)
    assert (apart, ask) == (set(), set())
    assert settler.blocks_apart({"a", "b"}, {"b", "c"}, {("a", True)}) == ({("a", True), ("c", False)}, {"c"})


def test_a_published_copy_is_the_owners_alone_until_it_is_whole(tmp_path: Path) -> None:
    """``db.publish_copy`` writes its copy (and the journal SQLite keeps beside it) mode 600 beside
    its target in the public folder (made when missing); only the whole copy, renamed into place, is
    world-readable. `slurm-yolo doctor`
    once caught a 644 journal there in the middle of a publish."""
    from slurm_yolo.state import db

    seen: list[tuple[str, int]] = []
    books, public = tmp_path / "private" / "ledger.db", tmp_path / "public"

    def snapshot(path: Path) -> None:
        copy = sqlite3.connect(path, isolation_level=None)
        try:
            copy.execute("BEGIN")
            copy.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            copy.execute("INSERT INTO t VALUES (1)")
            seen.extend(
                (p.name.rsplit("-", 1)[-1], p.stat().st_mode & 0o777) for p in public.glob(".ledger.db.publish.*")
            )
            copy.execute("COMMIT")
        finally:
            copy.close()

    db.publish_copy(snapshot, books, public)
    assert sorted(mode for _, mode in seen) == [0o600, 0o600] and any(n == "journal" for n, _ in seen), seen
    assert db.published(books, public) == public / "ledger.db"
    assert db.published(books, public).stat().st_mode & 0o777 == 0o644 and public.stat().st_mode & 0o777 == 0o755
    assert not list(public.glob(".ledger.db.publish.*"))


def test_a_publisher_killed_mid_publish_leaves_no_copy_for_good(tmp_path: Path) -> None:
    """A publisher killed with its copy half written (kill -9 in the chaos tests) leaves it behind, a
    whole ledger's size each time: the next publish removes those whose process is gone, and leaves a
    live process's alone (its publish may be going on)."""
    from slurm_yolo.state import db

    books, public = tmp_path / "private" / "ledger.db", tmp_path / "public"
    public.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    dead = [public / f".ledger.db.publish.{gone.pid}.1", public / f".ledger.db.publish.{gone.pid}.1-journal"]
    live = public / f".ledger.db.publish.{os.getppid()}.1"
    for p in [*dead, live]:
        p.write_text("half a copy")

    def snapshot(path: Path) -> None:
        sqlite3.connect(path).close()

    db.publish_copy(snapshot, books, public)
    assert [p.exists() for p in dead] == [False, False] and live.exists()
