"""What a planned run costs, before it runs: the hold its start takes and the charge its predicted
run time would pay, in the ledger's budget tokens, GPU-hours and the site's money.

Two quantities, two units: a plan's **work** (pixels through the network, FLOPs-scaled: ``Mpx``,
``*_pixels``) predicts how long the run takes; its **budget tokens** (``Tok``, ``*_tokens``) are
what the ledger holds and charges (seconds x GPUs x the partition's price x the
QOS tier's rate, ``policy.tokens``). Money is the partition's ``cost_per_gpu_hour`` times GPU-hours,
with ``ledger.currency`` as its name. Pure, except ``prices``, which reads the published ledger.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import NamedTuple

from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError
from slurm_yolo.slurm import commands
from slurm_yolo.state.ledger import Ledger


class Quote(NamedTuple):
    """A run's cost at its plan's GPUs, price and tier rate."""

    gpu_share: Fraction  # GPUs it holds (a shard: its share of one)
    price: int  # budget tokens per GPU-second
    rate_ppm: int  # the QOS tier's rate, parts per million
    hold_tokens: int  # what its start holds: the time limit's worth
    expected_tokens: int  # what the predicted run time would be charged
    hold_gpu_hours: float
    expected_gpu_hours: float
    cost_per_gpu_hour: float
    currency: str

    @property
    def hold_money(self) -> float:
        return self.hold_gpu_hours * self.cost_per_gpu_hour

    @property
    def expected_money(self) -> float:
        return self.expected_gpu_hours * self.cost_per_gpu_hour

    def to_dict(self) -> dict[str, object]:
        return {
            "hold_tokens": self.hold_tokens,
            "expected_charge_tokens": self.expected_tokens,
            "price_tokens_per_gpu_second": self.price,
            "tier_rate": policy.rate_text(self.rate_ppm),
            "gpus_held": float(self.gpu_share),
            "hold_gpu_hours": self.hold_gpu_hours,
            "expected_gpu_hours": self.expected_gpu_hours,
            "hold_money": self.hold_money,
            "expected_charge_money": self.expected_money,
            "currency": self.currency,
        }


def quote(
    limit_seconds: int,
    predicted_seconds: float,
    gpu_share: Fraction,
    price: int,
    rate_ppm: int,
    cost_per_gpu_hour: float,
    currency: str,
) -> Quote:
    """The cost of a run with this limit and prediction (pure): budget tokens as the prolog holds and
    the epilog charges them, GPU-hours, money."""
    expected = round(predicted_seconds)
    return Quote(
        gpu_share=gpu_share,
        price=price,
        rate_ppm=rate_ppm,
        hold_tokens=policy.tokens(limit_seconds, gpu_share, price, rate_ppm),
        expected_tokens=policy.tokens(expected, gpu_share, price, rate_ppm),
        hold_gpu_hours=gpu_hours(limit_seconds, gpu_share),
        expected_gpu_hours=gpu_hours(expected, gpu_share),
        cost_per_gpu_hour=cost_per_gpu_hour,
        currency=currency,
    )


def prices(config: Config, lg: Ledger | None, partition: str, qos: str) -> tuple[int, int]:
    """(price, tier rate) the partition's runs of ``qos`` would be held at now: the ledger's (this
    cluster's own, where a cluster has any), else the config's default price and rate 1. The cluster
    is asked of Slurm only when some price or rate is a cluster's own; unreachable, the grant's apply."""
    default = int(config.ledger.default_price)
    if lg is None:
        return default, policy.RATE_SCALE
    cluster = ""
    if lg.has_cluster_prices():
        try:
            cluster = commands.home_cluster(config.bin_dir)
        except SlurmError:
            cluster = ""
    return lg.price_at(partition, time.time(), default, cluster), lg.tier_rate(qos, cluster)


def gpu_hours(seconds: float, gpu_share: Fraction | float) -> float:
    """GPU-hours of ``seconds`` on ``gpu_share`` GPUs (a shard: a share of one): what money is counted in."""
    return seconds * float(gpu_share) / 3600


def spend(runs: Iterable[tuple[str, str, float, int]], cost_per_gpu_hour: Mapping[str, float]) -> dict[str, float]:
    """Per account, the money its runs (account, partition, GPU share, elapsed seconds) cost: their
    GPU-hours at each partition's ``cost_per_gpu_hour`` (a partition without one costs nothing)."""
    out: dict[str, float] = {}
    for account, partition, gpus, elapsed in runs:
        out[account] = out.get(account, 0.0) + gpu_hours(elapsed, gpus) * cost_per_gpu_hour.get(partition, 0.0)
    return out


def fmt_amount(amount: float) -> str:
    """``1,234.50``; amounts under 0.01 keep three significant digits (a short shard job's GPU-hours or
    money is not ``0.00``)."""
    return f"{amount:,.2f}" if amount == 0 or abs(amount) >= 0.01 else f"{amount:.3g}"


def fmt_money(amount: float, currency: str) -> str:
    """``0.42 EUR``, ``0.00312 EUR``."""
    return f"{fmt_amount(amount)} {currency}".rstrip()


def money_part(q: Quote) -> str:
    """`` = 0.42 EUR`` for the submit line; nothing where the partition has no cost_per_gpu_hour."""
    return f" = {fmt_money(q.hold_money, q.currency)}" if q.cost_per_gpu_hour > 0 else ""
