"""The cron refit: k (and every term the data supports) per partition from its recent samples.

Samples are the jobs' measured runs (fed back by the epilog) and the run folders admins calibrated
from. The fit is robust (Huber on relative error: a user's broken job does not move k), needs a
minimum number of runs in the window, and moves k at most ``max_step`` per refit; every change
lands in the history. A user's job summaries (she writes them) weigh together at most as many runs
as the median user's (``fitting.user_weights``), so one user's flood of forged summaries counts as
one typical user's runs, which Huber then discounts as outliers of the rest; with one user, or a
few, nothing tells her runs from the truth, and k still moves at most ``max_step`` a refit. A saved
refit opens a new window for the users' feedback budgets (``feedback``). It also reports the time-limit buffer its cross-validation justifies, and the
price that would bill each partition at its measured throughput, for an admin to apply or not: a
refit never changes what a run costs. A refit whose cross-validated error on the runs recorded since
the partition's last fit is worse than the current model's is not applied (``calibration.judge``,
as ``calibrate`` refuses it without ``--force``); the history names every applied one
"recalibrate: N runs of D days".
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

from slurm_yolo.core.config import Config
from slurm_yolo.core.model.timemodel import TimeModel, buffer_for
from slurm_yolo.state import calibration

HOUR = 3600.0  # the run length a refit's justified buffer is reported for


@dataclass(frozen=True)
class Refit:
    """One partition's refit: old and new model, the evidence, and what was done."""

    partition: str
    samples: int
    old: TimeModel
    new: TimeModel
    applied: bool
    reason: str
    buffer_justified: float  # for a one-hour run (short runs need more: start-up jitter)
    buffer_configured: float

    @property
    def proposed_price(self) -> int:
        """Tokens per GPU-second that would bill a GPU-second at the measured throughput (1e6 / k):
        a proposal only. Prices are set by an admin (``ledger price set``), never by a refit."""
        return max(1, round(1e6 / self.new.k)) if self.new.k > 0 else 0

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "old": asdict(self.old), "new": asdict(self.new), "proposed_price": self.proposed_price}


def refit_partition(
    store: calibration.Store, partition: str, window_days: float, min_samples: int, max_step: float, dry_run: bool
) -> Refit:
    config = store.config
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - window_days * 86400))
    rows = store.sample_rows(partition, since=since)
    samples = [r.sample for r in rows]
    current = calibration.load(config, partition)
    old = current.model
    base = config.estimate.buffer
    if len(samples) < min_samples:
        return Refit(
            partition,
            len(samples),
            old,
            old,
            False,
            f"{len(samples)} runs in {window_days:g} days < {min_samples}",
            buffer_for(old, 0.0, HOUR).value,
            base,
        )
    new, cv = calibration.fit_partition_cv(config, partition, samples, old)
    verdict = calibration.judge(store, partition, rows, set(), current, cv)
    reason = f"refit on {len(samples)} runs"
    if verdict.worse:  # as calibrate refuses it without --force: a cron has no one to force it
        reason = f"{verdict.worse} (judged on {verdict.on}): kept the current model"
        return Refit(partition, len(samples), old, new, False, reason, buffer_for(old, 0.0, HOUR).value, base)
    if old.n and old.k > 0:
        lo, hi = old.k / (1 + max_step), old.k * (1 + max_step)
        if not lo <= new.k <= hi:
            reason += f"; k step limited to {max_step:.0%} (fit says {new.k:.4g})"
            new = replace(new, k=min(max(new.k, lo), hi))
    if not dry_run:
        store.save(partition, new, f"recalibrate: {len(samples)} runs of {window_days:g} days")
    return Refit(partition, len(samples), old, new, not dry_run, reason, buffer_for(new, 0.0, HOUR).value, base)


def recalibrate(
    config: Config,
    partitions: list[str] | None = None,
    window_days: float = 30,
    min_samples: int = 5,
    max_step: float = 0.5,
    dry_run: bool = False,
) -> list[Refit]:
    """Refit the given partitions (default: every partition with samples)."""
    with calibration.Store(config) as store:
        names = partitions or store.partitions()
        return [refit_partition(store, p, window_days, min_samples, max_step, dry_run) for p in names]
