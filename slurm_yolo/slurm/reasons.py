"""Why a pending job waits, in words: squeue's Reason (``%r``), as a user can act on it (pure).

docs/users.md lists the same reasons. A reason not here is shown as Slurm names it.
"""

from __future__ import annotations

REASONS = {
    "None": "not looked at by the scheduler yet",
    "Priority": "jobs of higher priority come first (fairshare, QOS tier, age)",
    "Resources": "every GPU it may use is busy: it starts when one frees up",
    "BeginTime": "its begin time has not come (a job waiting for its account's credits waits until then)",
    "Dependency": "the jobs it depends on have not ended as it asked",
    "DependencyNeverSatisfied": "the jobs it depends on can no longer end as it asked: it will never start",
    "JobHeldUser": "held by its user: scontrol release JOBID lets it start",
    "JobHeldAdmin": "held by an admin",
    "AssocGrpGRESRunMinutes": "its account has no tokens left to run GPU jobs (slurm-yolo ledger balance)",
    "AssocGrpGRES": "its account's GPU limit is in use by its other jobs",
    "AssocMaxJobsLimit": "its account runs as many jobs as it may",
    "QOSMaxGRESPerUser": "you run as many GPUs as its QOS allows a user",
    "QOSMaxJobsPerUserLimit": "you run as many jobs as its QOS allows a user",
    "QOSGrpGRES": "its QOS's GPUs are in use by other jobs",
    "QOSMaxWallDurationPerJobLimit": "its time limit is over its QOS's: it will not start (lower --time)",
    "PartitionTimeLimit": "its time limit is over the partition's: it will not start (lower --time)",
    "PartitionConfig": "it asks more than a node of its partition has (CPUs, memory or GPUs): it will not start",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition takes no jobs now",
    "ReqNodeNotAvail": "the nodes it may use are down, drained or reserved",
    "Reservation": "it waits for its reservation",
    "BadConstraints": "no node has what it asks for: it will not start",
    "launch failed requeued held": "its launch failed and Slurm held it: tell your admin",
    "JobLaunchFailure": "its launch failed: tell your admin",
}


def in_words(reason: str) -> str:
    """``Reason: what it means``, or the reason as Slurm names it ('' for none)."""
    reason = reason.strip().strip("()")
    if not reason:
        return ""
    words = REASONS.get(reason)
    return f"{reason}: {words}" if words else reason


def refused_qos(error: str) -> bool:
    """Whether Slurm refused a submission for its QOS: the account's associations lack it, or Slurm
    has no such QOS at all (sbatch says "Invalid qos specification" for both, 22.05 to 26.05)."""
    return "invalid qos specification" in error.lower()


def missing_qos(qos: list[str], account: str, known: list[str] | None, cluster: str = "") -> str:
    """What an admin runs so that ``account`` may use the QOS tiers ``qos`` (``known``: the QOS Slurm
    has, None when it could not be asked): an add for a QOS Slurm lacks, then the grant, on ``cluster``
    alone where it is known (without it, sacctmgr changes the account on every cluster of the slurmdbd)."""
    names = ",".join(qos)
    absent = [q for q in qos if known is not None and q not in known]
    add = "".join(f"sacctmgr -i add qos {q}; " for q in absent)
    what = (
        f"Slurm has no QOS {', '.join(absent)}"
        if absent
        else f"account {account or '(your default)'} may not use QOS {names}"
    )
    return (
        f"{what}: the plan's tier (yolo-sbatch picks it by --priority and the limit); an admin grants it with"
        f" `{add}sacctmgr -i modify account {account or 'ACCOUNT'}{f' where cluster={cluster}' if cluster else ''}"
        f" set QOS+={names}`"
        " (or give --priority another tier)"
    )
