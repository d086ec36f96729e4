"""Measured throughput back into k: each finished job nudges its partition's model.

The settler runs this after a job's epilog (it must not slow the epilog): the summary the job's
launcher left in its Comment (``beacon``: the workload and the training seconds actually measured,
from its usage records; the controller reads no file of the user's) makes the sample. The run is
stored as a calibration sample (the cron refit, ``slurm-yolo recalibrate``, reads them all), and k
moves now by an exponentially weighted step toward the value that would have predicted this run,
unless the run is an outlier (a broken job must not move k).

The summary is the user's own, so it is checked against Slurm and what it can move is bounded:

- Training never took longer than Slurm's elapsed for the job: the summary's training seconds are
  capped at it, and without an elapsed from Slurm (or a uid to answer for the move) nothing moves.
- One job moves each learned term (k, every fixed time term, the start-up) by a factor within
  [1/(1 + JOB_STEP), 1 + JOB_STEP] of its current value, however few runs the partition has.
- One user's jobs together, since the partition's last admin save (``recalibrate``, ``calibrate``),
  move k, the fixed time terms and the start-up each by a product of factors within
  [1/(1 + USER_STEP), 1 + USER_STEP]: once a user's moves of a term reach the bound, that user's
  jobs can only move it back. Each term has its own budget, so the bound holds for the model as a
  whole: a prediction is a sum (and a max) of these terms, each times a workload's counts, so
  however a user's summaries mix them (k down with a compute-heavy job, everything up with a
  fixed-cost one, over and over), no prediction moves by more than 1 + USER_STEP either way.
- Every user's jobs together, in the same window, move each term by a product within
  [1/(1 + PARTITION_STEP), 1 + PARTITION_STEP]: without it, N colluding users (or N accounts of one
  person) would move a partition x(1 + USER_STEP)^N. Once the partition's moves of a term reach the
  bound, jobs can only move it back until an admin's save (the nightly ``recalibrate``, which weighs
  every stored sample, each user's as a few runs) opens a new window.

- No job changes ``n``, the number of runs the partition's model was fitted on: it sets the limit's
  buffer (an uncalibrated partition's limit is doubled) and when outliers are refused, so only an
  admin's fit (``calibrate``, the cron's ``recalibrate``, which weighs every job's sample) moves it.
- The summary's counts must be whole and positive, and its GPUs are at most those Slurm allocated.

What a job asked beyond that is not applied: its sample is stored and the move is recorded as
asked-versus-applied (``moves`` in calibration.db), for the next refit to weigh with every other run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from slurm_yolo.core.config import Config
from slurm_yolo.core.model.timemodel import (
    Sample,
    TimeModel,
    components,
    final_val_seconds,
    predict_train_seconds,
    startup_seconds,
)
from slurm_yolo.parse.beacon import Beacon
from slurm_yolo.state import calibration

ALPHA = 0.3  # weight of one job in the running k
OUTLIER = (0.5, 2.0)  # actual / predicted outside this on an established partition: recorded, not applied
ESTABLISHED = 5  # runs behind a model before outliers are rejected: until then jobs correct a poor prior
COMPUTE_SHARE = 0.25  # below this share of a run's predicted time, compute cannot be told from fixed costs
JOB_STEP = 0.10  # one job moves a term by a factor within [1/(1 + JOB_STEP), 1 + JOB_STEP]
USER_STEP = 0.10  # one user's jobs together, per admin save, within [1/(1 + USER_STEP), 1 + USER_STEP]
PARTITION_STEP = 0.15  # every user's jobs together, per admin save, within [1/(1 + it), 1 + it]
# The fixed time terms: feedback moves them all by one factor (k's, where fixed costs dominate a run).
FIXED_TERMS = (
    "overhead_seconds",
    "epoch_seconds",
    "val_pass_seconds",
    "iteration_seconds",
    "image_seconds",
    "val_image_seconds",
)


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


def sample_from_beacon(
    b: Beacon | None, key: str, elapsed: int | None = None, gpus: int | None = None
) -> Sample | None:
    """The finished job as a calibration sample, from the summary its launcher left in its Comment
    (None when that says too little, or a count that cannot be: no images, no epochs, no FLOPs).
    ``elapsed`` (Slurm's, not the user's) caps the training time the summary claims, and is the
    whole job's time when one uninterrupted run did the training and it fits in it; a requeued job's
    elapsed covers its last run only. ``gpus`` (what Slurm allocated, whole) caps the GPUs claimed."""
    if b is None or b.workload is None or b.epochs_done <= 0 or b.train_seconds <= 0:
        return None
    w, done, seconds = b.workload, b.epochs_done, b.train_seconds
    if min(w.train_images, w.imgsz, w.epochs, w.batch, w.gflops, b.gpus) <= 0 or done > w.epochs:
        return None
    passes = done if w.val_passes >= w.epochs else (1 if done >= w.epochs else 0)
    total = float(elapsed) if elapsed and b.one_run and elapsed >= seconds else None
    if elapsed:
        seconds = min(seconds, float(elapsed))  # the summary is the user's; Slurm's clock is not
    return Sample(
        replace(w, epochs=done, val_passes=passes),
        min(b.gpus, gpus or b.gpus),
        seconds,
        key=key,
        total_seconds=total,
        cpus=b.cpus,
    )


def nudge(tm: TimeModel, sample: Sample, ddp_eff: float, reference_gflops: float) -> tuple[TimeModel, float, str]:
    """k moved toward this run (EWMA), and the start-up toward what the job's elapsed showed; the
    ratio actual/predicted and why. What is applied of it is ``bound``'s to say."""
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
        scaled = replace(
            tm,
            k=tm.k * step,
            overhead_seconds=tm.overhead_seconds * step,
            epoch_seconds=tm.epoch_seconds * step,
            val_pass_seconds=tm.val_pass_seconds * step,
            iteration_seconds=tm.iteration_seconds * step,
            image_seconds=tm.image_seconds * step,
            val_image_seconds=tm.val_image_seconds * step,
        )
        why = f"k {tm.k:.4g} -> {scaled.k:.4g}: fixed costs dominate this run, so the whole model moved x{step:.3f}"
        return scaled, ratio, "; ".join([why, *notes])
    measured = (sample.train_seconds - c.fixed) / per_k
    k = (1 - alpha) * tm.k + alpha * measured
    return replace(tm, k=k), ratio, "; ".join([f"k {tm.k:.4g} -> {k:.4g} (this job measured {measured:.4g})", *notes])


class Move(NamedTuple):
    """Factors a partition's terms move by: k's, the fixed time terms' (one factor for all) and the
    start-up's."""

    k: float = 1.0
    fixed: float = 1.0
    startup: float = 1.0


def allowed(used: float, everyone: float = 1.0) -> tuple[float, float]:
    """The factors one job may move a term by, when its user's moves of it this window multiply to
    ``used`` and every user's to ``everyone``: within one job's step, keeping the user's product
    within their bound and the partition's within its own."""
    lo = max(1 / (1 + JOB_STEP), 1 / ((1 + USER_STEP) * used), 1 / ((1 + PARTITION_STEP) * everyone))
    hi = min(1 + JOB_STEP, (1 + USER_STEP) / used, (1 + PARTITION_STEP) / everyone)
    return min(lo, 1.0), max(hi, 1.0)  # never away from 1 in the other direction (rounding at the bound)


def _factor(before: float, after: float) -> float:
    return after / before if before > 0 else 1.0  # a term at 0 is the refit's to move


def _clamp(factor: float, used: float, everyone: float) -> float:
    lo, hi = allowed(used, everyone)
    return min(max(factor, lo), hi)


def _fixed_factor(current: TimeModel, wanted: TimeModel) -> float:
    """The factor ``wanted`` moves the fixed terms by (``nudge`` moves them together): the one
    furthest from 1, should they differ."""
    factors = [_factor(getattr(current, t), getattr(wanted, t)) for t in FIXED_TERMS]
    return max(factors, key=lambda f: abs(math.log(f)) if f > 0 else math.inf)


def bound(current: TimeModel, wanted: TimeModel, used: Move, everyone: Move) -> tuple[TimeModel, Move, Move]:
    """``wanted`` as far as one job, its user (``used``: her moves this window) and the partition
    (``everyone``: every user's) may still move ``current`` (the rules in the module docstring): the
    model, the factors asked and the factors applied."""
    asked = Move(
        _factor(current.k, wanted.k),
        _fixed_factor(current, wanted),
        _factor(current.startup_seconds, wanted.startup_seconds),
    )
    applied = Move(*(_clamp(a, u, e) for a, u, e in zip(asked, used, everyone, strict=True)))
    fixed = {t: getattr(current, t) * applied.fixed for t in FIXED_TERMS}
    tm = replace(wanted, k=current.k * applied.k, startup_seconds=current.startup_seconds * applied.startup, **fixed)
    return tm, asked, applied


def job_feedback(
    config: Config,
    partition: str,
    job_id: int,
    summary: Beacon | None,
    cluster: str = "default",
    owner: int | None = None,
    elapsed: int | None = None,
    gpus: int | None = None,
) -> Feedback | None:
    """Record the job's measured run and nudge its partition's k (the time model only: no hold or
    charge reads k), within the bounds of the module docstring; None when its summary says too little.
    Without Slurm's ``elapsed`` the records cannot be checked, and without the job's ``owner`` no
    user answers for the move: neither is then recorded."""
    if not elapsed or owner is None:
        k = calibration.load(config, partition).model.k
        why = "no elapsed time from Slurm to check the records against" if not elapsed else "no job uid"
        return Feedback(partition, job_id, False, f"{why}: not recorded, k unchanged", k, k)
    sample = sample_from_beacon(summary, key=f"job:{cluster}:{job_id}", elapsed=elapsed, gpus=gpus)
    if sample is None:
        return None
    part = config.partition(partition)
    ref = config.estimate.reference_gflops
    with calibration.Store(config) as store, store.transaction():
        current = calibration.load(config, partition).model
        if not store.add_sample(partition, sample, "job", owner):
            return Feedback(partition, job_id, False, "already recorded", current.k, current.k)
        wanted, ratio, why = nudge(current, sample, part.ddp_efficiency, ref)
        everyone = Move(*store.moved_by(partition, None))
        tm, asked, applied = bound(current, wanted, Move(*store.moved_by(partition, owner)), everyone)
        store.add_move(partition, sample.key, owner, asked, applied)
        if asked != applied:
            why += (
                f"; limited to k x{applied.k:.3f}, fixed costs x{applied.fixed:.3f}, start-up"
                f" x{applied.startup:.3f} (asked x{asked.k:.3g}, x{asked.fixed:.3g}, x{asked.startup:.3g}:"
                f" one job {JOB_STEP:.0%}, one user {USER_STEP:.0%}, every user {PARTITION_STEP:.0%} per"
                f" recalibrate; every user's moved k x{everyone.k:.3f} so far); the rest waits for recalibrate"
            )
        moved = applied != Move()
        if moved:
            store.save(partition, tm, f"job {job_id}", owner)  # n, the runs behind the fit, stays the admin's
    return Feedback(partition, job_id, moved, why, current.k, tm.k, ratio)
