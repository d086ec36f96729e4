"""Our own usage records (``yolo-usage-JOBID.jsonl``, written by the launcher): the most exact source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import EpochStats, ParseResult, read_text


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a usage file, skipping lines that are not JSON objects (none if unreadable)."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    yield rec
    except OSError:
        return


def parse_records(path: Path) -> ParseResult:
    """Per-epoch images, tokens, seconds and GPU memory; later runs of a requeued job continue earlier ones."""
    result = ParseResult(source="usage-records", path=str(path))
    epochs: dict[int, EpochStats] = {}
    ended = False
    bad = 0
    for line in read_text(path, result.warnings).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
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
                e = EpochStats(epoch=epoch, seconds=seconds, images=images,
                               gpu_mem_gb=_opt_float(rec.get("gpu_mem_gb")),
                               metrics={k: float(v) for k, v in (rec.get("metrics") or {}).items()})  # fmt: skip
                if rec.get("tokens") and seconds > 0:
                    e.mtok_per_s = float(rec["tokens"]) / seconds / 1e6
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
