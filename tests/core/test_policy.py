"""The billing policy: pure functions, checked against amounts worked out by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slurm_yolo.core.billing import policy
from slurm_yolo.core.errors import UsageError

PRICE = 1_000_000  # tokens per GPU-second
RULES = policy.Rules()
ONE = policy.RATE_SCALE  # a rate of 1, in parts per million


def test_gpus_from_allocated_tres() -> None:
    assert policy.gpus({"gres/gpu": "2", "cpu": "4"}, 4) == 2
    assert policy.gpus({"gres/shard": "2"}, 4) == Fraction(1, 2)
    assert policy.gpus({"gres/shard": "1"}, 3) == Fraction(1, 3)
    assert policy.gpus({"gres/shard": "3"}, 0) == 3  # no share configured: a shard is a GPU
    assert policy.gpus({"cpu": "1"}, 4) == 0
    for bad in ("", "²", "１", "1e3", "-1", "9" * 12):  # what no Slurm prints is no GPU count
        assert policy.gpus({"gres/gpu": bad}, 4) == 0


def test_gres_share_counts_as_the_prolog_does() -> None:
    assert policy.gres_share("gpu:t4:2", 4) == 2 and policy.gres_share("gpu:3", 0) == 3
    assert policy.gres_share("shard:a100:3", 4) == Fraction(3, 4) and policy.gres_share("shard:2", 0) == 2
    with pytest.raises(UsageError):
        policy.gres_share("tpu:1", 4)


def test_tokens_are_exact() -> None:
    assert policy.tokens(37, Fraction(1), PRICE, 800_000) == 29_600_000  # float math says 29,600,001
    assert policy.tokens(10, Fraction(1, 3), 3, ONE) == 10
    assert policy.tokens(1, Fraction(1, 3), 1, ONE) == 1  # rounded up to the token
    assert policy.tokens(1, Fraction(1), 1, 1) == 1  # a millionth of a token is a token
    assert policy.tokens(-5, Fraction(1), PRICE, ONE) == 0
    big = policy.tokens(366 * 86400, Fraction(4096), 10**12, 7_654_321)  # far past a double's 2^53
    assert big == -(-366 * 86400 * 4096 * 10**12 * 7_654_321 // 10**6)


@pytest.mark.parametrize(
    ("text", "ppm"),
    [
        ("0.8", 800_000),
        ("1.5", 1_500_000),
        ("1", ONE),
        ("0.000001", 1),
        (" 2.000000 ", 2_000_000),
        ("3/4", 750_000),
        ("1e-3", 1_000),
    ],
)
def test_rates_are_read_exactly_from_their_text(text: str, ppm: int) -> None:
    assert policy.parse_rate(text) == ppm
    assert policy.parse_rate(policy.rate_text(ppm)) == ppm


@pytest.mark.parametrize("text", ["0.0000001", "0.1234567", "1/3", "0", "-0.5", "nan", "inf", "", "x", "1,5"])
def test_rates_past_six_decimals_or_not_positive_are_refused(text: str) -> None:
    with pytest.raises(UsageError) as e:
        policy.parse_rate(text)
    assert "\n" not in str(e.value)


def test_rate_text() -> None:
    assert [policy.rate_text(r) for r in (ONE, 800_000, 1, 12_345_678)] == ["1", "0.8", "0.000001", "12.345678"]


def test_hold_seconds_caps_unlimited_jobs() -> None:
    assert policy.hold_seconds(120, 604800) == 120
    assert policy.hold_seconds(None, 604800) == 604800
    assert policy.unlimited_cap(168) == 604800


@pytest.mark.parametrize(
    ("state", "elapsed", "expected"),
    [
        ("COMPLETED", 30, 30 * PRICE),
        ("FAILED", 30, 30 * PRICE),
        ("CANCELLED", 30, 30 * PRICE),
        ("REQUEUED", 30, 30 * PRICE),
        ("OUT_OF_MEMORY", 30, 30 * PRICE),
        ("TIMEOUT", 30, 120 * PRICE),  # a job's own timeout pays its whole limit...
        ("TIMEOUT", 150, 150 * PRICE),  # ...and OverTimeLimit past it
        ("COMPLETED", 500, 500 * PRICE),  # an admin extended its limit: the time it ran
        ("NODE_FAIL", 30, 0),
        ("BOOT_FAIL", 30, 0),
        ("PREEMPTED", 30, 30 * PRICE),  # what it ran: preempting your own run gains nothing
    ],
)
def test_charge_by_end_state(state: str, elapsed: int, expected: int) -> None:
    assert policy.charge(state, elapsed, 120, Fraction(1), PRICE, ONE, RULES) == expected


def test_timeout_pays_the_limit_in_force_at_the_end_not_the_hold() -> None:
    """A user who lowers a running job's limit (5 min -> 1 min) and times out after 71 s pays 71 s,
    not the 5-minute hold its start took; a limit an admin raised is paid at least in full."""
    assert policy.charge("TIMEOUT", 71, 60, Fraction(1), PRICE, ONE, RULES) == 71 * PRICE
    assert policy.charge("TIMEOUT", 30, 60, Fraction(1, 2), PRICE, 800_000, RULES) == 24 * PRICE
    assert policy.charge("TIMEOUT", 600, 900, Fraction(1), PRICE, ONE, RULES) == 900 * PRICE


def test_site_rules_change_what_failures_pay() -> None:
    strict = policy.Rules(refund_node_fail=False, refund_preempted=False, charge_timeout_full=False)
    assert policy.charge("NODE_FAIL", 30, 120, Fraction(1), 1, ONE, strict) == 30
    assert policy.charge("PREEMPTED", 30, 120, Fraction(1), 1, ONE, strict) == 30
    lenient = policy.Rules(refund_preempted=True)  # a site where no user can preempt
    assert policy.charge("PREEMPTED", 30, 120, Fraction(1), 1, ONE, lenient) == 0
    assert policy.charge("TIMEOUT", 30, 120, Fraction(1), 1, ONE, strict) == 30


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


def test_fmt_tokens() -> None:
    assert policy.fmt_tokens(1.5e9) == "1.50 GTok"
    assert policy.fmt_tokens(2.5e6) == "2.5 MTok"
    assert policy.fmt_tokens(3.2e12) == "3.20 TTok" and policy.fmt_tokens(2e5) == "0.20 MTok"
    assert policy.fmt_tokens(1.5e5) == "0.15 MTok"  # a newcomer's 150 kTok hold read "0.1 MTok"
    assert policy.fmt_tokens(30_000) == "30.0 kTok" and policy.fmt_tokens(42) == "42 Tok"
    assert policy.fmt_tokens(-1.5e9) == "-1.50 GTok" and policy.fmt_tokens(0) == "0 Tok"
