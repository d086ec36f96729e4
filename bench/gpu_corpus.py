"""The public GPU corpus (``bench/corpus/gpu_public.csv``) as runs the time model can predict.

Each row is one published figure (its URL and the printed text beside it: see
``bench/corpus/gpu_public.md``). A progress-bar speed (it/s, s/it) is one epoch's training: the
epoch's images at that speed (a dataset of unknown size: ``STEADY_STEPS`` steps, long enough that an
epoch's own costs do not count); an epoch's printed time is that epoch; neither holds the run's
one-time costs. A whole run's time is that run (its val set, ``val_images``, validated every epoch,
as ultralytics trains). Rows whose GPU is none of ``gputypes.TYPES``, or whose model the
tables do not have, are skipped with their reason; AutoBatch lines are read apart (``autobatches``).
Each point keeps its row's task (``Point.task``): a segment run's loader does more per image.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from slurm_yolo.core import gputypes
from slurm_yolo.core.model.estimate import Workload, lookup_model
from slurm_yolo.core.model.timemodel import Sample

PUBLIC = Path(__file__).parent / "corpus" / "gpu_public.csv"
MEASURED = Path(__file__).parent / "corpus" / "gpu"  # what `python -m bench gpu` measured on a lent GPU
STEADY_STEPS = 10_000
DEFAULT_WORKERS = 8  # ultralytics' workers=8 per GPU, where a log does not say
# The original YOLOv5 (anchor-based, ultralytics/yolov5): FLOPs @640 (B) from that repository's README
# table (yolov5n6's too). ultralytics' own yolov5*u are other models (anchor-free heads): estimate.GFLOPS.
YOLOV5_CLASSIC = {
    "yolov5n": 4.5,
    "yolov5s": 16.5,
    "yolov5m": 49.0,
    "yolov5l": 109.1,
    "yolov5x": 205.7,
    "yolov5n6": 4.6,
    # its segmentation models (the README's "Segmentation" table, release v7.0: FLOPs @640 (B))
    "yolov5n-seg": 7.1,
    "yolov5s-seg": 26.4,
    "yolov5m-seg": 70.8,
    "yolov5l-seg": 147.7,
    "yolov5x-seg": 265.7,
}
DETECT = "detect"  # a row's task where it names none


@dataclass(frozen=True)
class Point:
    """One published figure as a run: the sample, the card, and where it comes from."""

    sample: Sample
    gpu: gputypes.GpuType
    source: str  # the page (a repository's file, whatever its commit): its points go together
    url: str
    kind: str  # it_per_s, s_per_it, s_per_epoch, total_hours, total_days
    whole_run: bool  # the figure includes start-up, validation and the run's one-time costs
    images_per_s: float  # as published (training images per second)
    gpu_mem_gb: float | None
    series: str  # "v100-yolov5" or "a100-ddp" for the named series, else ""
    task: str = DETECT  # the row's task ("segment": its loader makes masks too)


@dataclass(frozen=True)
class AutoBatch:
    """A logged AutoBatch choice: the batch it picked on a card of ``memory_gb`` at ``fraction``."""

    gpu: gputypes.GpuType
    workload: Workload
    memory_gb: float
    fraction: float
    batch: int
    source: str


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _duration(text: str, kind: str) -> float | None:
    """Seconds of a printed duration: "0:09:33" and "20:39" (an epoch: [H:]MM:SS), "80:17 hours"
    (H:MM), "2 days", "12.5 hours", "3 min"."""
    text = text.strip().lower()
    if m := re.match(r"(\d+):(\d+)(?::(\d+))?", text):
        a, b, c = int(m.group(1)), int(m.group(2)), m.group(3)
        if c is not None:
            return a * 3600 + b * 60 + int(c)
        return a * 3600 + b * 60 if kind == "total_hours" else a * 60 + b
    m = re.match(r"(\d+(?:\.\d+)?)\s*(day|hour|h\b|min|s\b)?", text)
    if not m:
        return None
    unit = {"day": 86400.0, "hour": 3600.0, "h": 3600.0, "min": 60.0, "s": 1.0}.get(m.group(2) or "", 0.0)
    unit = unit or {"total_days": 86400.0, "total_hours": 3600.0}.get(kind, 1.0)
    return float(m.group(1)) * unit


def _model(name: str) -> tuple[str, str, float] | None:
    """(model, family, GFLOPs) of a corpus row's model."""
    name = name.strip().lower().removesuffix(".pt").removesuffix(".yaml")
    if name in YOLOV5_CLASSIC:
        return name, "yolov5", YOLOV5_CLASSIC[name]
    known = lookup_model(name)
    return (known.name, known.family, known.gflops) if known else None


def row_point(row: dict[str, str]) -> Point | str:
    """A corpus row as a point, or why it cannot be one."""
    gpu, _, _ = gputypes.identify(row["gpu"])
    if gpu is None:
        return f"GPU {row['gpu']!r} is none of the known types"
    model = _model(row["model"])
    if model is None:
        return f"model {row['model']!r} is not in the tables"
    gpus = int(_float(row["gpu_count"]) or 1)
    imgsz, batch = int(_float(row["imgsz"]) or 640), int(_float(row["batch"]) or 0)
    workers = int(_float(row["workers"]) or DEFAULT_WORKERS)
    ips = _float(row["images_per_s"])
    kind = row["figure_kind"].strip()
    train_images = int(_float(row["train_images"]) or 0)
    epochs = int(_float(row["epochs"]) or 0)
    if batch <= 0:
        return "no batch"
    if kind in ("it_per_s", "s_per_it"):
        if not ips:
            return "no images/s"
        images = train_images or STEADY_STEPS * batch
        w = Workload(images, 0, imgsz, 1, batch, 0, *model)
        seconds, whole = images / ips, False
    elif kind in ("s_per_epoch", "total_hours", "total_days"):
        duration = _duration(row["figure"], kind)
        if not duration or not train_images:
            return "no duration or training images"
        whole = kind != "s_per_epoch"
        val = int(_float(row.get("val_images", "")) or 0)
        if whole and not (epochs and val):
            return "a whole run without its epochs or its val set's size"
        n = epochs if whole else 1
        w = Workload(train_images, val if whole else 0, imgsz, n, batch, n if whole else 0, *model)
        seconds, ips = duration, train_images * n / duration
    else:
        return f"figure kind {kind!r} is no speed"
    cpus = int(_float(row.get("loader_cpus", "")) or workers * gpus)
    sample = Sample(w, gpus, seconds, key=row["source_url"], total_seconds=seconds if whole else None, cpus=cpus)
    mem = _float(row["gpu_mem_gb"])
    series, task = row.get("series", "").strip(), row.get("task", "").strip() or DETECT
    return Point(sample, gpu, row["source"], row["source_url"], kind, whole, ips, mem, series, task)


def rows(path: Path = PUBLIC) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def load(path: Path = PUBLIC) -> tuple[list[Point], list[tuple[dict[str, str], str]]]:
    """(points, skipped rows with why) of the corpus' speeds."""
    points, skipped = [], []
    for row in rows(path):
        if row["figure_kind"] in ("autobatch", "memory_only"):
            continue
        got = row_point(row)
        if isinstance(got, str):
            skipped.append((row, got))
        else:
            points.append(got)
    return points, skipped


def autobatches(path: Path = PUBLIC) -> list[AutoBatch]:
    """The corpus' AutoBatch lines ("Using batch-size 281 for CUDA:0 16.87G/23.99G (70%)")."""
    out = []
    for row in rows(path):
        gpu, _, _ = gputypes.identify(row["gpu"])
        model = _model(row["model"])
        m = re.search(r"Using batch-size (\d+) for \S+ [\d.]+G/([\d.]+)G \((\d+)%\)", row["quote"])
        if row["figure_kind"] == "autobatch" and gpu is not None and model is not None and m:
            w = Workload(10**6, 0, int(_float(row["imgsz"]) or 640), 1, 16, 0, *model)
            out.append(AutoBatch(gpu, w, float(m.group(2)), int(m.group(3)) / 100, int(m.group(1)), row["source"]))
    return out
