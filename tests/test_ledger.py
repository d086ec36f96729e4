"""The ledger on real SQLite: movements, buckets, once-only holds and settlements, the invariant."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_yolo import admission, config, ledger
from slurm_yolo.errors import UsageError
from slurm_yolo.ledger import bucket

DAY = bucket.DAY


def run(job_id: int = 1, restart: int = 0, account: str = "acct", qos: str = "") -> ledger.Run:
    return ledger.Run("c", job_id, "2026-11-30T00:00:00", restart, account, "u", "p", qos, 1.0, 2.0, 600)


@pytest.fixture
def cfg() -> config.Config:
    return config.load()


def test_refill_math() -> None:
    assert bucket.refill(0, 100, 50, 0.0, DAY) == (50, DAY)
    assert bucket.refill(80, 100, 50, 0.0, DAY) == (20, DAY)  # capped at capacity
    assert bucket.refill(100, 100, 50, 0.0, DAY) == (0, DAY)  # full: time earns nothing
    add, mark = bucket.refill(0, 100, 24, 0.0, 3600 * 1.5)  # 1.5 tokens earned: 1 credited, the half kept
    assert add == 1 and mark == pytest.approx(3600)
    assert bucket.refill(0, 100, 0, 0.0, DAY) == (0, DAY)
    assert bucket.seconds_until(10, 240) == 3600 and bucket.seconds_until(10, 0) is None


def test_gpu_tokens() -> None:
    assert bucket.gpu_tokens(100, 2, 0.5) == 400_000_000
    with pytest.raises(ValueError):
        bucket.gpu_tokens(1, 1, 0)


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


def test_charge_is_capped_at_the_hold_and_restarts_are_separate_runs(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 1000, "t")
        lg.hold(run(restart=0), 100, None, "prolog")
        lg.hold(run(restart=1), 100, None, "prolog")
        assert lg.settle(run(restart=0).key, 500, "REQUEUED", 10, "epilog").charge == 100  # type: ignore[union-attr]
        assert lg.settle(run(restart=1).key, 40, "COMPLETED", 10, "epilog").charge == 40  # type: ignore[union-attr]
        assert lg.account("acct")["charged"] == 140 and lg.check() == []


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
        lg.set_tier("yolo-prod", 0.8)
        assert lg.tier_rate("yolo-prod") == 0.8 and lg.tier_rate("other") == 1.0
        with pytest.raises(UsageError):
            lg.set_tier("x", 0)


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


def test_readers_see_a_ledger_they_cannot_write(cfg: config.Config, home: Path) -> None:
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 10, "t")
    ro = ledger.reader(cfg)
    assert ro is not None and ro.account("acct")["balance"] == 10
    with pytest.raises(sqlite3.OperationalError):
        ro.credit("acct", 1, "t")


@pytest.mark.parametrize(("text", "value"), [("50G", 50 * 10**9), ("120M", 120 * 10**6), ("1.5GTok", 1_500_000_000), ("7", 7), ("2k", 2000)])
def test_parse_tokens(text: str, value: int) -> None:
    assert admission.parse_tokens(text) == value


@pytest.mark.parametrize("text", ["", "ten", "5X", "-5G", "1e30"])
def test_parse_tokens_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        admission.parse_tokens(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["credit", "hold", "settle", "adjust"]), st.integers(0, 5), st.integers(0, 10**6)), max_size=40))
def test_invariant_under_any_sequence(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]) -> None:
    cfg = config.load()
    cfg.values["paths"]["state_dir"] = str(tmp_path_factory.mktemp("inv"))
    with ledger.writer(cfg) as lg:
        for op, job, amount in ops:
            if op == "credit":
                lg.credit("a", amount + 1, "t")
            elif op == "adjust":
                lg.credit("a", -amount, "t", kind="adjustment")
            elif op == "hold":
                lg.hold(run(job_id=job, account="a"), amount, None, "p")
            else:
                lg.settle(run(job_id=job, account="a").key, amount, "COMPLETED", 1, "e")
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
