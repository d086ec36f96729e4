"""Measured throughput back into k: each finished job nudges its partition's model.

The epilog starts this detached (it must not slow the epilog): the job's usage records give the
workload (the launcher's ``start`` record) and the training seconds actually measured. The run is
stored as a calibration sample (the cron refit, ``slurm-yolo recalibrate``, reads them all), and k
moves now by an exponentially weighted step toward the value that would have predicted this run,
unless the run is an outlier (a broken job must not move k).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import calibration
from .config import Config
from .estimate import Workload
from .parse.records import iter_records, parse_records, read_usage
from .timemodel import Sample, TimeModel, components, final_val_seconds, predict_train_seconds, startup_seconds

ALPHA = 0.3  # weight of one job in the running k
MAX_STEP = 0.25  # an established partition's k moves at most this fraction per job
OUTLIER = (0.5, 2.0)  # actual / predicted outside this on an established partition: recorded, not applied
ESTABLISHED = 5  # runs behind a model before outliers are rejected: until then jobs correct a poor prior
COMPUTE_SHARE = 0.25  # below this share of a run's predicted time, compute cannot be told from fixed costs


@dataclass(frozen=True)
class Feedback:
    """What one job did to its partition's k."""

    partition: str
    job_id: int
    applied: bool
    reason: str
    k_before: float
    k_after: float
    ratio: float | None = None


def sample_from_usage(path: Path, key: str, owner: int | None = None, elapsed: int | None = None) -> Sample | None:
    """The finished job as a calibration sample (None when its records say too little). The file is
    the job's user's: read bounded, never through a link or from a FIFO or device, and only when
    ``owner`` (the job's uid, when given) owns it. ``elapsed`` (Slurm's, not the user's) is the whole
    job's time when the records show one uninterrupted run; a requeued job's elapsed covers its last
    run only."""
    text = read_usage(path, [], owner)
    records = list(iter_records(path, text))
    start = next((r for r in records if r.get("kind") == "start"), None)
    parsed = parse_records(path, text)
    if not start or not isinstance(start.get("workload"), dict) or not parsed.per_epoch:
        return None
    w = Workload(**start["workload"])  # type: ignore[arg-type]
    done = parsed.epochs_completed
    passes = done if w.val_passes >= w.epochs else (1 if done >= w.epochs else 0)
    seconds = sum(e.seconds or 0.0 for e in parsed.per_epoch)
    if seconds <= 0:
        return None
    one_run = not any(r.get("kind") in ("resume", "requeue") for r in records)
    total = float(elapsed) if elapsed and one_run and elapsed >= seconds else None
    return Sample(replace(w, epochs=done, val_passes=passes), int(str(start.get("gpus") or 1)), seconds, key=key,
                  total_seconds=total, cpus=int(str(start.get("cpus") or 0)))  # fmt: skip


def nudge(tm: TimeModel, sample: Sample, ddp_eff: float, reference_gflops: float) -> tuple[TimeModel, float, str]:
    """k moved toward this run (EWMA, bounded step), and the start-up toward what the job's elapsed
    showed; the ratio actual/predicted and why."""
    predicted = predict_train_seconds(sample.workload, tm, sample.gpus, ddp_eff, reference_gflops, sample.cpus)
    ratio = sample.train_seconds / predicted if predicted > 0 else float("inf")
    established = tm.n >= ESTABLISHED
    if established and not OUTLIER[0] <= ratio <= OUTLIER[1]:
        return tm, ratio, f"outlier: actual/predicted {ratio:.2f}, k unchanged"
    alpha = max(ALPHA, 1 / (tm.n + 1))  # a running mean while the partition has few runs
    notes = []
    if sample.total_seconds:
        w = sample.workload
        gap = max(0.0, sample.total_seconds - sample.train_seconds - final_val_seconds(w, tm, reference_gflops))
        gap /= startup_seconds(w, tm, reference_gflops) / tm.startup_seconds if tm.startup_seconds > 0 else 1.0
        weight = max(ALPHA, 1 / (tm.startup_n + 1))
        startup = (1 - weight) * tm.startup_seconds + weight * gap
        notes.append(f"start-up {tm.startup_seconds:.1f} -> {startup:.1f} s (this job {gap:.1f}, reference model)")
        tm = replace(tm, startup_seconds=startup, startup_n=tm.startup_n + 1)
    c = components(sample.workload, tm, sample.gpus, ddp_eff, reference_gflops, sample.cpus)
    per_k = c.compute / tm.k if tm.k > 0 else 0.0
    if per_k <= 0 or c.compute < COMPUTE_SHARE * (c.fixed + c.compute) or sample.train_seconds <= c.fixed:
        # Compute is too small a part of this run to tell k from the fixed costs: the run still
        # says how far off the whole model is, so every time term moves by the same factor.
        step = (sample.train_seconds / predicted) ** alpha
        if established:
            step = min(max(step, 1 - MAX_STEP), 1 + MAX_STEP)
        scaled = replace(tm, k=tm.k * step, overhead_seconds=tm.overhead_seconds * step,
                         epoch_seconds=tm.epoch_seconds * step, val_pass_seconds=tm.val_pass_seconds * step,
                         iteration_seconds=tm.iteration_seconds * step, image_seconds=tm.image_seconds * step,
                         val_image_seconds=tm.val_image_seconds * step)  # fmt: skip
        why = f"k {tm.k:.4g} -> {scaled.k:.4g}: fixed costs dominate this run, so the whole model moved x{step:.3f}"
        return scaled, ratio, "; ".join([why, *notes])
    measured = (sample.train_seconds - c.fixed) / per_k
    k = (1 - alpha) * tm.k + alpha * measured
    if established:
        k = min(max(k, tm.k * (1 - MAX_STEP)), tm.k * (1 + MAX_STEP))
    return replace(tm, k=k), ratio, "; ".join([f"k {tm.k:.4g} -> {k:.4g} (this job measured {measured:.4g})", *notes])


def job_feedback(config: Config, partition: str, job_id: int, usage: Path, cluster: str = "default",
                 owner: int | None = None, elapsed: int | None = None) -> Feedback | None:  # fmt: skip
    """Record the job's measured run and nudge its partition's k (the time model only: no hold or
    charge reads k); None when it left no usable records."""
    sample = sample_from_usage(usage, key=f"job:{cluster}:{job_id}", owner=owner, elapsed=elapsed)
    if sample is None:
        return None
    part = config.partition(partition)
    ref = config["estimate"]["reference_gflops"]
    with calibration.Store(config) as store:
        if not store.add_sample(partition, sample, "job"):
            current = calibration.load(config, partition).model
            return Feedback(partition, job_id, False, "already recorded", current.k, current.k)
        current = calibration.load(config, partition).model
        tm, ratio, why = nudge(current, sample, part.ddp_efficiency, ref)
        applied = tm is not current
        if applied:
            store.save(partition, replace(tm, n=current.n + 1), f"job {job_id}")
    return Feedback(partition, job_id, applied, why, current.k, tm.k, ratio)
