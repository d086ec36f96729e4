"""Zombie jobs: running, but their usage records and stdout have not moved for too long.

Such a job holds GPUs and produces nothing (a hung dataloader, a deadlocked DDP rank). The
watchdog requeues or cancels it, by policy, so its GPUs return to the pool; the epilog then
settles it by the ledger's usual cause rules.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import Config
from .eventlog import log_event
from .parse.records import USAGE_NAME
from .progress import expand_pattern
from .slurm import commands, parsers


@dataclass(frozen=True)
class Zombie:
    """A job the watchdog acted on (or would, with --dry-run)."""

    job_id: int  # its own id (SLURM_JOB_ID inside it: its usage file's name)
    target: str  # what names it alone to scontrol and scancel (``1234_5`` for an array task)
    silent_seconds: float
    evidence: list[str]
    action: str


def _last_progress(paths: list[Path]) -> tuple[float | None, list[str]]:
    times, seen = [], []
    for p in paths:
        try:
            times.append(p.stat().st_mtime)
            seen.append(str(p))
        except OSError:
            continue
    return (max(times) if times else None), seen


def find_zombies(config: Config, stall_seconds: float, now: float | None = None) -> list[Zombie]:
    """Running jobs whose usage records and stdout are all older than ``stall_seconds``."""
    now = now or time.time()
    zombies = []
    for row in commands.running_jobs(bin_dir=Path(config["slurm"]["bin_dir"])):
        used = parsers.duration(row["TimeUsed"]) or 0
        if not row["JobID"].isdigit() or used < stall_seconds:
            continue  # too young to be silent that long
        job_id = int(row["JobID"])
        array = (row["ArrayJobID"], row["ArrayTaskID"]) if row["ArrayTaskID"].isdigit() else ()
        stdout = expand_pattern(row["STDOUT"], job_id, row["Name"], row["UserName"], *array)
        paths = [Path(row["WorkDir"]) / USAGE_NAME.format(job=job_id), Path(stdout)]
        last, seen = _last_progress(paths)
        if last is None:
            continue  # nothing to judge by: not a job we can watch
        if now - last > stall_seconds:
            target = commands.job_target(job_id, *array)
            zombies.append(Zombie(job_id, target, now - last, seen, config["watchdog"]["action"]))
    return zombies


def act(config: Config, zombies: list[Zombie], dry_run: bool = False) -> list[Zombie]:
    """Requeue or cancel each zombie; log what was done and why."""
    bin_dir = Path(config["slurm"]["bin_dir"])
    for z in zombies:
        reason = f"slurm-yolo watchdog: no progress for {z.silent_seconds / 60:.0f} min ({', '.join(z.evidence)})"
        if not dry_run:
            if z.action == "requeue":
                commands.requeue(z.target, bin_dir=bin_dir)
            else:
                commands.cancel(z.target, bin_dir=bin_dir)
            log_event(config, {"reason": reason, "pid": os.getpid(), **asdict(z)}, name="watchdog.log")
    return zombies
