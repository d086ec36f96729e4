"""Our own usage records (``yolo-usage-JOBID.jsonl``, written by the launcher): the most exact source."""

from __future__ import annotations

import functools
import json
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slurm_yolo.parse import EpochStats, ParseResult, losses_and_metrics, read_text

MAX_USAGE_BYTES = 16 * 1024 * 1024  # a usage file holds a few hundred bytes per epoch
TAIL_BYTES = 1024 * 1024  # what reports and alerts read of one: its last few thousand epochs
# In the job's work dir (the folder it starts in: --chdir, else the submit dir), where the epilog,
# ``watch`` and the watchdog look for it.
USAGE_NAME = "yolo-usage-{job}.jsonl"


def read_usage(path: Path, warnings: list[str], owner: int | None = None) -> str:
    """A usage file's text, read as a file a user controls (``read_text``: bounded, regular files only)."""
    return read_text(path, warnings, MAX_USAGE_BYTES, owner)


def iter_records(path: Path, text: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of a usage file (or of its ``text``, read already), skipping lines that are not
    JSON objects (none if unreadable)."""
    for line in (read_usage(path, []) if text is None else text).splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python recurses
            continue
        if isinstance(rec, dict):
            yield rec


@functools.cache
def _uid(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL in the name (a saved sacct file's)
        return None


def job_records(workdir: str, job_id: int, user: str) -> list[dict[str, Any]]:
    """A job's usage records in its work dir, for reports and alerts. A work dir names any folder and a
    user writes what is in it, so the file is read only if the job's user owns it, never through a
    link, FIFO or device, and only its tail (``read_text``)."""
    uid = _uid(user)
    if uid is None or not workdir.startswith("/") or "\0" in workdir:
        return []
    path = Path(workdir) / USAGE_NAME.format(job=int(job_id))
    return list(iter_records(path, read_text(path, [], TAIL_BYTES, owner=uid)))


def parse_records(path: Path, text: str | None = None) -> ParseResult:
    """Per-epoch images, pixels, seconds and GPU memory; later runs of a requeued job continue earlier ones."""
    result = ParseResult(source="usage-records", path=str(path))
    epochs: dict[int, EpochStats] = {}
    ended = False
    bad = 0
    for line in (read_usage(path, result.warnings) if text is None else text).splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if not isinstance(rec, dict):
            bad += 1
            continue
        kind = rec.get("kind")
        try:
            if kind == "start":
                result.imgsz = int(rec["imgsz"])
                result.epochs_total = int(rec["epochs"])
            elif kind == "epoch":
                epoch = int(rec["epoch"])
                seconds = float(rec["seconds"])
                images = int(rec["images"])
                values = rec.get("metrics") or {}
                if not isinstance(values, dict):
                    raise TypeError("metrics is no mapping")
                losses, metrics = losses_and_metrics({k: float(v) for k, v in values.items()})
                e = EpochStats(
                    epoch=epoch,
                    seconds=seconds,
                    images=images,
                    losses=losses,
                    metrics=metrics,
                    gpu_mem_gb=_opt_float(rec.get("gpu_mem_gb")),
                )
                if rec.get("tokens") and seconds > 0:
                    e.mpx_per_s = float(rec["tokens"]) / seconds / 1e6
                epochs[epoch] = e
                result.epochs_total = int(rec.get("epochs") or result.epochs_total or 0) or None
            elif kind == "end":
                ended = True
        except (KeyError, TypeError, ValueError):
            bad += 1
    if bad:
        result.warnings.append(f"{bad} unreadable record(s) skipped")
    result.per_epoch = [epochs[k] for k in sorted(epochs)]
    if not ended:
        result.partial = True
    return result.finish()


def _opt_float(value: object) -> float | None:
    try:
        return float(value) if value is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
