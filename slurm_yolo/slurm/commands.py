"""The Slurm commands slurm-yolo uses, as typed functions over ``run``."""

from __future__ import annotations

import functools
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.errors import SlurmError, UnreachableError, UsageError
from slurm_yolo.slurm import parsers, queries, run
from slurm_yolo.slurm.records import FINAL_STATES, JobRecord, comments_from_sacct, from_sacct, from_squeue


def submit(script: str, args: list[str], bin_dir: Path | None = None, timeout: float = 30.0) -> int:
    """Submit a job script on stdin with extra sbatch arguments (never through a shell); its job id."""
    return submit_told(script, args, bin_dir, timeout)[0]


def submit_told(
    script: str, args: list[str], bin_dir: Path | None = None, timeout: float = 30.0
) -> tuple[int, list[str]]:
    """``submit``, and what slurmctld's admission script told the submitter of an accepted job (sbatch
    prints it on stderr: that it waits for credits, and until when)."""
    res = run(["sbatch", "--parsable", *args], input=script, bin_dir=bin_dir, timeout=timeout)
    told = [line.strip().removeprefix("sbatch: ") for line in res.stderr.splitlines() if "slurm-yolo: " in line]
    return parsers.sbatch_job_id(res.stdout), told


class Pending(NamedTuple):
    """Why a pending job waits (squeue's Reason, '' when it gives none) and when slurmctld expects it
    to start (epoch seconds; None when it does not say)."""

    reason: str
    starts: float | None


def pending(job_id: int, bin_dir: Path | None = None) -> Pending:
    """The pending job's reason and expected start, in one squeue (the reason last: it may hold spaces)."""
    res = run(["squeue", "-h", "-j", str(int(job_id)), "-o", "%A %S %r"], bin_dir=bin_dir, time_format="%s")
    for line in res.stdout.splitlines():
        words = line.split(" ", 2)
        if words[:1] == [str(int(job_id))] and len(words) >= 2:
            starts = float(words[1]) if words[1].isdigit() else None
            return Pending(words[2].strip() if len(words) == 3 else "", starts)
    return Pending("", None)


def show_job(job_id: int, bin_dir: Path | None = None) -> dict[str, str]:
    """``scontrol show job -o ID`` as a dict."""
    res = run(["scontrol", "show", "job", "-o", str(int(job_id))], bin_dir=bin_dir)
    return parsers.scontrol_record(res.stdout.splitlines()[0] if res.stdout.strip() else "")


def current_runs(job_ids: list[int], bin_dir: Path | None = None) -> dict[int, JobRecord]:
    """The controller's record of each job's current run (``squeue -O``, fields user text cannot
    forge); jobs the controller no longer knows are missing. One call for many jobs: 22.05 has no
    RPC for a list of jobs, so squeue then loads every job the controller holds (~27 ms for 800)."""
    res = run(queries.squeue_argv(job_ids), bin_dir=bin_dir, time_format=queries.TIME_FORMAT, check=False)
    if res.returncode != 0:
        if "Invalid job id" in res.stderr:  # squeue's answer when the one job asked is gone; for a list: none
            return {}
        raise SlurmError(f"squeue failed: {(res.stderr.strip() or f'exit code {res.returncode}').splitlines()[-1]}")
    return {r.job_id: r for r in from_squeue(res.stdout)}


def queued_jobs(bin_dir: Path | None = None) -> list[JobRecord]:
    """Every pending and running job on this cluster (every user's: asked as the SlurmUser), one
    record per array task (``-r``), in the fields of ``current_runs`` (none a user writes; a pending
    job's GPUs are those it asked for): what admission counts against each account's balance.
    SlurmError when squeue does not answer or prints a line that is no record (a job left out would
    be a commitment forgotten)."""
    fields = ",".join(f"{f}:|" for f in queries.SQUEUE_FIELDS)
    res = run(
        ["squeue", "-h", "-r", "-t", "PENDING,RUNNING", "-O", fields], bin_dir=bin_dir, time_format=queries.TIME_FORMAT
    )
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    found = from_squeue("\n".join(lines))
    if len(found) != len(lines):
        raise SlurmError(f"squeue: {len(lines) - len(found)} pending or running jobs printed no complete record")
    return found


def job_runs(job_ids: list[int], bin_dir: Path | None = None) -> dict[int, list[JobRecord]]:
    """slurmdbd's record of every run of the given jobs, oldest first (a requeued job has several)."""
    res = run(queries.sacct_argv(job_ids), bin_dir=bin_dir, time_format=queries.TIME_FORMAT)
    found: dict[int, list[JobRecord]] = {j: [] for j in job_ids}
    for r in from_sacct(res.stdout):
        found.setdefault(r.job_id, []).append(r)
    return found


DAY = 86400.0


def days(since: float, until: float) -> list[tuple[float, float]]:
    """``[since, until]`` cut into windows of a day at most, oldest first: the sweeps (reconcile,
    audit) ask sacct for one at a time, so one slow day neither times out the rest nor holds a
    week of every user's jobs in memory."""
    out, start = [], since
    while start < until:
        out.append((start, min(start + DAY, until)))
        start += DAY
    return out


def runs_since(
    since: float, bin_dir: Path | None = None, timeout: float = 60.0, until: float | None = None
) -> list[JobRecord]:
    """Every run of every user's jobs that was active between ``since`` and ``until`` (None: now)."""
    argv = queries.sacct_argv(since=int(since), until=None if until is None else int(until) + 1)
    res = run(argv, bin_dir=bin_dir, time_format=queries.TIME_FORMAT, timeout=timeout)
    return from_sacct(res.stdout)


def admin_comments(
    job_ids: list[int] | None = None,
    since: float | None = None,
    bin_dir: Path | None = None,
    timeout: float = 60.0,
    until: float | None = None,
) -> dict[tuple[str, int, int], str]:
    """The AdminComment of every run of the given jobs, or of every job active between ``since`` and
    ``until`` (None: now), by (cluster, job id, submit epoch)."""
    argv = queries.comments_argv(
        job_ids, None if since is None else int(since), None if until is None else int(until) + 1
    )
    res = run(argv, bin_dir=bin_dir, time_format=queries.TIME_FORMAT, timeout=timeout)
    return comments_from_sacct(res.stdout)


_OWN_ID = re.compile(r"[0-9]{1,18}([_+][0-9]{1,18})?")


def comment_targets(job_ids: list[int], bin_dir: Path | None = None) -> dict[int, str]:
    """How sacctmgr names each job's own record: an array's own id (the task that keeps the array's
    record) as ``ARRAY_TASK`` and a hetjob's leader as ``LEADER+0``, since ``jobid=ID`` there modifies
    every task or component (seen on 22.05 and 24.11); any other job by its raw id. From sacct's
    JobID, which slurmdbd writes; jobs sacct does not show are left out."""
    if not job_ids:
        return {}
    rows = sacct_rows(["-j", queries.job_list(job_ids)], ["JobIDRaw", "JobID"], bin_dir=bin_dir)
    wanted = set(job_ids)
    return {int(raw): own for raw, own in rows if raw.isdigit() and int(raw) in wanted and _OWN_ID.fullmatch(own)}


def set_admin_comment(job_id: int, target: str, cluster: str, text: str, bin_dir: Path | None = None) -> None:
    """Write a finished job's AdminComment in slurmdbd (its newest run's record) through its own name
    (``comment_targets``); raises unless sacctmgr says it modified that job, and that job alone
    (slurmdbd down, the job not recorded yet, or a name that reaches other tasks)."""
    if not _OWN_ID.fullmatch(target):
        raise SlurmError(f"job {job_id}: {target!r} is not a job id sacctmgr can take")
    res = run(
        [
            "sacctmgr",
            "-i",
            "modify",
            "job",
            "where",
            f"jobid={target}",
            f"cluster={cluster}",
            "set",
            f"AdminComment={text}",
        ],
        bin_dir=bin_dir,
    )
    modified = [line.split()[0] for line in res.stdout.splitlines() if line.split()[1:2] == ["submitted"]]
    if set(modified) != {str(int(job_id))}:
        raise SlurmError(
            f"sacctmgr modified {modified or 'no job'} for job {job_id} on {cluster}: "
            f"{res.stdout.strip() or res.stderr.strip()}"
        )


_COMMENT_TEXT = re.compile(r"[A-Za-z0-9_:=,;.+-]{1,2000}")  # what the ledger writes (``ledger.comment``)


class AdminComment(NamedTuple):
    """One finished job's AdminComment to write: its own name (``comment_targets``) and cluster."""

    job_id: int
    target: str
    cluster: str
    text: str


def set_admin_comments(comments: Sequence[AdminComment], bin_dir: Path | None = None) -> list[str]:
    """Write many finished jobs' AdminComments with one sacctmgr, which reads its commands from stdin,
    one per line: one process and one slurmdbd connection for the whole batch instead of one apiece.
    Each comment's outcome, in order: "" when sacctmgr's output names its job exactly once and no job
    outside the batch, else why not (``set_admin_comment`` then tries it alone and checks it exactly).
    A comment that could change the command line (not a job's own name, a cluster that is not a plain
    name, text the ledger does not write: a space, a quote, a newline) is refused before anything is sent."""
    safe = [
        bool(_OWN_ID.fullmatch(c.target) and PLAIN_NAME.fullmatch(c.cluster) and _COMMENT_TEXT.fullmatch(c.text))
        for c in comments
    ]
    lines = [
        f"modify job where jobid={c.target} cluster={c.cluster} set AdminComment={c.text}\n"
        for c, ok in zip(comments, safe, strict=True)
        if ok
    ]
    named: Counter[str] = Counter()
    if lines:
        # sacctmgr exits 1 when any line modified nothing (a job slurmdbd has no record of yet): each
        # comment's outcome is in what it printed
        res = run(
            ["sacctmgr", "-i"], input="".join(lines), bin_dir=bin_dir, timeout=30.0 + 0.2 * len(lines), check=False
        )
        named.update(line.split()[0] for line in res.stdout.splitlines() if line.split()[1:2] == ["submitted"])
    stray = sorted(set(named) - {str(c.job_id) for c, ok in zip(comments, safe, strict=True) if ok})
    out = []
    for c, ok in zip(comments, safe, strict=True):
        count = named[str(c.job_id)]
        if not ok:
            out.append(f"job {c.job_id}: not a comment sacctmgr can take on one line")
        elif count != 1 or stray:
            out.append(f"sacctmgr named job {c.job_id} {count} time(s)" + (f", and {stray[:5]} too" if stray else ""))
        else:
            out.append("")
    return out


SACCT_FIELDS = [
    "JobIDRaw",
    "JobName",
    "Account",
    "User",
    "Partition",
    "QOS",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "AllocTRES",
    "Comment",
    "AdminComment",
]


def sacct_rows(
    select: list[str], fields: Sequence[str], bin_dir: Path | None = None, timeout: float = 30.0
) -> list[list[str]]:
    """Allocation rows (``-X``) of every run (``-D``) of the jobs ``select`` picks (``-j``, ``-S``...),
    user text included (job names, comments, work dirs, any character). sacct separates the fields
    with a delimiter drawn at random for this call: no text written before can hold it, so no ``|`` or
    newline in one field can move another (``parsers.delimited``)."""
    delimiter = f"<{secrets.token_hex(16)}>"
    res = run(
        ["sacct", "-X", "-D", "-n", "-p", f"--delimiter={delimiter}", *select, "-o", ",".join(fields)],
        bin_dir=bin_dir,
        timeout=timeout,
    )
    return parsers.delimited(res.stdout, len(fields), delimiter)


def sacct_step_gpus(
    select: list[str], bin_dir: Path | None = None, timeout: float = 300.0
) -> dict[int, parsers.StepGpu]:
    """Slurm's own GPU accounting of the jobs ``select`` picks, per job: the highest mean utilisation
    and the highest peak memory of its steps (the training's step is the busiest), where a site's
    AccountingStorageTRES gathers ``gres/gpuutil`` and ``gres/gpumem``; empty where it does not."""
    fields = ["JobIDRaw", "TRESUsageInAve", "TRESUsageInMax"]
    delimiter = f"<{secrets.token_hex(16)}>"
    res = run(
        ["sacct", "-D", "-n", "-p", f"--delimiter={delimiter}", *select, "-o", ",".join(fields)],
        bin_dir=bin_dir,
        timeout=timeout,
    )
    out: dict[int, parsers.StepGpu] = {}
    for step, ave, peak in parsers.delimited(res.stdout, len(fields), delimiter):
        job, dot, _ = step.partition(".")
        gpu = parsers.step_gpu(ave, peak) if dot and job.isdigit() else None
        if gpu is None:
            continue
        seen = out.get(int(job), parsers.StepGpu(None, None))
        out[int(job)] = parsers.StepGpu(
            *(max((v for v in pair if v is not None), default=None) for pair in zip(seen, gpu, strict=True))
        )
    return out


def sacct_jobs(job_ids: list[int], bin_dir: Path | None = None) -> list[dict[str, str]]:
    """Allocation rows of every run of the given jobs, as dicts of ``SACCT_FIELDS``."""
    rows = sacct_rows(["-j", queries.job_list(job_ids)], SACCT_FIELDS, bin_dir=bin_dir)
    return [dict(zip(SACCT_FIELDS, row, strict=True)) for row in rows]


def default_partition(bin_dir: Path | None = None, timeout: float = 30.0) -> str:
    """The partition sbatch gives a job that names none: the one slurmctld marks ``Default=YES``
    (hidden ones too, as sbatch does); SlurmError when there is none."""
    res = run(["scontrol", "--all", "--oneliner", "show", "partition"], bin_dir=bin_dir, timeout=timeout)
    name = parsers.default_partition(res.stdout)
    if name is None:
        raise SlurmError("Slurm has no default partition (none is Default=YES)")
    return name


# The comment that marks a will_run as yolo-sbatch's trial for slurm-yolo's job_submit.lua, which
# cannot tell a will_run from a submission by itself: it checks a marked one as any, counts it nowhere
# and holds it (a real job bearing the mark stays held). Its TRIAL_MARK (data/job_submit/state.lua).
TRIAL_MARK = "slurm-yolo:trial"


def will_run(scripts: Sequence[str], bin_dir: Path | None = None, timeout: float = 30.0) -> list[parsers.WillRun]:
    """When slurmctld's scheduler would start each job script, submitting nothing (``sbatch
    --test-only``, the scripts on stdin, all asked at once): its start in epoch seconds, or why it
    refuses the job (its partition, GRES, limits, account or the site's job_submit plugin). Each asks
    with ``--comment=TRIAL_MARK`` (over the script's own): slurm-yolo's admission checks the budget
    of a trial as of the submission, but counts none of them against the others, the submission
    that follows or anyone else's. A slurmctld that does not answer refused nothing:
    UnreachableError, with what Slurm said."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(script: str) -> parsers.WillRun:
        try:
            res = run(
                ["sbatch", "--test-only", f"--comment={TRIAL_MARK}"],
                input=script,
                bin_dir=bin_dir,
                timeout=timeout,
                time_format=queries.TIME_FORMAT,
            )
            return parsers.WillRun(parsers.will_run_start(res.stderr))
        except UnreachableError:
            raise
        except (SlurmError, ValueError) as e:
            return parsers.WillRun(None, str(e))

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(scripts)))) as pool:
        return list(pool.map(ask, scripts))


def job_target(job_id: int, array_job_id: str = "", array_task_id: str = "") -> str:
    """The id that names this job alone to scontrol and scancel. An array task is ``ARRAY_TASK``: its
    own job id can be the array's (the task that keeps the array's record), which names every task."""
    if array_job_id.isdigit() and array_task_id.isdigit():
        return f"{int(array_job_id)}_{int(array_task_id)}"
    return str(int(job_id))


def _checked_target(job: str) -> str:
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job):
        raise UsageError(f"{job!r} is not a job id (JOBID or ARRAYJOBID_TASKID)")
    return job


def requeue(job: str, bin_dir: Path | None = None) -> None:
    """``scontrol requeue`` one job (``job_target``): Slurm ends the run and queues the job again."""
    run(["scontrol", "requeue", _checked_target(job)], bin_dir=bin_dir)


def preempted(job: str, bin_dir: Path | None = None) -> bool:
    """Whether slurmctld is preempting the job (``job_target``): squeue's PreemptTime is set (N/A
    otherwise). A field only slurmctld writes, read with a delimiter drawn for this call."""
    delimiter = f"<{secrets.token_hex(16)}>"
    res = run(
        ["squeue", "-h", "-t", "all", "-j", _checked_target(job), "-O", f"PreemptTime:{delimiter}"], bin_dir=bin_dir
    )
    rows = parsers.delimited(res.stdout, 1, delimiter)
    return len(rows) == 1 and rows[0][0].strip() not in ("", "N/A", "None", "Unknown")


def requeues_when_preempted_job_ends(bin_dir: Path | None = None) -> bool:
    """Whether this Slurm requeues, by itself, a job that ends in its preemption's grace time (23.02
    and later: the run is recorded PREEMPTED). 22.05 records such a job COMPLETED and never runs it
    again, so there the job asks for its requeue; on 24.11 a requeue asked for in the grace leaves
    the job marked preempted, and the end of its next run, its last epoch done, is taken for a
    preemption too and requeued once more."""
    res = run(["scontrol", "--version"], bin_dir=bin_dir)
    m = re.search(r"(\d+)\.(\d+)", res.stdout)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (23, 2)


def cancel(job: str, bin_dir: Path | None = None) -> None:
    """``scancel`` one job (``job_target``)."""
    run(["scancel", _checked_target(job)], bin_dir=bin_dir)


def job_comment(job: str, bin_dir: Path | None = None) -> str:
    """The job's Comment as slurmctld holds it now (``job_target``; "" when it has none or is gone).
    The field ends with a delimiter drawn at random for this call, as in ``running_jobs``."""
    delimiter = f"<{secrets.token_hex(16)}>"
    res = run(["squeue", "-h", "-t", "all", "-j", _checked_target(job), "-O", f"Comment:{delimiter}"], bin_dir=bin_dir)
    rows = parsers.delimited(res.stdout, 1, delimiter)
    return rows[0][0] if len(rows) == 1 else ""


def set_job_comment(job: str, text: str, bin_dir: Path | None = None, timeout: float = 10.0) -> None:
    """``scontrol update`` the job's Comment (``job_target``): what any user may do to her own job,
    as the launcher does to tell the controller its summary (``beacon``)."""
    if "\n" in text or len(text) > COMMENT_MAX:
        raise UsageError(f"a Comment of {len(text)} characters or with a newline: Slurm keeps {COMMENT_MAX}, one line")
    run(["scontrol", "update", f"JobId={_checked_target(job)}", f"Comment={text}"], bin_dir=bin_dir, timeout=timeout)


COMMENT_MAX = 1000  # Slurm refuses a comment past 1024 characters (22.05 and 24.11)
RUNNING_FIELDS = ("JobID", "ArrayJobID", "ArrayTaskID", "Name", "UserName", "WorkDir", "STDOUT", "TimeUsed", "Comment")


def running_jobs(bin_dir: Path | None = None) -> list[dict[str, str]]:
    """Every running job (``squeue -O``) as dicts of ``RUNNING_FIELDS``, user text included (job
    names, work dirs, output paths: any character). As in ``sacct_rows``, each field ends with a
    delimiter drawn at random for this call, so no ``|`` or newline a user wrote can move a field;
    ``JobID`` is each job's own id (an array task's too)."""
    delimiter = f"<{secrets.token_hex(16)}>"
    res = run(
        ["squeue", "-h", "-t", "RUNNING", "-O", ",".join(f"{f}:{delimiter}" for f in RUNNING_FIELDS)], bin_dir=bin_dir
    )
    return [
        dict(zip(RUNNING_FIELDS, row, strict=True))
        for row in parsers.delimited(res.stdout, len(RUNNING_FIELDS), delimiter)
    ]


def job_state(job_id: int, bin_dir: Path | None = None) -> str:
    """The job's state: from squeue while slurmctld holds it (``-t all``: also for MinJobAge after its
    end, so a slurmdbd outage does not hide how it ended), else from sacct (``CANCELLED by 0`` ->
    ``CANCELLED``)."""
    try:
        res = run(["squeue", "-h", "-t", "all", "-j", str(int(job_id)), "-o", "%A %T"], bin_dir=bin_dir)
        # the job's own line: -j of an array's last task (whose raw id is the array's) lists every task
        own = [line.split()[1] for line in res.stdout.splitlines() if line.split()[:1] == [str(int(job_id))]]
        if own:
            return own[0]
    except SlurmError:
        pass  # squeue fails for jobs it no longer knows
    # The state alone, a word slurmdbd sets: one line per run of a requeued job, the last is current.
    res = run(["sacct", "-X", "-D", "-n", "-P", "-j", str(int(job_id)), "-o", "State"], bin_dir=bin_dir)
    runs = [line.split() for line in res.stdout.splitlines() if line.strip()]
    return runs[-1][0] if runs else "UNKNOWN"


UNKNOWN_GRACE_SECONDS = 30.0  # a job just submitted can be missing from both squeue and sacct this long


def states(job_id: int, poll: float = 1.0, timeout: float | None = None, bin_dir: Path | None = None) -> Iterator[str]:
    """The job's state every ``poll`` seconds, until a final one (the last yielded). SlurmError, with
    one line to say so, when Slurm has not known the job for a while or ``timeout`` seconds passed."""
    started = known = time.monotonic()
    while True:
        state = job_state(job_id, bin_dir)
        yield state
        if state in FINAL_STATES:
            return
        now = time.monotonic()
        if state != "UNKNOWN":
            known = now
        elif now - known > UNKNOWN_GRACE_SECONDS:
            raise SlurmError(f"job {job_id}: Slurm knows no such job")
        if timeout is not None and now - started > timeout:
            raise SlurmError(
                f"job {job_id} still {state} after {timeout:.0f} s; it goes on (slurm-yolo watch {job_id})"
            )
        time.sleep(poll)


def wait_for_end(job_id: int, poll: float = 1.0, timeout: float | None = None, bin_dir: Path | None = None) -> str:
    """Poll until the job reaches a final state; that state."""
    state = "UNKNOWN"
    for state in states(job_id, poll, timeout, bin_dir):  # noqa: B007 - the last one is the answer
        pass
    return state


def wait_for_state(
    job_id: int, states: set[str], timeout: float = 60.0, poll: float = 0.3, bin_dir: Path | None = None
) -> str:
    """Poll until the job is in one of ``states`` (or has ended); the state reached."""
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(job_id, bin_dir)
        if state in states or state in FINAL_STATES or time.monotonic() > deadline:
            return state
        time.sleep(poll)


PLAIN_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]*")  # Slurm's account and cluster names: lower case


def plain_name(name: str) -> str:
    """``name`` when it is a plain Slurm name, else UsageError: names go into sacctmgr's own
    ``key=value`` arguments, where ``,``, ``=``, spaces or a leading ``-`` would change the request."""
    if not PLAIN_NAME.fullmatch(name):
        raise UsageError(f"{name!r} is not a plain Slurm name (lower-case letters, digits, _ . -)")
    return name


def cluster_name(bin_dir: Path | None = None) -> str:
    """ClusterName of the cluster the commands in ``bin_dir`` talk to, from its controller."""
    res = run(["scontrol", "show", "config"], bin_dir=bin_dir)
    try:
        return plain_name(parsers.cluster_name(res.stdout))
    except ValueError as e:
        raise SlurmError(str(e)) from None


@functools.lru_cache(maxsize=8)
def home_cluster(bin_dir: Path) -> str:
    """``cluster_name``, asked once per process (a failure is asked again): the cluster whose runs
    this controller settles, reconciles and audits when several share one ledger."""
    return cluster_name(bin_dir)


def account_run_mins(cluster: str, accounts: list[str], bin_dir: Path | None = None) -> dict[str, dict[str, int]]:
    """The GrpTRESRunMins of each account's own association on ``cluster``; accounts without one
    there are missing."""
    names = ",".join(plain_name(a) for a in accounts)
    res = run(
        [
            "sacctmgr",
            "-n",
            "-P",
            "show",
            "assoc",
            "where",
            f"cluster={plain_name(cluster)}",
            f"account={names}",
            f"format={','.join(parsers.ASSOC_FIELDS)}",
        ],
        bin_dir=bin_dir,
    )
    try:
        return parsers.account_run_mins(res.stdout, cluster)
    except ValueError as e:
        raise SlurmError(str(e)) from None


def set_run_mins(cluster: str, account: str, limits: dict[str, int], bin_dir: Path | None = None) -> None:
    """Set these TRES of the account's GrpTRESRunMins on ``cluster`` (-1 clears one); sacctmgr leaves
    the TRES not named as they are.

    A run-minutes limit of 0 on ``gres/gpu`` is how a dry account's GPU jobs are held back: Slurm
    enforces it itself, so plain ``sbatch`` cannot bypass a budget; pending jobs wait with reason
    AssocGrpGRESRunMinutes and start once the limit is lifted.
    """
    where = [f"name={plain_name(account)}", f"cluster={plain_name(cluster)}"]
    run(
        [
            "sacctmgr",
            "-i",
            "modify",
            "account",
            "where",
            *where,
            "set",
            f"GrpTRESRunMins={parsers.format_tres(limits)}",
        ],
        bin_dir=bin_dir,
    )


def partitions(bin_dir: Path | None = None) -> list[str]:
    """Every partition the controller has, hidden ones too."""
    res = run(["sinfo", "-h", "-a", "-o", "%R"], bin_dir=bin_dir)
    return sorted({line.strip() for line in res.stdout.splitlines() if line.strip()})


def partition_time_limit(partition: str, bin_dir: Path | None = None) -> int | None:
    """The partition's MaxTime in seconds; None: no limit."""
    res = run(["sinfo", "-h", "-p", plain_name(partition), "-o", "%l"], bin_dir=bin_dir)
    try:
        return parsers.partition_time_limit(res.stdout)
    except ValueError as e:
        raise SlurmError(f"sinfo: partition {partition}: {e}") from None


def set_time_limit(job: str, seconds: int, qos: str = "", bin_dir: Path | None = None) -> None:
    """``scontrol update`` a job's TimeLimit (whole minutes), and its QOS when given: what only an
    operator may raise (the settler, as the SlurmUser, for a run requeued for time: ``limits``)."""
    qos_arg = [f"QOS={plain_name(qos)}"] if qos else []
    run(
        ["scontrol", "update", f"JobId={_checked_target(job)}", f"TimeLimit={parsers.minutes_arg(seconds)}", *qos_arg],
        bin_dir=bin_dir,
    )


def qos_names(bin_dir: Path | None = None) -> list[str]:
    """Every QOS slurmdbd knows (a tier for any other would never apply)."""
    res = run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], bin_dir=bin_dir)
    return sorted({line.strip() for line in res.stdout.splitlines() if line.strip()})


def accounts_of(user: str, bin_dir: Path | None = None) -> list[str]:
    """The Slurm accounts ``user`` may submit to."""
    res = run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account"], bin_dir=bin_dir)
    return sorted({line.strip() for line in res.stdout.splitlines() if line.strip()})


def association_qos(cluster: str, bin_dir: Path | None = None) -> dict[tuple[str, str], set[str]]:
    """The QOS each association of ``cluster`` may use: (account, user) -> names; the account's own
    association has user "" (its users inherit what it is granted)."""
    res = run(
        ["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={plain_name(cluster)}", "format=account,user,qos"],
        bin_dir=bin_dir,
    )
    out: dict[tuple[str, str], set[str]] = {}
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0]:
            out[(parts[0], parts[1])] = {q for q in parts[2].split(",") if q}
    return out


def controller_config(bin_dir: Path | None = None, timeout: float = 30.0) -> parsers.ControllerConfig:
    """The controller's configuration and its clock at the answer (``scontrol show config``)."""
    return parsers.controller_config(run(["scontrol", "show", "config"], bin_dir=bin_dir, timeout=timeout).stdout)


def private_data(bin_dir: Path | None = None) -> frozenset[str]:
    """What the cluster's ``PrivateData`` hides from users: accounts, jobs, usage..."""
    return parsers.private_data(run(["scontrol", "show", "config"], bin_dir=bin_dir).stdout)


def admin_level_and_coordinated(user: str, bin_dir: Path | None = None) -> tuple[str, frozenset[str]]:
    """``user``'s AdminLevel in slurmdbd (None, Operator, Administrator) and the accounts they coordinate
    (sacctmgr lists the sub-accounts of a coordinated account with it)."""
    res = run(
        ["sacctmgr", "-n", "-P", "show", "user", f"name={user}", "withcoord", "format=AdminLevel,Coordinators"],
        bin_dir=bin_dir,
    )
    return parsers.admin_level_and_coordinated(res.stdout)


def default_account(user: str, bin_dir: Path | None = None) -> str:
    res = run(["sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount"], bin_dir=bin_dir)
    return res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""


def sbatch_help(bin_dir: Path | None = None) -> str:
    """``sbatch --help``: the options this host's sbatch takes (a SPANK plugin's among them)."""
    return run(["sbatch", "--help"], bin_dir=bin_dir).stdout


def pending_accounts(bin_dir: Path | None = None) -> set[str]:
    """The accounts with a job pending on this cluster (every user's: asked as the SlurmUser)."""
    res = run(["squeue", "-h", "-t", "PENDING", "-o", "%a"], bin_dir=bin_dir)
    return {line.strip() for line in res.stdout.splitlines() if line.strip()}


def partition_nodes(bin_dir: Path | None = None, timeout: float = 30.0) -> list[dict[str, object]]:
    """Each GPU partition's nodes as a replay cluster's spec takes them (``parsers.partition_nodes``)."""
    res = run(["sinfo", "-h", "-N", "-a", "-o", parsers.NODE_FORMAT], bin_dir=bin_dir, timeout=timeout)
    return parsers.partition_nodes(res.stdout)


def node_shapes(bin_dir: Path | None = None, timeout: float = 30.0) -> dict[str, parsers.NodeShape]:
    """Each partition's GPU node shape (CPUs and memory per GPU, threads per core), from ``sinfo``."""
    res = run(["sinfo", "-h", "-N", "-a", "-o", parsers.NODE_FORMAT], bin_dir=bin_dir, timeout=timeout)
    return parsers.node_shapes(res.stdout)
