"""What a job that did not complete leaves to say why, and how it goes on: its log's failing line and
its usage records' last checkpoint (login and admin side: ``yolo-sbatch --wait``, ``slurm-yolo job``).

Both files are the job's user's to write, anywhere she likes: they are read as she could read them
(root drops to her uid first), only their tail, never through a link, and what they say is shown back
to whoever may see her job, one cleaned line at a time; nothing billed ever comes from here.
"""

from __future__ import annotations

import math
import os
import pwd
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core import limits
from slurm_yolo.core.errors import escaped
from slurm_yolo.parse import read_text
from slurm_yolo.parse.records import MAX_USAGE_BYTES, iter_records

TAIL_BYTES = 64 * 1024  # a traceback, and the lines Slurm appends after it
SHOWN_CHARS = 300  # of the one line shown
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RUN_START = re.compile(r"slurm-yolo: run \d+ of job ")  # the launcher's first line in each run (run_start)
TRACEBACK = "Traceback (most recent call last):"
# Lines that say why a job ended when no exception does: the launcher's own one-line errors (click's
# ``Error:``), then slurmstepd's (a time limit, a cancel, an oom_kill), the last of them.
ERROR_PREFIXES = ("Error: ", "slurmstepd: error: ")
SLURM_REASONS = {
    "TIMEOUT": "it reached its time limit",
    "CANCELLED": "it was cancelled (scancel, by its user or an admin)",
    "OUT_OF_MEMORY": "it ran out of host memory (Slurm's oom_kill): ask for more (--sbatch-arg=--mem-per-cpu=...)",
    "NODE_FAIL": "its node failed (refunded in full)",
    "PREEMPTED": "a job of a higher tier took its GPUs",
    "BOOT_FAIL": "its node did not boot",
    "DEADLINE": "it reached its deadline",
}


def expand_pattern(
    pattern: str, job_id: int, name: str = "", user: str = "", array_job_id: str = "", array_task_id: str = ""
) -> str:
    """Slurm's %j, %x, %u, %A, %a and %% in an output path (squeue prints them unexpanded). %A is an
    array task's array id (a job's own id otherwise), %a its task id."""
    codes = {"j": str(job_id), "A": array_job_id or str(job_id), "x": name, "u": user, "%": "%"}
    if array_task_id:
        codes["a"] = array_task_id
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            code = pattern[i + 1]
            out.append(codes.get(code, "%" + code))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def log_path(pattern: str, workdir: str, job_id: int, name: str, user: str) -> Path | None:
    """The log Slurm wrote for the job (its ``--output``, relative to its work dir), or None where it
    names none (``/dev/null``, a pattern with backslashes, which Slurm takes as it is)."""
    if not pattern or pattern == "/dev/null" or "\0" in pattern or "\0" in workdir:
        return None
    path = Path(pattern if "\\" in pattern else expand_pattern(pattern, job_id, name, user))
    return path if path.is_absolute() else Path(workdir or "/") / path


def _uid(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):
        return None


def read_as(user: str, path: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The tail of a file of ``user``'s, as she could read it: '' where she could not, or it is not
    hers (a link, a FIFO, another's file). Root reads it in a child that is her for good (her uid and
    groups), so every folder on the way is checked as for her; anyone else reads as themselves."""
    uid = _uid(user)
    if uid is None:
        return ""
    if os.geteuid() != 0 or uid == 0:
        return read_text(path, [], max_bytes, owner=uid)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(rfd)
            pw = pwd.getpwuid(uid)
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(uid)
            data = read_text(path, [], max_bytes, owner=uid).encode()
            while data:
                data = data[os.write(wfd, data) :]
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    with os.fdopen(rfd, "rb") as f:
        while chunk := f.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    return b"".join(chunks)[: 4 * max_bytes].decode("utf-8", errors="replace")


def shown(text: str) -> str:
    """A line of a user's file as it may be shown: no terminal codes, control characters escaped, cut."""
    text = _ANSI.sub("", text).strip()
    clean = escaped(text)
    return clean if len(clean) <= SHOWN_CHARS else clean[: SHOWN_CHARS - 1] + "…"


def last_error(text: str) -> str:
    """The line that says why the job's last run failed: the last traceback's exception (ultralytics'
    error, or the launcher's), else the last ``Error:`` line, else slurmstepd's; '' when none does."""
    lines = [_ANSI.sub("", line.rsplit("\r", 1)[-1]).rstrip() for line in text.split("\n")]
    starts = [i for i, line in enumerate(lines) if _RUN_START.search(line)]
    lines = lines[starts[-1] + 1 :] if starts else lines  # a requeued job's log holds its earlier runs too
    tracebacks = [i for i, line in enumerate(lines) if line.lstrip().startswith(TRACEBACK)]
    if tracebacks:
        for line in lines[tracebacks[-1] + 1 :]:
            if line and not line[0].isspace():
                return shown(line)
    for prefix in ERROR_PREFIXES:
        found = [line for line in lines if line.startswith(prefix)]
        if found:
            return shown(found[-1])
    return ""


def slurm_reason(state: str, exit_code: str = "") -> str:
    """Slurm's word for how a job ended, where its log says nothing."""
    state = state.split()[0] if state.strip() else ""
    if state in SLURM_REASONS:
        return f"Slurm: {SLURM_REASONS[state]}"
    code = exit_code.split(":")
    if state == "FAILED" and code[0].isdigit():
        signal = f", signal {code[1]}" if len(code) > 1 and code[1].isdigit() and code[1] != "0" else ""
        return f"Slurm: its batch script exited with code {code[0]}{signal}"
    return f"Slurm: it ended {state}" if state else ""


class Saved(NamedTuple):
    """A run's last checkpoint, as its usage records say (``checkpoint``, ``epoch`` and ``start``)."""

    last: str  # the checkpoint's path, as the job recorded it (absolute)
    epoch: int  # the epoch it holds
    epochs: int  # the run's epochs in all, as its results.csv numbers them
    epoch_seconds: float  # the mean measured seconds of an epoch
    measured: int  # epochs measured
    startup_seconds: float  # before the first epoch of the job's last run (model, data loaders)


def _number(value: Any, top: float) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and 0 <= x <= top else None


def saved(records: Iterable[dict[str, Any]]) -> Saved | None:
    """The last checkpoint the job's records name (None: no epoch was saved, or the records are not
    the launcher's). Numbers out of any run's range are dropped: the user writes the file."""
    last: str | None = None
    epoch, epochs = 0, 0
    seconds: dict[int, float] = {}
    start_at: float | None = None
    startup = 0.0
    for rec in records:
        kind = rec.get("kind")
        if kind == "start":
            start_at = _number(rec.get("time"), 1e11)
            epochs = int(_number(rec.get("epochs"), 1e6) or epochs)
        elif kind == "epoch":
            n, s = _number(rec.get("epoch"), 1e6), _number(rec.get("seconds"), 1e7)
            if n is None or s is None:
                continue
            seconds[int(n)] = s
            epochs = int(_number(rec.get("epochs"), 1e6) or epochs)
            at = _number(rec.get("time"), 1e11)
            if start_at is not None and at is not None:  # this run's first epoch: what came before it
                startup, start_at = max(0.0, min(at - s - start_at, 86400.0)), None
        elif kind == "checkpoint":
            path, n = rec.get("last"), _number(rec.get("epoch"), 1e6)
            if isinstance(path, str) and path.startswith("/") and len(path) < 4096 and n:
                last, epoch = path, int(n)
    if last is None or not seconds:
        return None
    return Saved(last, epoch, max(epochs, epoch), sum(seconds.values()) / len(seconds), len(seconds), startup)


def all_trained(s: Saved | None) -> str:
    """What a run that saved its last epoch before its limit has left ('' when it has epochs left, or
    saved none): only ultralytics' final validation was cut; there is nothing to resume."""
    if s is None or s.epoch < s.epochs:
        return ""
    return (
        f"it trained all {s.epochs} epochs before its limit (weights in {shown(str(Path(s.last).parent))}):"
        " only its final validation was cut, so nothing is left to resume"
    )


def resume_limit(s: Saved, lead: int, buffer: float) -> int:
    """A limit (seconds, whole minutes) for what the run has left: its start-up, the epochs left at the
    seconds it measured per epoch, the buffer and the USR2 lead (``limits.next_limit``)."""
    train = s.epoch_seconds * s.measured
    left = max(0, s.epochs - s.epoch)
    return limits.next_limit(60, int(s.startup_seconds + train), train, s.measured, s.measured + left, lead, buffer)


def resume_command(s: Saved, partition: str, account: str, limit_seconds: int) -> str:
    """The yolo-sbatch line that resumes the run from its checkpoint, quoted as a shell reads it."""
    words = ["yolo-sbatch", "-p", partition, *(["-A", account] if account else [])]
    words += ["-t", str(max(1, math.ceil(limit_seconds / 60))), "train", "resume", f"model={s.last}"]
    return shown(" ".join(shlex.quote(w) for w in words))


RESUMABLE = frozenset({"TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL"})  # not a failure of its own


class Ending(NamedTuple):
    """Why a job's last run did not complete, and how it goes on."""

    why: str  # its log's failing line, else Slurm's reason
    saved: Saved | None  # its last checkpoint, where its usage records name one
    resume: str  # the command that resumes it from there ('': nothing to resume)
    trained: bool  # it has usage records: a yolo-sbatch training job


def ending(
    user: str,
    state: str,
    exit_code: str,
    log: Path | None,
    usage: Path | None,
    where: tuple[str, str],
    lead: int,
    buffer: float,
) -> Ending:
    """How the job of ``user`` that ended in ``state`` ended: its log's line (or Slurm's reason) and,
    after a time limit, a cancel, a preemption or a node's failure, the command that resumes its run
    (``where``: the partition and account it ran in) with a limit for what it has left."""
    state = state.split()[0] if state.strip() else ""
    why = (last_error(read_as(user, log)) if log else "") or slurm_reason(state, exit_code)
    text = read_as(user, usage, MAX_USAGE_BYTES) if usage and state in RESUMABLE else ""
    s = saved(iter_records(usage, text)) if usage and text else None
    resume = ""
    if s is not None and s.epoch < s.epochs:
        resume = resume_command(s, *where, resume_limit(s, lead, buffer))
    return Ending(why, s, resume, bool(text))
