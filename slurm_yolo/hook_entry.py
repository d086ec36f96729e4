"""Console entry points of the slurmctld hooks, kept tiny on purpose.

Each hook needs one Slurm query (the prolog ``scontrol show job``, the epilog ``sacct``) that takes
about as long as importing the rest of slurm-yolo. Starting the query first and importing while it
runs takes that time off every job start and end.
"""

import os
import subprocess

DEFAULT_BIN = "/usr/bin"
# Every recorded run of a job (``parsers.run_records``): the epilog's and reconcile's sacct query.
SACCT_RUNS = ["-X", "-D", "-n", "-P", "-o", "JobIDRaw,Submit,State,ElapsedRaw"]


def _query(argv: list[str]) -> subprocess.Popen[str] | None:
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
