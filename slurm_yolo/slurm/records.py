"""``JobRecord``: what the money path knows of one run of a job, parsed strictly from the structured
queries of ``queries`` (one parser per source; both Slurm releases the project supports, 22.05 and
24.11, print these fields alike: tests hold recorded output of each).

A parser refuses a line whose fields do not all have their expected form (a count of fields, digits
where numbers belong) rather than guess: a record it cannot read is no record, never a free run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from slurm_yolo.core import durations
from slurm_yolo.slurm.queries import SACCT_FIELDS, SQUEUE_FIELDS

# States after which a run's record no longer changes; anything else is still going on.
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REQUEUED",
        "REVOKED",
    }
)


class JobRecord(NamedTuple):
    """One run of one job (an array task under its own raw id), as slurmctld or slurmdbd state it."""

    job_id: int
    submit: int  # epoch seconds; a requeued job's next run has its own
    state: str  # the state's first word: CANCELLED, not "CANCELLED by 0"
    partition: str
    account: str
    qos: str
    user: str
    tres: Mapping[str, str]  # allocated TRES: {"gres/gpu": "2", ...}
    time_limit: int | None  # seconds; None: unlimited
    elapsed: int = 0  # seconds the run ran (sacct)
    start: int = 0  # epoch seconds; 0: not started
    cluster: str = ""  # sacct's; squeue's records take the hook's SLURM_CLUSTER_NAME
    restarts: int = 0
    end: int = 0  # epoch seconds (sacct); 0: not known yet

    @property
    def final(self) -> bool:
        """The run's record will not change. slurmdbd that has just come back shows a run it has the
        end state of but not yet the end time (End=Unknown, ElapsedRaw still counting): not final."""
        return self.state in FINAL_STATES and self.end > 0


def _int(text: str) -> int:
    """A plain non-negative integer as Slurm prints one; ValueError for anything else."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise ValueError(f"not a number: {text[:30]!r}")
    return int(text)


def _epoch(text: str) -> int:
    """An epoch time (``SLURM_TIME_FORMAT=%s``); Slurm prints Unknown/None for a run not started."""
    return 0 if text in ("", "Unknown", "None", "N/A", "0") else _int(text)


def _name(text: str, required: bool = True) -> str:
    """A name only an admin creates (partition, account, QOS, user): one printable word. slurmdbd can
    answer with a record it has only in part (the end of a run before its start reached it: no
    partition, QOS "Unknown", no time limit); a missing name marks such a record, which is refused."""
    if not text.isprintable() or " " in text or len(text) > 200 or (required and not text):
        raise ValueError(f"not a name: {text[:30]!r}")
    return text


def tres(text: str) -> dict[str, str]:
    """A TRES list (``billing=1,cpu=1,gres/gpu=2,mem=256M``) as a dict."""
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


# slurmctld gives a job with no time limit (an INFINITE partition) a limit of exactly 365 days when it
# starts: what squeue and sacct print for it from then on. That value is held as the 365 days it may
# run, never as no limit: a job that asked for exactly 365 days is told from no job's (native
# admission gives every GPU job a limit), and holding less than it may run would overdraw.
# squeue prints INVALID for a limit past a year (-t 400-0): only sacct knows it exactly.
PAST_A_YEAR = -1


def duration(text: str) -> int | None:
    """A Slurm duration (``[D-]HH:MM:SS`` and its shorter forms: ``durations.slurm``) as seconds;
    None for UNLIMITED; ValueError for anything else."""
    return durations.slurm(text)


def _squeue_limit(text: str) -> int | None:
    """squeue's TimeLimit: a duration, or ``PAST_A_YEAR`` for the INVALID it prints past a year."""
    return PAST_A_YEAR if text == "INVALID" else duration(text)


def _minutes(text: str) -> int | None:
    """``sacct`` TimelimitRaw: whole minutes, or UNLIMITED / Partition_Limit; empty for a limit set to
    0 (``scontrol update TimeLimit=0``)."""
    if text in ("UNLIMITED", "Partition_Limit", "INFINITE"):
        return None
    return _int(text) * 60 if text else 0


def _fields(line: str, names: tuple[str, ...], trailing: bool) -> dict[str, str]:
    if trailing:
        if not line.endswith("|"):
            raise ValueError("not a complete record")
        line = line[:-1]
    parts = line.split("|")
    if len(parts) != len(names):
        raise ValueError(f"{len(parts)} fields, not {len(names)}")
    return dict(zip(names, (p.strip() for p in parts), strict=True))


def from_squeue(text: str) -> list[JobRecord]:
    """``queries.squeue_argv`` output: the controller's view of each job's current run. Lines that
    are not complete records (an array's pending meta-record ``123_[1-4]``) are skipped."""
    out = []
    for line in text.splitlines():
        try:
            f = _fields(line, SQUEUE_FIELDS, trailing=True)
            out.append(
                JobRecord(
                    job_id=_int(f["JobID"]),
                    submit=_epoch(f["SubmitTime"]),
                    state=f["State"].split(" ")[0],
                    partition=_name(f["Partition"]),
                    account=_name(f["Account"]),
                    qos=_name(f["QOS"], required=False),
                    user=_name(f["UserName"]),
                    tres=tres(f["tres-alloc"]),
                    time_limit=_squeue_limit(f["TimeLimit"]),
                    start=_epoch(f["StartTime"]),
                    restarts=_int(f["RestartCnt"]),
                )
            )
        except ValueError:
            continue
    return out


def from_sacct(text: str) -> list[JobRecord]:
    """``queries.sacct_argv`` output: slurmdbd's record of each run, oldest first per job."""
    out = []
    for line in text.splitlines():
        try:
            f = _fields(line, SACCT_FIELDS, trailing=False)
            out.append(
                JobRecord(
                    job_id=_int(f["JobIDRaw"]),
                    submit=_epoch(f["Submit"]),
                    state=(f["State"].split(" ") or [""])[0],
                    partition=_name(f["Partition"]),
                    account=_name(f["Account"]),
                    qos=_name(f["QOS"], required=False),
                    user=_name(f["User"]),
                    tres=tres(f["AllocTRES"]),
                    time_limit=_minutes(f["TimelimitRaw"]),
                    elapsed=_int(f["ElapsedRaw"] or "0"),
                    start=_epoch(f["Start"]),
                    cluster=_name(f["Cluster"]),
                    end=_epoch(f["End"]),
                )
            )
        except ValueError:
            continue
    return out


def comments_from_sacct(text: str) -> dict[tuple[str, int, int], str]:
    """``sacct -o JobIDRaw,Cluster,Submit,AdminComment`` as {(cluster, job id, submit epoch): comment}.
    The comment is the rest of its line (and of any following lines that do not start a record)."""
    out: dict[tuple[str, int, int], str] = {}
    last: tuple[str, int, int] | None = None
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[2].isdigit() and parts[1]:
            last = (parts[1], int(parts[0]), int(parts[2]))
            out[last] = parts[3]
        elif last is not None:
            out[last] += "\n" + line
    return out
