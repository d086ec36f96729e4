"""What a running job tells the controller, through Slurm alone: a summary in its own Comment.

A site's controller often mounts none of the users' file systems, so the usage records the job
keeps in its work dir cannot reach it there. The launcher (job side) therefore sums them up, in
what the k feedback needs (the workload, the epochs done, the training seconds, whether one run did
it all) and when the training last showed progress, and writes that into the job's own Comment
(``scontrol update``, which Slurm lets any user do to her own job), after the ``yolo:`` estimate
yolo-sbatch put there. slurmctld hands the Comment to EpilogSlurmctld (``SLURM_JOB_COMMENT``) and
shows it to squeue: the feedback and the watchdog read it there, and open no file of the user's.

It is the user's text, as the records were: ``decode`` is strict (known keys, plain digits, short
plain names, bounded length) and never raises, and what reads it checks it against Slurm (the
feedback caps the training seconds at Slurm's elapsed and bounds what one job and one user move).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the estimate's module is not for the epilog's path, which only passes the text on
    from slurm_yolo.core.model.estimate import Workload

MARK = ";run:"  # after the estimate, in the job's Comment
MAX_CHARS = 480  # of the summary: Slurm keeps at most 1024 characters of a comment, the estimate ~150
_INT = re.compile(r"[0-9]{1,12}")
_NUMBER = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# The workload's fields by the short keys the Comment carries them under.
_WORKLOAD_KEYS = {
    "train_images": "tr",
    "val_images": "va",
    "imgsz": "sz",
    "epochs": "ne",
    "batch": "b",
    "val_passes": "vp",
    "model": "m",
    "family": "f",
    "gflops": "gf",
    "model_source": "ms",
}


@dataclass(frozen=True)
class Beacon:
    """One job's summary, as its launcher last wrote it."""

    at: int  # when the training last showed progress (Unix time, the job's claim)
    epochs_done: int
    train_seconds: float  # the finished epochs' seconds, every run of the job together
    one_run: bool  # no requeue or resume: Slurm's elapsed covers the whole training
    gpus: int
    cpus: int
    workload: Workload | None  # None: the launcher could not count the data or resolve the model


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def encode(b: Beacon) -> str:
    """The summary as it follows ``MARK`` in the Comment; "" when it cannot be said in plain digits
    and names within ``MAX_CHARS`` (then the controller learns nothing from this job)."""
    items = [
        f"at={b.at}",
        f"ep={b.epochs_done}",
        f"s={_number(b.train_seconds)}",
        f"one={int(b.one_run)}",
        f"g={b.gpus}",
        f"c={b.cpus}",
    ]
    if b.workload is not None:
        for f in fields(b.workload):
            value = getattr(b.workload, f.name)
            if f.name == "model":
                value = Path(str(value)).name  # a path's folders say nothing the time model reads
            items.append(f"{_WORKLOAD_KEYS[f.name]}={_number(value) if isinstance(value, float) else value}")
    text = ",".join(items)
    return text if len(text) <= MAX_CHARS and decode(text) == _plain(b) else ""


def _plain(b: Beacon) -> Beacon:
    """``b`` as the Comment can carry it: six decimals, the model's file name."""
    w = b.workload
    if w is not None:
        w = replace(w, model=Path(w.model).name, gflops=float(_number(w.gflops)))
    return replace(b, train_seconds=float(_number(b.train_seconds)), workload=w)


def with_beacon(comment: str, b: Beacon) -> str:
    """``comment`` with its summary replaced by ``b``'s (the estimate before it kept as it is)."""
    head = comment.split(MARK, 1)[0]
    text = encode(b)
    return head + MARK + text if text else head


def summary_text(comment: str | None) -> str:
    """The summary in a job's Comment as it stands (what the epilog keeps for the settler), or ""
    where there is none or it is longer than any ``encode`` writes."""
    if not comment or MARK not in comment:
        return ""
    text = comment.split(MARK, 1)[1]
    return text if len(text) <= MAX_CHARS else ""


def decode(text: str | None) -> Beacon | None:
    """A summary (``summary_text``), or None where there is none or any part of it is not as
    ``encode`` writes it. Never raises."""
    if not text or len(text) > MAX_CHARS:
        return None
    values: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key in values:
            return None
        values[key] = value
    try:
        head = {k: values.pop(k) for k in ("at", "ep", "s", "one", "g", "c")}
    except KeyError:
        return None
    if (
        not all(_INT.fullmatch(head[k]) for k in ("at", "ep", "g", "c"))
        or head["one"] not in ("0", "1")
        or not _NUMBER.fullmatch(head["s"])
    ):
        return None
    workload = _workload(values)
    if workload is None and values:
        return None
    return Beacon(
        int(head["at"]), int(head["ep"]), float(head["s"]), head["one"] == "1", int(head["g"]), int(head["c"]), workload
    )


def _workload(values: dict[str, str]) -> Workload | None:
    from slurm_yolo.core.model.estimate import Workload

    if set(values) != set(_WORKLOAD_KEYS.values()):
        return None
    kwargs: dict[str, object] = {}
    for f in fields(Workload):
        value = values[_WORKLOAD_KEYS[f.name]]
        if f.type in ("int", int):
            if not _INT.fullmatch(value):
                return None
            kwargs[f.name] = int(value)
        elif f.type in ("float", float):
            if not _NUMBER.fullmatch(value):
                return None
            kwargs[f.name] = float(value)
        else:
            if not _NAME.fullmatch(value):
                return None
            kwargs[f.name] = value
    return Workload(**kwargs)  # type: ignore[arg-type]


def from_records(path: Path, at: float, owner: int | None = None) -> Beacon | None:
    """The summary of the job's usage records (job side; or an admin's, by hand), progress last seen
    at ``at``; None before the launcher wrote its start record, or when ``owner`` (a uid, when given)
    does not own the file."""
    from slurm_yolo.core.model.estimate import Workload
    from slurm_yolo.parse.records import iter_records, parse_records, read_usage

    text = read_usage(path, [], owner)
    records = list(iter_records(path, text))
    start = next((r for r in records if r.get("kind") == "start"), None)
    if start is None:
        return None
    parsed = parse_records(path, text)
    seconds = sum(e.seconds or 0.0 for e in parsed.per_epoch)
    workload = None
    if isinstance(start.get("workload"), dict):
        try:
            workload = Workload(**start["workload"])
        except TypeError:
            workload = None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    one_run = not any(r.get("kind") in ("resume", "requeue") for r in records)
    return Beacon(
        int(at),
        parsed.epochs_completed,
        seconds,
        one_run,
        max(1, int(start.get("gpus") or 1)),
        max(0, int(start.get("cpus") or 0)),
        workload,
    )
