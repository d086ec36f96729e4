"""Following a job: progress from its usage records (pure), and the polling loop around it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.parse import ParseResult, joblog
from slurm_yolo.parse.joblog import expand_pattern as expand_pattern  # the login side's name for it
from slurm_yolo.parse.records import USAGE_NAME, parse_records
from slurm_yolo.slurm import commands, reasons
from slurm_yolo.slurm.records import FINAL_STATES
from slurm_yolo.slurm.visibility import current_user


@dataclass(frozen=True)
class Progress:
    """Where a training job stands."""

    epoch: int
    epochs: int | None
    pixels_done: float
    pixels_total: float | None
    mpx_per_s: float | None
    eta_seconds: float | None


def progress(records: ParseResult) -> Progress:
    """Epochs and training pixels done (of ``Workload.train_pixels``: no validation, no model
    factor), throughput, and the time left at the recent rate. A resumed run's records start past
    its earlier epochs (epoch 25 of 40): its pixels are those of the epochs it trains."""
    done = [e for e in records.per_epoch if e.seconds]
    pixels = sum((e.mpx_per_s or 0) * (e.seconds or 0) * 1e6 for e in done)
    per_epoch = pixels / len(done) if done else None
    before = min((e.epoch for e in records.per_epoch), default=1) - 1  # trained by the job it resumes
    left = records.epochs_total - before if records.epochs_total else None
    total = per_epoch * left if per_epoch and left and left > 0 else None
    recent = done[-3:]
    rate = (
        (sum((e.mpx_per_s or 0) * (e.seconds or 0) for e in recent) / sum(e.seconds or 0 for e in recent))
        if recent
        else None
    )
    eta = (total - pixels) / (rate * 1e6) if total is not None and rate else None
    return Progress(records.epochs_completed, records.epochs_total, pixels, total, rate, eta)


def render(state: str, p: Progress | None, width: int = 24, starts: float | None = None, reason: str = "") -> str:
    """One status line: state, bar, epoch, training pixels done/total, Mpx/s, ETA; for a pending job,
    why it waits (``reasons``) and when Slurm expects it to start, never a running job's ETA (a job
    requeued with epochs done waits like any other).

    The pixels are those trained (train images x imgsz^2 per epoch, as the usage records count
    them): fewer than the submit line's work, which adds the validation passes and scales by
    the model's FLOPs. The line says "trained" so the two are never read as one number."""
    if state == "PENDING":
        parts = [f"waits ({reasons.in_words(reason)})" if reason.strip() else ""]
        if starts is not None:  # e.g. the begin time of a job that waits for credits
            parts.append(f"expected to start {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(starts))}")
        if p is not None and p.epoch:
            parts.append(f"{p.epoch}/{p.epochs or '?'} epochs done before")
        shown = "; ".join(x for x in parts if x)
        return f"PENDING: {shown}" if shown else "PENDING: waiting for the first epoch"
    if p is None or not p.epoch:
        return state if state in FINAL_STATES else f"{state}: waiting for the first epoch"
    share = min(1.0, p.pixels_done / p.pixels_total) if p.pixels_total else 0.0
    bar = "█" * round(share * width) + "░" * (width - round(share * width))
    total = f"/{p.pixels_total / 1e6:.1f}" if p.pixels_total else ""
    eta = f" ETA {int(p.eta_seconds // 60)}:{int(p.eta_seconds % 60):02d}" if p.eta_seconds is not None else ""
    rate = f" {p.mpx_per_s:.2f} Mpx/s" if p.mpx_per_s else ""
    return f"{state} {bar} epoch {p.epoch}/{p.epochs or '?'} {p.pixels_done / 1e6:.1f}{total} Mpx trained{rate}{eta}"


def usage_file(job_id: int, bin_dir: Path | None = None) -> Path | None:
    """Where the job writes its usage records (its working directory), while Slurm still knows it."""
    try:
        work = commands.show_job(job_id, bin_dir=bin_dir).get("WorkDir")
    except Exception:  # noqa: BLE001 - the job left the controller: nothing more to follow
        return None
    return Path(work) / USAGE_NAME.format(job=job_id) if work else None


def watch(
    job_id: int,
    emit: Callable[[str], None],
    poll: float = 2.0,
    bin_dir: Path | None = None,
    timeout: float | None = None,
) -> str:
    """Emit a status line whenever it changes, until the job ends (``commands.states``: an error
    after ``timeout`` seconds, or for a job Slurm does not know); its final state."""
    path = usage_file(job_id, bin_dir)
    last = state = ""
    for state in commands.states(job_id, poll, timeout, bin_dir):
        if state == "UNKNOWN":
            continue  # not yet (or no longer) known to Slurm: a state to print, or an error, comes next
        p = progress(parse_records(path)) if path and path.exists() else None
        waiting = commands.Pending("", None)
        if state == "PENDING":
            with contextlib.suppress(SlurmYoloError):  # only what the line shows: the state is known
                waiting = commands.pending(job_id, bin_dir)
        line = render(state, p, starts=waiting.starts, reason=waiting.reason)
        if line != last:
            emit(line)
            last = line
    return state


def ended(config: Config, job_id: int, state: str, log: Path, partition: str) -> joblog.Ending:
    """Why the user's own job, just ended in ``state``, did not complete (its log ``log``, read as
    she reads it), and the command that resumes it (``joblog.ending``), from the controller's record
    of it while it still has one (its exit code, work dir and account)."""
    try:
        facts = commands.show_job(job_id, bin_dir=config.bin_dir)
    except SlurmYoloError:
        facts = {}
    work = facts.get("WorkDir")
    return joblog.ending(
        current_user(),
        state,
        facts.get("ExitCode", ""),
        log,
        Path(work) / USAGE_NAME.format(job=job_id) if work else None,
        (facts.get("Partition") or partition, facts.get("Account", "")),
        config.job.signal_seconds,
        config.estimate.buffer,
    )
