"""Console entry points of the slurmctld hooks, kept tiny on purpose.

Each hook needs one Slurm query (the prolog ``squeue``, the epilog ``sacct``: ``slurm.queries``)
that takes about as long as importing the rest of slurm-yolo. Starting the query first and
importing while it runs takes that time off every job start and end.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

DEFAULT_BIN = "/usr/bin"


def _query(event: str) -> subprocess.Popen[str] | None:
    """The hook's Slurm query, started now (hooks._collect uses it only if it ran the configured
    Slurm; otherwise the hook asks again)."""
    import subprocess

    from slurm_yolo.slurm import queries

    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        return None
    argv = queries.squeue_argv([int(job)]) if event == "prolog" else queries.sacct_argv([int(job)])
    argv[0] = f"{DEFAULT_BIN}/{argv[0]}"
    if not os.path.exists(argv[0]):
        return None
    env = {**os.environ, "SLURM_TIME_FORMAT": queries.TIME_FORMAT}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _main(event: str) -> None:
    query = _query(event)
    from slurm_yolo.controller.hooks import main
    from slurm_yolo.core import logs

    logs.setup()
    main(event, query)
    raise SystemExit(0)  # always: a failed PrologSlurmctld makes Slurm requeue the job forever


def prolog_main() -> None:
    """PrologSlurmctld."""
    _main("prolog")


def epilog_main() -> None:
    """EpilogSlurmctld."""
    _main("epilog")
