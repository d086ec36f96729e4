"""A user's recent jobs, a line each, as reportseff lists them: state, partition, GPUs, the predicted
run time against the one Slurm measured, the limit and the charge (``slurm-yolo jobs``).

The rows are the job views' (``jobview.summary``) of sacct's runs joined with the ledger
(``report.jobs``); who sees whose is Slurm's rule for jobs (``jobview.may_see``): her own, an
account's coordinator its jobs, an admin all, anyone all where PrivateData hides no jobs.
"""

from __future__ import annotations

from typing import Any

from slurm_yolo.admin import jobview, report
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.slurm import visibility


def may_list(v: visibility.Viewer, user: str) -> bool:
    """Whether ``v`` may ask for ``user``'s jobs at all (her coordinators see those of their accounts)."""
    return (
        user == v.user
        or visibility.is_admin(v)
        or bool(v.coordinated)
        or not (v.private_data & visibility.JOBS_PRIVATE)
    )


def recent(
    config: Config, v: visibility.Viewer, user: str | None = None, since: str = "now-7days"
) -> list[dict[str, Any]]:
    """``user``'s jobs (default: the viewer's) with a run in the window from ``since``, oldest first,
    those ``v`` may see: one row each (``row``)."""
    who = user or v.user
    if not may_list(v, who):
        raise UsageError(
            f"{who}'s jobs are not ones you may see ({v.user}: Slurm's PrivateData hides other users' jobs)"
        )
    runs = report.jobs(config, report.Filters(since=since, user=who))
    out = []
    for _, mine in runs.groupby("job_id", sort=False):
        mine = mine.sort_values("submit", kind="stable")
        last = mine.iloc[-1]
        if str(last["User"]) == who and jobview.may_see(v, who, str(last["Account"])):
            out.append(row(jobview.summary(mine, None, config), str(mine.iloc[0]["Submit"])))
    return sorted(out, key=lambda r: (r["submit"], r["job_id"]))


def row(s: dict[str, Any], submit: str) -> dict[str, Any]:
    """A job's line of figures: its last run's state and limit, all its runs' time and charge (None
    while the ledger has settled none of them, or bills it nothing)."""
    billed = [r["charge"] for r in s["runs"] if r["charge"] is not None]
    return {
        "job_id": s["job_id"],
        "user": s["user"],
        "account": s["account"],
        "submit": submit,
        "state": s["state"],
        "partition": s["partition"],
        "gpus": s["gpus"],
        "runs": len(s["runs"]),
        "predicted_s": s["predicted_s"],
        "elapsed_s": s["elapsed_s"],
        "limit_s": s["runs"][-1]["limit_s"],
        "charge": sum(billed) if billed else None,
        "gpu_hours": s["gpu_hours"],
    }
