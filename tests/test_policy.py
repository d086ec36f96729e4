"""The billing policy: pure functions, checked against amounts worked out by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slurm_yolo.ledger import policy

PRICE = 1_000_000  # tokens per GPU-second
RULES = policy.Rules()


def test_gpus_from_allocated_tres() -> None:
    assert policy.gpus({"gres/gpu": "2", "cpu": "4"}, 4) == 2
    assert policy.gpus({"gres/shard": "2"}, 4) == Fraction(1, 2)
    assert policy.gpus({"gres/shard": "1"}, 3) == Fraction(1, 3)
    assert policy.gpus({"gres/shard": "3"}, 0) == 3  # no share configured: a shard is a GPU
    assert policy.gpus({"cpu": "1"}, 4) == 0
    for bad in ("", "²", "１", "1e3", "-1", "9" * 12):  # what no Slurm prints is no GPU count
        assert policy.gpus({"gres/gpu": bad}, 4) == 0


def test_tokens_are_exact() -> None:
    assert policy.tokens(37, Fraction(1), PRICE, Fraction(4, 5)) == 29_600_000  # float math says 29,600,001
    assert policy.tokens(10, Fraction(1, 3), 3, Fraction(1)) == 10
    assert policy.tokens(1, Fraction(1, 3), 1, Fraction(1)) == 1  # rounded up to the token
    assert policy.tokens(-5, Fraction(1), PRICE, Fraction(1)) == 0
    assert policy.exact(0.8) == Fraction(4, 5) and policy.exact(1 / 3) == Fraction(1, 3)


def test_hold_seconds_caps_unlimited_jobs() -> None:
    assert policy.hold_seconds(120, 604800) == 120
    assert policy.hold_seconds(None, 604800) == 604800


@pytest.mark.parametrize(
    ("state", "elapsed", "expected"),
    [
        ("COMPLETED", 30, 30 * PRICE),
        ("FAILED", 30, 30 * PRICE),
        ("CANCELLED", 30, 30 * PRICE),
        ("REQUEUED", 30, 30 * PRICE),
        ("OUT_OF_MEMORY", 30, 30 * PRICE),
        ("TIMEOUT", 30, 120 * PRICE),  # a job's own timeout pays its whole hold...
        ("TIMEOUT", 150, 150 * PRICE),  # ...and OverTimeLimit past it
        ("COMPLETED", 500, 500 * PRICE),  # an admin extended its limit: the time it ran
        ("NODE_FAIL", 30, 0),
        ("BOOT_FAIL", 30, 0),
        ("PREEMPTED", 30, 0),
    ],
)
def test_charge_by_end_state(state: str, elapsed: int, expected: int) -> None:
    assert policy.charge(state, elapsed, 120 * PRICE, Fraction(1), PRICE, Fraction(1), RULES) == expected


def test_site_rules_change_what_failures_pay() -> None:
    strict = policy.Rules(refund_node_fail=False, refund_preempted=False, charge_timeout_full=False)
    assert policy.charge("NODE_FAIL", 30, 120, Fraction(1), 1, Fraction(1), strict) == 30
    assert policy.charge("PREEMPTED", 30, 120, Fraction(1), 1, Fraction(1), strict) == 30
    assert policy.charge("TIMEOUT", 30, 120, Fraction(1), 1, Fraction(1), strict) == 30


@pytest.mark.parametrize(
    ("spank", "comment", "expected"),
    [
        ("777", None, 777),
        (None, "yolo:tok=5,eff=405504,pred_s=25", 405504),
        ("12abc", None, None),
        ("²", None, None),  # str.isdigit() says yes, int() says no
        ("１２", None, None),  # full-width digits
        ("-1", None, None),
        ("1" * 19, None, None),  # past 18 digits: absurd, and past SQLite's integers at 1e19
        (None, "yolo:eff=inf", None),
        (None, "yolo:eff=nan", None),
        (None, "yolo:eff=1e19", None),
        (None, "yolo:eff=-1", None),
        (None, "yolo:eff=²", None),
        (None, "yolo:eff=", None),
        (None, "x TRES=cpu=1 TimeLimit=00:00:01", None),
        (None, "not yolo eff=5", None),
        ("junk", "yolo:eff=12", 12),  # a bad SPANK value does not hide a good comment
    ],
)
def test_user_estimate_is_parsed_strictly(spank: str | None, comment: str | None, expected: int | None) -> None:
    assert policy.user_estimate(spank, comment) == expected
