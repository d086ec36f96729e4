"""Console entry points of the slurmctld hooks, kept tiny on purpose.

Each hook needs one Slurm query (the prolog ``scontrol show job``, the epilog ``sacct``) that takes
about as long as importing the rest of slurm-yolo. Starting the query first and importing while it
runs takes that time off every job start and end.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

DEFAULT_BIN = "/usr/bin"
# Every recorded run of a job (``parsers.run_records``): the epilog's and reconcile's sacct query,
# here so that this module need not import the parsers (the login node imports it too).
SACCT_RUNS = ["-X", "-D", "-n", "-P", "-o", "JobIDRaw,Submit,State,ElapsedRaw"]


def _query(argv: list[str]) -> subprocess.Popen[str] | None:
    import subprocess

    if not os.environ.get("SLURM_JOB_ID", "").isdigit() or not os.path.exists(argv[0]):
        return None
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def prolog_main() -> None:
    """PrologSlurmctld."""
    query = _query([f"{DEFAULT_BIN}/scontrol", "show", "job", "-o", os.environ.get("SLURM_JOB_ID", "")])
    from .hooks import main

    raise SystemExit(main("prolog", query))


def epilog_main() -> None:
    """EpilogSlurmctld."""
    job = os.environ.get("SLURM_JOB_ID", "")
    query = _query([f"{DEFAULT_BIN}/sacct", "-j", job, *SACCT_RUNS])
    from .hooks import main

    raise SystemExit(main("epilog", query))
