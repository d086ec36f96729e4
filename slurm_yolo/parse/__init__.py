"""Parsers of what training jobs leave behind, one module per input format, one result type.

``parse_path`` takes a usage-record file, an ultralytics ``results.csv``, a captured stdout log, or a
run/submit folder holding any of them, says which source it used, and never raises on bad content:
truncated, interleaved, binary or enormous input gives a partial result with warnings.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_BYTES = 256 * 1024 * 1024  # read at most this much of any log (the tail beyond is reported)


@dataclass
class EpochStats:
    """One epoch's throughput and results, as far as the source tells."""

    epoch: int
    seconds: float | None = None
    images: int | None = None
    images_per_s: float | None = None
    mpx_per_s: float | None = None
    gpu_mem_gb: float | None = None
    losses: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def losses_and_metrics(values: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """An epoch's results.csv columns (as ultralytics names them, also in our usage records): the
    training losses (``train/``) and the validation metrics (``metrics/``); learning rates and
    validation losses are left out."""
    losses = {k: v for k, v in values.items() if k.startswith("train/")}
    return losses, {k: v for k, v in values.items() if k.startswith("metrics/")}


@dataclass
class ParseResult:
    """A run's progress and throughput; ``source`` says which input it came from."""

    source: str  # "usage-records", "results.csv", "stdout", "none"
    path: str
    epochs_completed: int = 0
    epochs_total: int | None = None
    per_epoch: list[EpochStats] = field(default_factory=list)
    images_per_s: float | None = None
    mpx_per_s: float | None = None
    train_seconds: float | None = None
    imgsz: int | None = None
    partial: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def finish(self) -> ParseResult:
        """Fill the run-level figures from the epochs."""
        done = [e for e in self.per_epoch if e.seconds]
        self.epochs_completed = max(self.epochs_completed, max((e.epoch for e in self.per_epoch), default=0))
        if self.train_seconds is None and done:
            self.train_seconds = sum(e.seconds or 0.0 for e in done)
        images = sum(e.images or 0 for e in done)
        seconds = sum(e.seconds or 0.0 for e in done if e.images)
        if images and seconds:
            self.images_per_s = images / seconds
            if self.imgsz:
                self.mpx_per_s = images * self.imgsz**2 / seconds / 1e6
        for e in self.per_epoch:
            if e.images and e.seconds:
                e.images_per_s = e.images_per_s or e.images / e.seconds
                if self.imgsz and e.mpx_per_s is None:
                    e.mpx_per_s = e.images_per_s * self.imgsz**2 / 1e6
        if self.epochs_total is not None and self.epochs_completed < self.epochs_total:
            self.partial = True
        return self


def read_bytes(path: Path, max_bytes: int, owner: int | Collection[int] | None = None) -> tuple[bytes, int]:
    """A regular file's bytes, at most ``max_bytes`` (its tail), and its full size. Users control the
    files read here, so a link, FIFO or device is refused (opened without following links and without
    blocking), and so is a file not owned by ``owner`` (a uid, or any of several) when given: OSError
    says which."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        owners = {owner} if isinstance(owner, int) else owner
        if owners is not None and st.st_uid not in owners:
            raise OSError(errno.EPERM, f"owned by uid {st.st_uid}, not by uid {' or '.join(map(str, sorted(owners)))}")
        if st.st_size > max_bytes:
            f.seek(st.st_size - max_bytes)
        return f.read(max_bytes), st.st_size


def read_text(path: Path, warnings: list[str], max_bytes: int | None = None, owner: int | None = None) -> str:
    """A log's text: binary bytes replaced, at most ``max_bytes`` (its tail; default MAX_BYTES), never
    an exception."""
    max_bytes = max_bytes or MAX_BYTES
    try:
        data, size = read_bytes(path, max_bytes, owner)
    except OSError as e:
        warnings.append(f"cannot read {path}: {e.strerror or e}")
        return ""
    if size > max_bytes:
        warnings.append(f"log is {size} bytes: read its last {max_bytes}")
    if b"\x00" in data:
        warnings.append("binary content (NUL bytes) ignored")
        data = data.replace(b"\x00", b"")
    return data.decode("utf-8", errors="replace")


def parse_path(path: Path) -> ParseResult:
    """Parse whatever ``path`` is; prefer our usage records, then results.csv, then stdout."""
    from slurm_yolo.parse import records, stdout
    from slurm_yolo.parse.results import parse_results_csv

    if path.is_dir():
        for pattern, parser in (
            ("yolo-usage-*.jsonl", records.parse_records),
            ("results.csv", parse_results_csv),
            ("yolo-*.out", stdout.parse_stdout),
            ("*.log", stdout.parse_stdout),
        ):
            found = sorted(path.glob(pattern), key=lambda p: p.stat().st_mtime)
            if found:
                return parser(found[-1])
        return ParseResult(
            source="none", path=str(path), partial=True, warnings=["no usage records, results.csv or log"]
        )
    if not path.exists():
        return ParseResult(source="none", path=str(path), partial=True, warnings=[f"{path} does not exist"])
    head = read_text_head(path)
    if head.lstrip().startswith("{"):
        return records.parse_records(path)
    if head.startswith("epoch,") or path.name.endswith(".csv"):
        return parse_results_csv(path)
    return stdout.parse_stdout(path)


def read_text_head(path: Path, n: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(n).decode("utf-8", errors="replace")
    except OSError:
        return ""
