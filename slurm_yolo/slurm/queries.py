"""The money path's Slurm queries: argv lists whose output user text cannot forge.

Every field asked for here is set by slurmctld or slurmdbd (ids, numbers, states, and names only an
admin creates: partitions, accounts, QOS, users); none is text a user writes (comment, job name,
work dir, output paths), so splitting a line on the delimiter can never meet a forged field, and a
record whose fields do not all parse is refused whole. Times come as epoch seconds
(``SLURM_TIME_FORMAT=%s``), never as text one environment formats differently from another.

Kept apart from ``records`` (the parsers) so that the hook entry points can start a query before
importing anything else.
"""

from __future__ import annotations

import time

TIME_FORMAT = "%s"  # strftime: epoch seconds, in Slurm 22.05 and 24.11 alike

# The controller's record of a job's current run (PrologSlurmctld): ``squeue -O``, ``|`` after each.
SQUEUE_FIELDS = (
    "JobID",
    "tres-alloc",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "Partition",
    "Account",
    "QOS",
    "UserName",
    "RestartCnt",
    "State",
)
# slurmdbd's record of every run of a job (``sacct -D``): the epilog, reconcile and the audit.
SACCT_FIELDS = (
    "JobIDRaw",
    "Cluster",
    "Submit",
    "Start",
    "End",
    "State",
    "ElapsedRaw",
    "TimelimitRaw",
    "Partition",
    "Account",
    "QOS",
    "User",
    "AllocTRES",
)


def job_list(job_ids: list[int]) -> str:
    """``-j`` for several jobs (each checked to be an integer: nothing else reaches the command)."""
    return ",".join(str(int(j)) for j in job_ids)


def squeue_argv(job_ids: list[int]) -> list[str]:
    return ["squeue", "-h", "--states=all", "-j", job_list(job_ids), "-O", ",".join(f"{f}:|" for f in SQUEUE_FIELDS)]


def sacct_argv(job_ids: list[int] | None = None, since: int | None = None, until: int | None = None) -> list[str]:
    """Every run (``-D``) of the given jobs, or of every job of every user active between ``since``
    and ``until`` (None: now)."""
    start, end = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t or 0)) for t in (since, until))  # local time
    select = ["-j", job_list(job_ids)] if job_ids else ["-a", "-S", start, "-E", "now" if until is None else end]
    return ["sacct", "-X", "-D", "-n", "-P", *select, "-o", ",".join(SACCT_FIELDS)]


# The AdminComment of every run (``ledger audit``): written only by admins, slurmctld and slurm-yolo,
# and last on the line, so that nothing in it can shift the fields before it.
COMMENT_FIELDS = ("JobIDRaw", "Cluster", "Submit", "AdminComment")


def comments_argv(job_ids: list[int] | None = None, since: int | None = None, until: int | None = None) -> list[str]:
    argv = sacct_argv(job_ids, since, until)
    return [*argv[:-1], ",".join(COMMENT_FIELDS)]
