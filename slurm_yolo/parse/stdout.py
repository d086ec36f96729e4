"""What ultralytics printed: non-TTY logs, logs captured under a pseudo-terminal, and the seeds' format.

Progress frames are separated by ``\\r`` and ``\\x1b[K`` and coloured with ANSI codes; the last frame
of an epoch carries its training seconds (``100% ━━━ 2/2 3.4it/s 0.6s``), the validation frame that
follows carries the validation seconds. Under a pseudo-terminal every frame is cut at the terminal
width with ``…`` before the progress part, so losses may be lost but timings are kept. The
``engine/trainer:`` line gives the arguments (batch, imgsz, epochs) and the ``Scanning`` line the
number of training images. YOLO26 logs ``l1_loss`` instead of ``dfl_loss``: loss names come from the
header. The seeds' format is ``Epoch 49/99 GPU_mem: 7.23G ... ips: 142.5``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from slurm_yolo.parse import EpochStats, ParseResult, read_text

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = r"(\d+(?:\.\d+)?)"
_FRAME = re.compile(
    rf"^\s*(\d+)/(\d+)\s+{_NUM}G\b(?P<mid>.*?):\s*(?P<pct>\d+)%\s*\S*\s+(?P<i>\d+)/(?P<n>\d+)\s*"
    rf"(?:{_NUM}(?:it/s|s/it))?\s*(?P<elapsed>{_NUM})s(?:<{_NUM}s)?\s*$"
)
_VAL_FRAME = re.compile(rf"^\s*Class\s+Images.*?:\s*100%\s*\S*\s+\d+/\d+\s*(?:{_NUM}(?:it/s|s/it))?\s*(?P<s>{_NUM})s")
_ALL = re.compile(rf"^\s*all\s+(\d+)\s+(\d+)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+{_NUM}\s*$")
_HEADER = re.compile(r"^\s*Epoch\s+GPU_mem\s+(.*?)\s+Instances\s+Size\s*$")
_ARGS = re.compile(r"engine/trainer:\s*(.*)$")
_SCAN_IMAGES = re.compile(r"^train: Scanning .*?(\d+) images")
_SCAN_FRAME = re.compile(r"^train: Scanning .*?100%\s*\S*\s+(\d+)/(\d+)")
_DONE = re.compile(rf"(\d+) epochs completed in {_NUM} hours")
_SEEDS = re.compile(rf"Epoch\s+(\d+)/(\d+)\s+GPU_mem:\s*{_NUM}G.*?ips:\s*{_NUM}")
MAX_LINE = 16384
METRICS = ("precision", "recall", "mAP50", "mAP50-95")


def _args(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(", "):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value not in (None, "", "None") else None  # type: ignore[arg-type]
    except ValueError:
        return None


def parse_stdout(path: Path) -> ParseResult:
    """Per-epoch seconds, images/s, Mpx/s, GPU memory, losses and metrics from a captured stdout."""
    result = ParseResult(source="stdout", path=str(path))
    text = read_text(path, result.warnings)
    epochs: dict[int, EpochStats] = {}
    progress: dict[int, int] = {}  # epoch -> furthest iteration seen (DDP ranks interleave)
    loss_names: list[str] = []
    train_images: int | None = None
    fraction = 1.0
    current: int | None = None
    finished = False
    total_seconds: float | None = None
    for raw in re.split(r"[\r\n]", text):
        line = _ANSI.sub("", raw[:MAX_LINE])
        if not line.strip():
            continue
        if m := _ARGS.search(line):
            args = _args(m.group(1))
            result.imgsz = _int(args.get("imgsz")) or result.imgsz
            result.epochs_total = _int(args.get("epochs")) or result.epochs_total
            with contextlib.suppress(ValueError):
                fraction = float(args.get("fraction", "1.0"))
        elif m := _SCAN_IMAGES.search(line):
            train_images = int(m.group(1))
        elif m := _SCAN_FRAME.search(line):
            train_images = int(m.group(2))
        elif m := _HEADER.match(line):
            loss_names = m.group(1).split()
        elif m := _FRAME.match(line):
            epoch, total = int(m.group(1)), int(m.group(2))
            current = epoch
            result.epochs_total = result.epochs_total or total
            e = epochs.setdefault(epoch, EpochStats(epoch=epoch))
            e.gpu_mem_gb = float(m.group(3))
            i, n = int(m.group("i")), int(m.group("n"))
            if i < progress.get(epoch, -1):
                continue
            progress[epoch] = i
            mid = m.group("mid").split()
            if "…" not in m.group("mid") and len(mid) == len(loss_names) + 2:
                e.losses = {name: float(v) for name, v in zip(loss_names, mid, strict=False) if _is_float(v)}
                result.imgsz = result.imgsz or _int(mid[-1])
            if i == n and n > 0:
                e.seconds = float(m.group("elapsed"))
                if train_images:
                    e.images = max(1, round(train_images * fraction)) if fraction <= 1 else int(fraction)
        elif (m := _VAL_FRAME.match(line)) and current in epochs and not finished:
            e = epochs[current]
            if e.seconds is not None and "val_seconds" not in e.metrics:
                e.metrics["val_seconds"] = float(m.group("s"))
                e.seconds += float(m.group("s"))
        elif (m := _ALL.match(line)) and current in epochs:
            target = epochs[current]
            if not finished or not target.metrics.get("final"):
                target.metrics.update({k: float(v) for k, v in zip(METRICS, m.groups()[2:], strict=True)})
                if finished:
                    target.metrics["final"] = 1.0
        elif m := _DONE.search(line):
            finished = True
            result.epochs_completed = int(m.group(1))
            total_seconds = float(m.group(2)) * 3600  # 3 decimals of an hour: a fallback only
        elif m := _SEEDS.search(line):
            epoch = int(m.group(1))
            result.epochs_total = int(m.group(2))
            epochs[epoch] = EpochStats(epoch=epoch, gpu_mem_gb=float(m.group(3)), images_per_s=float(m.group(4)))
    result.per_epoch = [epochs[k] for k in sorted(epochs)]
    if total_seconds is not None and any(e.seconds is None for e in result.per_epoch):
        result.train_seconds = total_seconds
    if (
        result.per_epoch
        and all(e.seconds is None for e in result.per_epoch)
        and all(e.images_per_s for e in result.per_epoch)
    ):
        ips = [e.images_per_s for e in result.per_epoch if e.images_per_s]
        result.images_per_s = sum(ips) / len(ips)
    complete = [e.epoch for e in result.per_epoch if e.seconds is not None or e.images_per_s is not None]
    result.epochs_completed = max([result.epochs_completed, *complete]) if complete else result.epochs_completed
    if not result.per_epoch and not finished:
        result.warnings.append("no training progress found")
        result.partial = True
    return result.finish()


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
