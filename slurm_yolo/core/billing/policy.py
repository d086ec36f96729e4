"""The billing policy, as pure functions: what a run holds when it starts and pays when it ends.

Money depends only on facts slurmctld sets (allocated GPUs or shards, the time limit, the elapsed
time and the end state of each run) and on two numbers an admin sets: the partition's **price** in
tokens per GPU-second and the QOS tier's **rate**. Both are read once, when the run is held, and
stored with it, so a price or tier change applies to runs held after it, never to running ones. The
time model's ``k`` predicts run times and plays no part here.

Amounts are exact integers: a GPU share is a ``Fraction`` of whole numbers (shards / shards per GPU),
a tier rate is a whole number of parts per million (an admin's rate has at most 6 decimals), and
``tokens`` is the one rounding rule (up to the token), so 37 s on 1 GPU at 1,000,000 tokens per
GPU-second and a rate of 0.8 is 29,600,000 tokens, not 29,600,001. yolo-sbatch's check, the ledger's
holds and charges, and what job_submit.lua is published all come from here (the Lua script repeats
``tokens`` in its own whole-number arithmetic; tests/controller/test_job_submit_lua.py holds the two equal).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from fractions import Fraction
from typing import NamedTuple

from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.units import scaled

# A user's own estimate of a job's tokens (SPANK --yolo-tokens, or eff= in yolo-sbatch's comment):
# recorded beside the hold for reports, never billed. Only plain ASCII digits, at most 18 of them.
_ESTIMATE = re.compile(r"[0-9]{1,18}")
RATE_SCALE = 10**6  # tier rates are kept in parts per million
_GRES = re.compile(r"(gpu|shard)(?::[A-Za-z0-9_.\-]+)?:([0-9]{1,9})")
REFUND_STATES = {"NODE_FAIL": "refund_node_fail", "BOOT_FAIL": "refund_node_fail", "PREEMPTED": "refund_preempted"}


# How each kind of movement moves an account's balance (the ledger's totals move the same way: a hold
# takes from the balance, a charge moves held tokens to charged, a refund gives them back).
BALANCE_SIGN = {
    "deposit": 1,
    "refill": 1,
    "adjustment": 1,
    "hold": -1,
    "charge": 0,
    "refund": 1,
    "expiry": -1,
    "overrun": -1,
}


class Rules(NamedTuple):
    """The site's choices for end states (``[ledger]`` in the config)."""

    refund_node_fail: bool = True
    refund_preempted: bool = False  # see ``charge``: the rule that makes preempting your own run gain nothing
    charge_timeout_full: bool = True

    @classmethod
    def of(cls, settings: object) -> Rules:
        """The rules as a site's ``[ledger]`` settings set them."""
        return cls(*(bool(getattr(settings, f)) for f in cls._fields))


def exempt(partition: str, account: str, partitions: Collection[str], accounts: Collection[str]) -> str:
    """What keeps a run off the books (``ledger.exempt_partitions``, ``ledger.exempt_accounts``):
    ``partition NAME`` or ``account NAME``; '' when nothing does. Such a run is held and charged
    nothing and admitted without a budget check. A partition by its name as Slurm has it, an account
    in lower case, as Slurm folds it. A job that may run on several partitions is exempt where it
    runs: admission counts the worst case of each of them that is not."""
    if partition in partitions:
        return f"partition {partition}"
    if account.lower() in {a.lower() for a in accounts}:
        return f"account {account.lower()}"
    return ""


def share(whole: int, shards: int, shards_per_gpu: int) -> Fraction:
    """A GPU share: whole GPUs, else shards as a share of one GPU (``shards_per_gpu`` from the admin's
    config; 0: a shard counts as a whole GPU)."""
    if whole:
        return Fraction(whole)
    return Fraction(shards, shards_per_gpu) if shards_per_gpu > 0 else Fraction(shards)


def gpus(tres: Mapping[str, str], shards_per_gpu: int) -> Fraction:
    """Allocated GPUs from Slurm's allocated TRES (see ``share``). 0 for CPU jobs."""
    return share(_count(tres.get("gres/gpu", "")), _count(tres.get("gres/shard", "")), shards_per_gpu)


def gres_share(gres: str, shards_per_gpu: int) -> Fraction:
    """The GPUs a yolo-sbatch GRES asks for (``gpu:t4:2``, ``shard:3``), as the prolog will count them."""
    m = _GRES.fullmatch(gres)
    if m is None:
        raise UsageError(f"GRES {gres!r} is not gpu[:TYPE]:N or shard[:TYPE]:N")
    count = int(m.group(2))
    return share(count, 0, 0) if m.group(1) == "gpu" else share(0, count, shards_per_gpu)


def _count(text: str) -> int:
    """A TRES count as Slurm prints it (``2``); anything else is no count at all."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else 0


def hold_seconds(time_limit: int | None, unlimited_cap: int) -> int:
    """How long a hold covers: the run's time limit, or the configured cap when it has none (an
    UNLIMITED partition); every path (prolog, epilog, reconcile) holds the same."""
    return unlimited_cap if time_limit is None else max(0, time_limit)


def unlimited_cap(hours: float) -> int:
    """The configured hold of a run without a time limit (``ledger.unlimited_hold_hours``), in seconds."""
    return int(hours * 3600)


def parse_rate(text: str) -> int:
    """A tier rate as an admin writes it (``0.8``, ``1.5``, ``0.001``), read exactly from its decimal
    text into parts per million: more than 6 decimals, or anything not positive, is refused."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"tier rate {text!r} is not a number (e.g. 0.8, 1.5)") from None
    ppm = value * RATE_SCALE
    if ppm.denominator != 1:
        raise UsageError(f"tier rate {text!r} has more than 6 decimals")
    if ppm <= 0:
        raise UsageError(f"tier rate must be positive (got {text})")
    return int(ppm)


def rate_text(rate_ppm: int) -> str:
    """A rate in parts per million as the decimal it stands for (800000 -> ``0.8``)."""
    whole, frac = divmod(rate_ppm, RATE_SCALE)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".")


def tokens(seconds: int, gpu_share: Fraction, price: int, rate_ppm: int) -> int:
    """Tokens for ``seconds`` on ``gpu_share`` GPUs at ``price`` tokens per GPU-second and a tier rate
    of ``rate_ppm`` parts per million, rounded up to the token (the only rounding anywhere)."""
    num = max(0, seconds) * gpu_share.numerator * price * rate_ppm
    return -(-num // (gpu_share.denominator * RATE_SCALE))


def fmt_tokens(n: float) -> str:
    """The budget's unit: 1.23 TTok, 1.23 GTok, 456.0 MTok, 0.15 MTok, 12.3 kTok, 42 Tok."""
    return scaled(n, "Tok")


def charge(state: str, elapsed: int, limit: int, gpu_share: Fraction, price: int, rate_ppm: int, rules: Rules) -> int:
    """What a run that ended in ``state`` after ``elapsed`` seconds pays. Failures of the machine
    (NODE_FAIL, BOOT_FAIL) are refunded when the site says so (the default). A PREEMPTED run pays the
    time it ran, grace time included, like any run (the default; ``refund_preempted`` refunds it, for
    sites where no user can preempt): its epochs are checkpointed and the requeued run resumes from
    them, so the time bought work that is kept, and a user who preempts her own run with a higher
    tier gains nothing (each run pays its own seconds at its own tier's rate). A job's own TIMEOUT pays at
    least its ``limit``, the time limit in force when it ended (as ``hold_seconds`` reads sacct's: a
    limit its user lowered while it ran is what it timed out at, not the longer one its hold took);
    everything else pays the time it ran, past its hold too (an admin's time extension or
    OverTimeLimit is not free)."""
    flag = REFUND_STATES.get(state)
    if flag and getattr(rules, flag):
        return 0
    used = tokens(elapsed, gpu_share, price, rate_ppm)
    if state == "TIMEOUT" and rules.charge_timeout_full:
        return max(tokens(limit, gpu_share, price, rate_ppm), used)
    return used


def user_estimate(spank_value: str | None, comment: str | None) -> int | None:
    """The user's own claim, parsed strictly (ASCII digits only, at most 18): SPANK ``--yolo-tokens``,
    else ``eff=`` in a ``yolo:`` comment. Anything else is no estimate; it never raises."""
    if spank_value and _ESTIMATE.fullmatch(spank_value):
        return int(spank_value)
    if comment and comment.startswith("yolo:"):
        for item in comment[5:].split(","):
            key, _, value = item.partition("=")
            if key == "eff":
                return int(value) if _ESTIMATE.fullmatch(value) else None
    return None
