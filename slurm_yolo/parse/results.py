"""An ultralytics run folder: ``args.yaml`` (what was asked) and ``results.csv`` (what happened).

results.csv has one row per finished epoch; its ``time`` column is cumulative seconds since training
started, without process start-up and the final validation.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_yolo.core.errors import UsageError
from slurm_yolo.parse import losses_and_metrics, read_bytes

if TYPE_CHECKING:
    from slurm_yolo.parse import ParseResult


MAX_RUN_FILE_BYTES = 16 * 1024 * 1024  # args.yaml and results.csv of a run folder a user made


@dataclass(frozen=True)
class EpochRow:
    """One results.csv row, with the numbers typed."""

    epoch: int
    time: float | None
    values: dict[str, float] = field(default_factory=dict)


def read_results_csv(path: Path, whole_lines: bool = False) -> list[EpochRow]:
    """Rows of a results.csv; malformed rows are skipped, a missing file is an error. ``whole_lines``:
    of a file being written, only the lines already ended (a row cut short could read as a number)."""
    try:
        text = read_bytes(path, MAX_RUN_FILE_BYTES)[0].decode("utf-8", errors="replace")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if whole_lines:
        text = text[: text.rfind("\n") + 1]
    try:
        return _rows(csv.DictReader(text.splitlines()))
    except csv.Error as e:  # a field past csv's limit: a file no ultralytics run writes
        raise UsageError(f"{path} is not a results.csv: {e}") from None


def _rows(reader: csv.DictReader[str]) -> list[EpochRow]:
    """The rows with an epoch, their finite numbers typed (the rest of a row is text: dropped)."""
    rows = []
    for raw in reader:
        typed: dict[str, float] = {}
        for key, value in raw.items():
            if key is None or value is None:
                continue
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                typed[key.strip()] = number
        if "epoch" in typed:
            rows.append(EpochRow(epoch=int(typed["epoch"]), time=typed.get("time"), values=typed))
    return rows


@dataclass(frozen=True)
class RunDir:
    """A finished (or interrupted) ultralytics training run on disk."""

    path: Path
    args: dict[str, Any]
    rows: list[EpochRow]

    @property
    def epochs_completed(self) -> int:
        return len(self.rows)

    @property
    def train_seconds(self) -> float | None:
        times = [r.time for r in self.rows if r.time is not None]
        return times[-1] if times else None


def read_run_dir(path: Path) -> RunDir:
    """Read ``args.yaml`` and ``results.csv`` of a run folder."""
    import yaml  # not on the login path

    if not path.is_dir():
        raise UsageError(f"{path} is not a run folder")
    try:
        args = yaml.safe_load(read_bytes(path / "args.yaml", MAX_RUN_FILE_BYTES)[0].decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no args.yaml (not an ultralytics run folder)") from None
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"{path}/args.yaml is not readable: {reason}") from None
    if not isinstance(args, dict):
        raise UsageError(f"{path}/args.yaml is not a mapping")
    results = path / "results.csv"
    if not results.exists():
        raise UsageError(f"{path}: no results.csv (the run finished no epoch)")
    return RunDir(path=path, args=args, rows=read_results_csv(results))


def parse_results_csv(path: Path) -> ParseResult:
    """results.csv alone (plus its args.yaml and dataset, when still there, for images and tokens)."""
    from slurm_yolo.parse import EpochStats, ParseResult

    result = ParseResult(source="results.csv", path=str(path))
    try:
        rows = read_results_csv(path)
    except UsageError as e:
        result.warnings.append(str(e))
        result.partial = True
        return result
    images = None
    args_file = path.parent / "args.yaml"
    if args_file.exists():
        try:
            run = read_run_dir(path.parent)
            result.epochs_total = int(run.args.get("epochs") or 0) or None
            imgsz = run.args.get("imgsz")
            result.imgsz = int(imgsz) if isinstance(imgsz, int) else None
            from slurm_yolo.core.dataset import count

            counts = count(str(run.args.get("data")))
            fraction = float(run.args.get("fraction") or 1.0)
            images = min(counts.train, int(fraction)) if fraction > 1 else max(1, round(counts.train * fraction))
        except (UsageError, OSError, TypeError, ValueError) as err:
            result.warnings.append(f"images unknown: {err}")
    previous = 0.0
    for row in rows:
        stats = EpochStats(epoch=row.epoch, images=images)
        if row.time is not None:
            stats.seconds = max(0.0, row.time - previous)
            previous = row.time
        stats.losses, stats.metrics = losses_and_metrics(row.values)
        result.per_epoch.append(stats)
    result.train_seconds = previous or None
    return result.finish()
