"""Zombie jobs: running, but their training has shown no progress for too long.

Such a job holds GPUs and produces nothing (a hung dataloader, a deadlocked DDP rank). The
watchdog requeues or cancels it, by policy, so its GPUs return to the pool; the epilog then
settles it by the ledger's usual cause rules.

It judges by what slurmctld shows, never by the users' files (a controller may mount none of them):
the summary the job's launcher keeps in its Comment (``beacon``) says when its usage records or its
output last moved. A job with no such summary (not run by ``slurm-yolo run``) is not judged. The
time is the job's own claim, as a file's mtime was: a user can keep her own job from being judged a
zombie, not make another's one.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import commands, parsers
from slurm_yolo.state.eventlog import log_event


@dataclass(frozen=True)
class Zombie:
    """A job the watchdog acted on (or would, with --dry-run)."""

    job_id: int  # its own id (SLURM_JOB_ID inside it: its usage file's name)
    target: str  # what names it alone to scontrol and scancel (``1234_5`` for an array task)
    silent_seconds: float
    evidence: list[str]
    action: str
    error: str = ""  # what Slurm said when the action failed (the next zombie is acted on all the same)


def find_zombies(config: Config, stall_seconds: float, now: float | None = None) -> list[Zombie]:
    """Running jobs whose launcher last showed progress more than ``stall_seconds`` ago (in this
    run of the job: at most its time used)."""
    now = now or time.time()
    zombies = []
    for row in commands.running_jobs(bin_dir=config.bin_dir):
        used = parsers.duration(row["TimeUsed"]) or 0
        if not row["JobID"].isdigit() or used < stall_seconds:
            continue  # too young to be silent that long
        summary = beacon.decode(beacon.summary_text(row["Comment"]))
        if summary is None:
            continue  # nothing to judge by: not a job we can watch
        silent = min(now - min(summary.at, now), used)
        if silent > stall_seconds:
            job_id = int(row["JobID"])
            array = (row["ArrayJobID"], row["ArrayTaskID"]) if row["ArrayTaskID"].isdigit() else ()
            target = commands.job_target(job_id, *array)
            seen = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(summary.at))
            zombies.append(
                Zombie(job_id, target, silent, [f"last progress {seen} (its Comment)"], config.watchdog.action)
            )
    return zombies


def act(config: Config, zombies: list[Zombie], dry_run: bool = False) -> list[Zombie]:
    """Requeue or cancel each zombie; log what was done and why. A job Slurm will not requeue (its
    user asked ``--no-requeue``, or it is no batch job) is cancelled instead; a job Slurm refuses
    both keeps its error and the others are acted on all the same (one job must not shield the rest)."""
    bin_dir = config.bin_dir
    done = []
    for z in zombies:
        reason = f"slurm-yolo watchdog: no progress for {z.silent_seconds / 60:.0f} min ({', '.join(z.evidence)})"
        if not dry_run:
            try:
                if z.action == "requeue":
                    try:
                        commands.requeue(z.target, bin_dir=bin_dir)
                    except SlurmError as e:
                        z = replace(z, action="cancel", error=f"requeue refused: {e}")
                if z.action == "cancel":
                    commands.cancel(z.target, bin_dir=bin_dir)
            except SlurmError as e:
                z = replace(z, action="none", error=f"{z.error}; {e}" if z.error else str(e))
            log_event(config, {"reason": reason, "pid": os.getpid(), **asdict(z)}, name="watchdog.log")
        done.append(z)
    return done
