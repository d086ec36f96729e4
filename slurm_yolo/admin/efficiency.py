"""GPU efficiency and health of a yolo job, from the launcher's usage records (NVML, per epoch).

The launcher samples the training's GPUs between two epoch records: mean utilisation, peak memory of
the training's processes, the GPU's memory and its hottest temperature (``launcher.GpuUsage``). Here
those records become what an operator asks of a job, in the manner of Princeton's jobstats: how much
of its GPU time ran under a utilisation threshold, whether it would have fit a shard, how hot its
GPUs ran, and its images/s against GPU memory per batch size (where a bigger batch stops paying).

The records are the job's user's own file: every figure is read as hostile input (finite, in its
physical range, or not at all), and what comes of them is a report or an alert, never a charge.
Pure functions: the report (pandas) and the alerts (Slurm's running jobs) call them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_yolo.core.config import Config

RANGES = {  # what NVML can report; a value outside is junk, not a figure
    "gpu_util_pct": (0.0, 100.0),
    "gpu_mem_gb": (0.0, 4096.0),
    "gpu_mem_total_gb": (0.0, 4096.0),
    "gpu_temp_c": (-50.0, 200.0),
    "seconds": (0.0, 366 * 86400.0),
    "time": (0.0, 1e11),
}
MAX_IMAGES_PER_S = 1e7  # far past any GPU: an epoch claiming more (1e-300 s, say) says nothing of its speed
CLOCK_SKEW = 300.0  # a record written "later" than now by more than this is not from this job's clock


@dataclass(frozen=True)
class Thresholds:
    """The site's lines (``[efficiency]``): GPU time under ``low_util_pct`` is under-used; a running job
    under it for ``idle_minutes`` is an alert (0: never); a GPU over ``temp_limit_c`` is an alert."""

    low_util_pct: float
    idle_minutes: float
    temp_limit_c: float


def thresholds(config: Config) -> Thresholds:
    e = config.efficiency
    return Thresholds(e.low_util_pct, e.idle_minutes, e.temp_limit_c)


def figure(rec: Mapping[str, Any], key: str) -> float | None:
    """``rec[key]`` as a float in its physical range, or None (absent, text, NaN, out of range)."""
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:  # an integer of 400 digits
        return None
    low, high = RANGES[key]
    return x if math.isfinite(x) and low <= x <= high else None


@dataclass(frozen=True)
class GpuUse:
    """One job's GPU use over the epochs its records cover (None: the records never said)."""

    seconds: float  # epoch seconds with a utilisation sample
    low_seconds: float  # of those, seconds of epochs under the threshold
    util_pct: float | None  # time-weighted mean utilisation
    mem_gb: float | None  # peak memory of the training's processes
    mem_total_gb: float | None  # the GPU's memory
    temp_c: float | None  # hottest temperature seen
    images_per_s: float | None
    batch: int | None

    @property
    def low_share(self) -> float:
        """The share of its sampled GPU time under the threshold."""
        return self.low_seconds / self.seconds if self.seconds > 0 else 0.0

    def fits(self, share: float) -> bool:
        """Would the job have run on ``share`` of a GPU: its peak memory within that share of the GPU's
        memory, and its utilisation within that share of the GPU's time (a float's last bit spared)."""
        if self.mem_gb is None or self.mem_total_gb is None or self.util_pct is None:
            return False
        return self.mem_gb <= share * self.mem_total_gb * (1 + 1e-9) and self.util_pct <= share * 100 * (1 + 1e-9)


def _epochs(records: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int | None]:
    """The epoch records (the last of each epoch: a requeued run repeats some), and the batch size."""
    epochs: dict[int, Mapping[str, Any]] = {}
    batch = None
    for rec in records:
        if rec.get("kind") == "start":
            b = rec.get("batch")
            batch = b if isinstance(b, int) and not isinstance(b, bool) and 0 < b < 1 << 20 else batch
        elif rec.get("kind") == "epoch" and isinstance(rec.get("epoch"), int):
            epochs[rec["epoch"]] = rec
    return [epochs[k] for k in sorted(epochs)], batch


def summarize(records: Iterable[Mapping[str, Any]], low_util_pct: float) -> GpuUse | None:
    """A job's GPU use from its usage records, or None when no epoch carries GPU figures (no GPU, no
    NVML, or records that say nothing readable)."""
    epochs, batch = _epochs(records)
    seconds = low = weighted = images = image_seconds = 0.0
    peak: dict[str, float] = {}  # the highest of each figure over the epochs
    for rec in epochs:
        s = figure(rec, "seconds") or 0.0
        util = figure(rec, "gpu_util_pct")
        if util is not None and s > 0:
            seconds += s
            weighted += util * s
            low += s if util < low_util_pct else 0.0
        n = rec.get("images")
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1 << 40 and s > 0 and n / s <= MAX_IMAGES_PER_S:
            images, image_seconds = images + n, image_seconds + s
        for key in ("gpu_mem_gb", "gpu_mem_total_gb", "gpu_temp_c"):
            x = figure(rec, key)
            if x is not None:
                peak[key] = max(peak.get(key, x), x)
    if seconds == 0 and not peak:
        return None
    return GpuUse(
        seconds=seconds,
        low_seconds=low,
        util_pct=weighted / seconds if seconds else None,
        mem_gb=peak.get("gpu_mem_gb"),
        mem_total_gb=peak.get("gpu_mem_total_gb"),
        temp_c=peak.get("gpu_temp_c"),
        images_per_s=images / image_seconds if image_seconds else None,
        batch=batch,
    )


def running_alerts(records: Iterable[Mapping[str, Any]], now: float, t: Thresholds) -> list[tuple[str, str]]:
    """What is wrong now with a running job, from its records, as (kind, message): ``gpu-idle`` when
    every epoch of the last ``idle_minutes`` ran under the utilisation threshold (the epochs recorded
    in that window must reach back to its start: a job is judged only on what it recorded), ``gpu-hot``
    when a GPU ran over the temperature limit in the epoch that ended last. A record dated after now
    is not this job's clock and is left out (a user cannot park one in the future to hide the rest).
    A job whose records stopped is the watchdog's (``watchdog``: a zombie), not an idle GPU's."""
    epochs, _ = _epochs(records)
    timed = [(figure(r, "time"), figure(r, "seconds") or 0.0, r) for r in epochs]
    spans = sorted(
        ((end - s, end, r) for end, s, r in timed if end is not None and end <= now + CLOCK_SKEW),
        key=lambda span: (span[1], span[0]),
    )  # by end; never by the records themselves
    out = []
    window = t.idle_minutes * 60
    recent = [(begin, r) for begin, end, r in spans if end >= now - window]
    utils = [figure(r, "gpu_util_pct") for _, r in recent]
    known = [u for u in utils if u is not None]
    covered = bool(recent) and min(b for b, _ in recent) <= now - window
    if window > 0 and covered and len(known) == len(utils) and all(u < t.low_util_pct for u in known):
        mean = sum(known) / len(known)
        out.append(
            (
                "gpu-idle",
                f"GPU utilisation {mean:.0f}% (under {t.low_util_pct:g}%) for the last {t.idle_minutes:g} minutes",
            )
        )
    if spans:
        temp = figure(spans[-1][2], "gpu_temp_c")
        if temp is not None and temp > t.temp_limit_c:
            out.append(("gpu-hot", f"GPU at {temp:.0f} C (over {t.temp_limit_c:g} C) in its latest epoch"))
    return out
