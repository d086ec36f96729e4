"""Following a job's progress on a terminal: ``slurm-yolo watch`` and ``yolo-sbatch --wait``.

Login-side: it loads the progress reader and nothing of the controller's or the job's, so the
login CLI's ``--wait`` path stays inside the login contract (pyproject.toml's import-linter).
"""

from __future__ import annotations

import sys

import click

from slurm_yolo.cli import load_config
from slurm_yolo.login import progress


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
