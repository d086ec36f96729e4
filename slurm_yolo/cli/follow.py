"""Following a job's progress on a terminal: ``slurm-yolo watch`` and ``yolo-sbatch --wait``.

Login-side: it loads the progress reader and nothing of the controller's or the job's, so the
login CLI's ``--wait`` path stays inside the login contract (pyproject.toml's import-linter).
"""

from __future__ import annotations

import sys

import click

from slurm_yolo.cli import load_config
from slurm_yolo.login import progress
from slurm_yolo.parse import joblog


def follow(job_id: int, interval: float = 2.0, timeout: float | None = None) -> str:
    """Print progress lines (redrawn in place on a terminal); the final state."""
    tty = sys.stdout.isatty()

    def emit(line: str) -> None:
        click.echo(f"\r\x1b[K{line}" if tty else line, nl=not tty)

    try:
        return progress.watch(job_id, emit, poll=interval, bin_dir=load_config().bin_dir, timeout=timeout)
    finally:
        if tty:
            click.echo()


def ending_lines(job_id: int, state: str, end: joblog.Ending) -> list[str]:
    """What a job that did not complete says after its state: why (its log's failing line, else
    Slurm's reason) and how it goes on (the command that resumes it, as it runs when pasted)."""
    lines = [f"job {job_id} {state}: {end.why}"] if end.why else []
    if end.resume and end.saved is not None:
        lines.append(
            f"job {job_id} saved epoch {end.saved.epoch} of {end.saved.epochs}; to train the rest: {end.resume}"
        )
    elif joblog.all_trained(end.saved):
        lines.append(f"job {job_id}: {joblog.all_trained(end.saved)}")
    elif state == "TIMEOUT" and end.trained:
        lines.append(f"job {job_id} saved no epoch before its limit: run it again with a longer one (-t)")
    return lines
