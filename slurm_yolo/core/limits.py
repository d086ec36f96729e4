"""A job's time limit near its end: the USR2 warning, and the limit a run requeued for time comes back
with (pure, import-light: the login path renders the warning, the settler gives the next limit).

The launcher checkpoints at its USR2 (``--signal=B:USR2@LEAD``) and requeues the job. With the same
limit, a job planned too short loops: one run per limit, each losing its start-up and the lead (a
hostile review's 150-epoch job took 6 runs). So the requeued job gets the limit its own progress asks
for: its start-up, the epochs left at the seconds per epoch it measured, the buffer, and the lead.
Whether a run was requeued for time is read from slurmctld's facts (it ended within the lead of its
limit); the progress is the job's own summary (its Comment), so it can move nothing but this job's
limit, which its user could have set herself (``-t``), and the charge is still the elapsed time.
"""

from __future__ import annotations

import math

SIGNAL_MIN_LIMIT = 180  # Slurm checks signal times about once a minute: shorter jobs get no warning
SIGNAL_MIN_LEAD = 60  # the warning's lead: at least Slurm's check interval, at most half the limit
SIGNAL_EARLY = 60  # sbatch(1): "the signal may be sent up to 60 seconds earlier than specified"


def time_limit(predicted_seconds: float, buffer: float) -> int:
    """ceil(T x (1 + buffer)) in whole minutes, as seconds (Slurm's granularity)."""
    return max(60, math.ceil(predicted_seconds * (1 + buffer) / 60) * 60)


def usr2_lead(limit_seconds: int, configured: int) -> int:
    """How long before the limit the USR2 comes: the configured lead, but at most half the limit (0: no
    warning under ``SIGNAL_MIN_LIMIT``, where it could eat the run, nor where ``job.signal_seconds`` is
    0: a site whose ``OverTimeLimit`` lets a run go on past its limit wants no checkpoint before it)."""
    if limit_seconds < SIGNAL_MIN_LIMIT or configured <= 0:
        return 0
    return max(SIGNAL_MIN_LEAD, min(configured, limit_seconds // 2))


def requeued_for_time(limit_seconds: int | None, elapsed: int, configured: int) -> bool:
    """Whether a requeued run ended inside its USR2 lead, or up to ``SIGNAL_EARLY`` before it
    (slurmctld's facts; Slurm sends it that early, as measured here: 70 s into a 3-minute job with a
    90 s lead): a requeue for time, not a preemption, the watchdog's or an admin's, which come at any
    time."""
    if not limit_seconds:
        return False
    lead = usr2_lead(limit_seconds, configured)
    return lead > 0 and elapsed >= limit_seconds - lead - SIGNAL_EARLY


MAX_LIMIT_SECONDS = 365 * 86400  # past this Slurm prints the limit as INVALID, and no hold covers a run that long


def next_limit(
    limit_seconds: int,
    elapsed: int,
    train_seconds: float,
    epochs_done: int,
    epochs: int,
    configured: int,
    buffer: float,
) -> int:
    """The limit (whole minutes, in seconds) that lets a run requeued for time finish: its start-up
    (what the run spent outside training, the time to its checkpoint and requeue included), the epochs
    left at its seconds per epoch (one more for the final validation), the buffer, and the lead of its
    next USR2 (which may come ``SIGNAL_EARLY`` before it); never below its present limit, and never
    beyond a year (``MAX_LIMIT_SECONDS``: the summary's epochs are the user's to write)."""
    if epochs_done <= 0 or train_seconds <= 0 or not math.isfinite(train_seconds):
        return limit_seconds
    per_epoch = train_seconds / epochs_done
    startup = max(0.0, elapsed - min(train_seconds, float(elapsed)))
    need = min((startup + (max(0, epochs - epochs_done) + 1) * per_epoch) * (1 + buffer), float(MAX_LIMIT_SECONDS))
    seconds = max(limit_seconds, math.ceil(need / 60) * 60)
    while seconds - usr2_lead(seconds, configured) - SIGNAL_EARLY < need:  # its USR2 must come after it has finished
        seconds += 60
    return max(limit_seconds, min(seconds, MAX_LIMIT_SECONDS))
