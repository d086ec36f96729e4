"""The billing policy, as pure functions: what a run holds when it starts and pays when it ends.

Money depends only on facts slurmctld sets (allocated GPUs or shards, the time limit, the elapsed
time and the end state of each run) and on two numbers an admin sets: the partition's **price** in
tokens per GPU-second and the QOS tier's **rate**. Both are read once, when the run is held, and
stored with it, so a price or tier change applies to runs held after it, never to running ones. The
time model's ``k`` predicts run times and plays no part here.

Amounts are exact: GPU shares and tier rates are rationals (``Fraction``), so 37 s on 1 GPU at
1,000,000 tokens per GPU-second and a rate of 0.8 is 29,600,000 tokens, not 29,600,001.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

# A user's own estimate of a job's tokens (SPANK --yolo-tokens, or eff= in yolo-sbatch's comment):
# recorded beside the hold for reports, never billed. Only plain ASCII digits, at most 18 of them.
_ESTIMATE = re.compile(r"[0-9]{1,18}")
REFUND_STATES = {"NODE_FAIL": "refund_node_fail", "BOOT_FAIL": "refund_node_fail", "PREEMPTED": "refund_preempted"}


class Rules(NamedTuple):
    """The site's choices for end states (``[ledger]`` in the config)."""

    refund_node_fail: bool = True
    refund_preempted: bool = True
    charge_timeout_full: bool = True


def exact(value: float | int | str) -> Fraction:
    """A stored rate or GPU share as the rational it stands for (0.8 -> 4/5, 0.333333 -> 1/3)."""
    return Fraction(value).limit_denominator(10**6) if isinstance(value, float) else Fraction(value)


def gpus(tres: Mapping[str, str], shards_per_gpu: int) -> Fraction:
    """Allocated GPUs from Slurm's allocated TRES: whole GPUs, or shards as a share of one GPU
    (``shards_per_gpu`` from the admin's config; 0: a shard counts as a whole GPU). 0 for CPU jobs."""
    whole = _count(tres.get("gres/gpu", ""))
    if whole:
        return Fraction(whole)
    shards = _count(tres.get("gres/shard", ""))
    if shards:
        return Fraction(shards, shards_per_gpu) if shards_per_gpu > 0 else Fraction(shards)
    return Fraction(0)


def _count(text: str) -> int:
    """A TRES count as Slurm prints it (``2``); anything else is no count at all."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else 0


def hold_seconds(time_limit: int | None, unlimited_cap: int) -> int:
    """How long a hold covers: the run's time limit, or the configured cap when it has none (an
    UNLIMITED partition); every path (prolog, epilog, reconcile) holds the same."""
    return unlimited_cap if time_limit is None else max(0, time_limit)


def tokens(seconds: int, gpu_share: Fraction, price: int, rate: Fraction) -> int:
    """Tokens for ``seconds`` on ``gpu_share`` GPUs at ``price`` tokens per GPU-second and tier
    ``rate``, rounded up to the token."""
    return math.ceil(max(0, seconds) * gpu_share * price * rate)


def charge(state: str, elapsed: int, hold: int, gpu_share: Fraction, price: int, rate: Fraction, rules: Rules) -> int:
    """What a run that ended in ``state`` after ``elapsed`` seconds pays. Failures of the machine
    (NODE_FAIL, BOOT_FAIL, PREEMPTED) are refunded when the site says so; a job's own TIMEOUT pays at
    least its whole hold; everything else pays the time it ran, past its hold too (an admin's time
    extension or OverTimeLimit is not free)."""
    flag = REFUND_STATES.get(state)
    if flag and getattr(rules, flag):
        return 0
    used = tokens(elapsed, gpu_share, price, rate)
    if state == "TIMEOUT" and rules.charge_timeout_full:
        return max(hold, used)
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
