"""``python -m bench gpu-priors [--check]``: fit the GPU-type priors, write ``slurm_yolo/data/gpu_priors.json``.

The public corpus (``gpu_corpus``) is fitted at once with the product's own predictor
(``timemodel.predict_train_seconds`` for a steady-state speed, ``predict_seconds`` for a whole run):
the terms every GPU shares (how compute grows with the model's FLOPs, the batch and the image size;
the per-step cost; the data loader's CPU-seconds per image, which overlaps compute), a ``k`` per
GPU type with figures, pulled toward a law in the card's TFLOPs (``k = k100 x (TFLOPs / 100) ^
-exponent``, which also gives every type without figures its ``k``), and DDP's efficiency per doubling.
Each point's weight is 1 / sqrt(points of its source): one long log must not outvote ten pages. The
fixed costs no speed shows (start-up, per-epoch, per-validation-pass) stay at ``FIXED``.

Those are fitted on the detect points; a task whose loader does more per image (segment's masks) then
gets its own factor on the loader's cost (``loader_tasks``: a 1-D search on that task's points alone,
with everything else as the detect fit left it: the least squared log errors).

The memory model (``gpu_priors.memory_gb``) is fitted on the detect rows that print ``GPU_mem``.
``--check`` fits again in memory and fails if the shipped file differs.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import gpu_corpus
from bench.gpu_corpus import Point
from slurm_yolo.core import gputypes
from slurm_yolo.core.model import fitting, gpu_priors
from slurm_yolo.core.model.estimate import FAMILY_PRIOR, Workload, model_factor
from slurm_yolo.core.model.timemodel import TimeModel, predict_seconds, predict_train_seconds

REF = 8.86
DIGITS = 4
# Terms no published speed shows, fixed: the data loaders' start, an epoch's end (metrics,
# checkpoint), a validation pass's set-up, a validation token's cost beside a training one (the CPU
# corpus' 0.42), per validated image outside compute; the start-up is the config's (jobs teach it).
FIXED = {
    "overhead_seconds": 10.0,
    "val_pass_seconds": 2.0,
    "val_weight": 0.42,
    "image_seconds": 1e-6,  # a GPU's images are the loader's (which overlaps compute): next to nothing outside it
    "val_image_seconds": 0.001,
    "imgsz_curvature": 0.0,
}
# (name, prior mean, prior spread): log terms are in log units
SHARED = (
    ("log_k100", math.log(0.01), 3.0),  # s/Mpx at 100 dense FP16 TFLOPs
    ("tflops_exponent", 0.5, 0.5),
    ("compute_exponent", 0.7, 0.5),
    ("batch_exponent", -0.1, 0.5),
    ("imgsz_exponent", 0.0, 0.5),
    ("log_loader", math.log(0.02), 1.5),  # CPU-seconds per training image at 640 px (mosaic: four decodes)
    # x (imgsz / 640) ^ this: measured here on one CPU core, ultralytics' own loader on synthetic images,
    # 207 images/s at 640 px and 644 at 320 (exponent 1.6; real JPEGs' decode does not grow with imgsz)
    ("loader_imgsz_exponent", 1.6, 0.5),
    ("log_iteration", math.log(0.01), 2.0),  # seconds per optimizer step of yolov8n
    ("log_epoch", math.log(2.0), 1.5),  # an epoch's own seconds (the loader's first batches, metrics, saving)
    ("iteration_exponent", 0.3, 0.5),
    ("logit_ddp", math.log(0.9 / 0.1), 1.5),  # DDP efficiency per doubling, as a logit
)
TYPE_SPREAD = 0.5  # how far a type's k may stray from the TFLOPs law (log units)
# A task's loader factor: the search's grid in log units, a coarse step over +-TASK_RANGE, then a fine
# one around the coarse best; where the loader does not bind (the cost is flat), the factor nearest 1
TASK_RANGE = 3.0
TASK_STEPS = (0.01, 0.0001)
# Huber reweighting (as fitting's, wider: published figures scatter more than one machine's runs)
HUBER = 0.3
ROBUST_ROUNDS = 2
SOLVE_ITERATIONS = 80
# Families get their own compute per GFLOP on a GPU, against the original YOLOv5's (most of the
# corpus): the CPU corpus' factors (estimate.FAMILY_PRIOR) as the prior, within a factor e^FAMILY_SPREAD
ANCHOR = "yolov5"
FAMILY_SPREAD = 0.5
# The spreads a site's fit starts from (fitting.SPREAD's names): k moves first; the shape the corpus
# measured moves only as far as a partition's own runs reach.
SITE_SPREADS = {
    "imgsz_exponent": 0.3,
    "batch_exponent": 0.3,
    "iteration_exponent": 0.3,
    "loader": 1.0,
    "iteration": 1.0,
    "overhead": 1.0,
    "epoch": 1.0,
    "val_pass": 1.0,
    "image": 1.0,
    "val_image": 1.0,
    "val_weight": 1.0,
    "imgsz_curvature": 0.1,
}


class Fit:
    """A fit of the shared terms and each type's k on some points."""

    def __init__(
        self, points: Sequence[Point], theta: np.ndarray, names: list[str], tasks: dict[str, float] | None = None
    ) -> None:
        self.points = list(points)
        self.theta = theta
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.tasks = dict(tasks or {})  # each task's loader factor (a task not in it: 1)

    def value(self, name: str) -> float:
        return float(self.theta[self.index[name]])

    @property
    def ddp_efficiency(self) -> float:
        return 1 / (1 + math.exp(-self.value("logit_ddp")))

    def k(self, gpu: gputypes.GpuType) -> float:
        own = self.index.get(f"type:{gpu.name}")
        delta = float(self.theta[own]) if own is not None else 0.0
        return math.exp(self.value("log_k100") + delta) * (gpu.tflops / 100) ** -self.value("tflops_exponent")

    def terms(self) -> dict[str, float]:
        return {
            **FIXED,
            "compute_exponent": self.value("compute_exponent"),
            "batch_exponent": self.value("batch_exponent"),
            "imgsz_exponent": self.value("imgsz_exponent"),
            "loader_seconds": math.exp(self.value("log_loader")),
            "loader_imgsz_exponent": self.value("loader_imgsz_exponent"),
            "iteration_seconds": math.exp(self.value("log_iteration")),
            "epoch_seconds": math.exp(self.value("log_epoch")),
            "iteration_exponent": self.value("iteration_exponent"),
        }

    def families(self) -> dict[str, float]:
        """Compute per GFLOP of each family the corpus has, against the anchor's (``ANCHOR``)."""
        return {n.split(":", 1)[1]: math.exp(self.value(n)) for n in self.names if n.startswith("family:")}

    def model(self, gpu: gputypes.GpuType, base: TimeModel | None = None) -> TimeModel:
        tm = base or TimeModel(k=1.0, overhead_seconds=0.0, val_weight=0.5, iteration_seconds=0.0, startup_seconds=20.0)
        terms: dict[str, Any] = self.terms()
        return replace(
            tm,
            **terms,
            k=self.k(gpu),
            family_factors={**tm.family_factors, **self.families()},
            loader_task_factors={**tm.loader_task_factors, **self.tasks},
        )


def predict(p: Point, tm: TimeModel, ddp_eff: float) -> float:
    """The point's seconds as the product predicts them: a whole run's; an epoch's without the run's
    overhead; a progress bar's (its steps alone) without the epoch's own costs either."""
    s = p.sample
    if p.whole_run:
        return predict_seconds(s.workload, tm, s.gpus, ddp_eff, REF, s.cpus)
    outside = tm.overhead_seconds + (tm.epoch_seconds if p.kind in ("it_per_s", "s_per_it") else 0.0)
    return predict_train_seconds(s.workload, tm, s.gpus, ddp_eff, REF, s.cpus) - outside


def _weights(points: Sequence[Point]) -> np.ndarray:
    n = Counter(p.source for p in points)
    return np.array([1 / math.sqrt(n[p.source]) for p in points])


def fit(points: Sequence[Point]) -> Fit:
    """The shared terms and the types' k that these points' detect runs support (MAP, log errors),
    and each other task's loader factor on that task's points (``fit_task``)."""
    shared = fit_shared([p for p in points if p.task == gpu_corpus.DETECT])
    f = Fit(points, shared.theta, shared.names)
    for task in sorted({p.task for p in points} - {gpu_corpus.DETECT}):
        f.tasks[task] = fit_task(shared, [p for p in points if p.task == task])
    return f


def fit_task(f: Fit, points: Sequence[Point]) -> float:
    """The loader factor of one task's points: everything else as ``f`` has it, the factor that
    minimises their squared log errors (weighted as the main fit's: 1 / sqrt(points of the source))."""
    task = points[0].task
    weights = _weights(points)
    seconds = [p.sample.total_seconds or p.sample.train_seconds for p in points]
    models = {p.gpu.name: f.model(p.gpu) for p in points}

    def cost(log_factor: float) -> float:
        err = [
            math.log(
                max(
                    predict(
                        p,
                        replace(models[p.gpu.name], loader_task_factors={task: math.exp(log_factor)}),
                        f.ddp_efficiency,
                    ),
                    1e-9,
                )
                / s
            )
            for p, s in zip(points, seconds, strict=True)
        ]
        return float(weights @ np.square(err))

    best, span = 0.0, TASK_RANGE
    for step in TASK_STEPS:  # the loader's max() is flat where it does not bind: a grid, not a slope
        n = round(span / step)
        grid = best + step * np.arange(-n, n + 1)
        best = float(min(grid, key=lambda x: (cost(float(x)), abs(float(x)))))
        span = step
    return math.exp(best)


def fit_shared(points: Sequence[Point]) -> Fit:
    """The shared terms and the types' k that these points support (MAP, log errors)."""
    types = sorted({p.gpu.name for p in points})
    families = sorted({p.sample.workload.family for p in points} - {ANCHOR})
    names = [n for n, _, _ in SHARED] + [f"type:{t}" for t in types] + [f"family:{f}" for f in families]
    mu = np.array([m for _, m, _ in SHARED] + [0.0] * len(types) + [math.log(FAMILY_PRIOR[f]) for f in families])
    sd = np.array([s for _, _, s in SHARED] + [TYPE_SPREAD] * len(types) + [FAMILY_SPREAD] * len(families))
    source_weights = _weights(points)
    weights = np.sqrt(source_weights)
    seconds = np.array([p.sample.total_seconds or p.sample.train_seconds for p in points])

    def errors(theta: np.ndarray) -> np.ndarray:
        f = Fit(points, theta, names)
        models = {t: f.model(gputypes.TYPES[t]) for t in types}
        pred = np.array([predict(p, models[p.gpu.name], f.ddp_efficiency) for p in points])
        return np.log(np.maximum(pred, 1e-9)) - np.log(seconds)

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([weights * errors(theta), (theta - mu) / sd])

    # the loader's max() has no slope where it does not bind: start from a few loader costs, keep the best
    starts = []
    for loader in (0.005, 0.02, 0.08):
        theta = mu.copy()
        theta[names.index("log_loader")] = math.log(loader)
        theta = fitting.minimize(residuals, theta, SOLVE_ITERATIONS)
        starts.append((float(residuals(theta) @ residuals(theta)), theta))
    theta = min(starts, key=lambda c: c[0])[1]
    for _ in range(ROBUST_ROUNDS):  # a point far off (a log of another machine's trouble) weighs less
        err = np.abs(errors(theta))
        weights = np.sqrt(source_weights * np.where(err <= HUBER, 1.0, HUBER / np.maximum(err, 1e-12)))
        theta = fitting.minimize(residuals, theta, SOLVE_ITERATIONS)
    return Fit(points, theta, names)


def fit_memory(points: Sequence[Point], autobatches: Sequence[gpu_corpus.AutoBatch]) -> dict[str, float]:
    """base + per_image x batch per GPU x (imgsz / 640)^2 x model factor ^ exponent, least relative
    squares on the printed GPU_mem (the exponent on a grid, the rest linear); and how much less per
    image AutoBatch's own profile counts (ultralytics fits memory of one forward and backward pass,
    not a training step's reserved peak): the median over the logged AutoBatch choices."""
    rows = [p for p in points if p.gpu_mem_gb]
    y = np.array([p.gpu_mem_gb or 0.0 for p in rows])
    best: tuple[float, float, float, float] | None = None
    for exponent in np.arange(0.0, 1.01, 0.05):
        x = np.array([_memory_scale(p.sample.workload, p.sample.gpus, float(exponent)) for p in rows])
        design = np.column_stack([np.ones_like(x), x]) / y[:, None]
        (base, per), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
        if base < 0:
            base, per = 0.0, float((x / y) @ np.ones_like(y) / ((x / y) @ (x / y)))
        err = float(np.sum(((base + per * x) / y - 1) ** 2))
        if best is None or err < best[0]:
            best = (err, float(base), float(per), float(exponent))
    assert best is not None, "no GPU_mem figure in the corpus"
    _, base, per, exponent = best
    ratios = [
        (a.memory_gb * a.fraction - base) / (a.batch * per * _memory_scale(replace(a.workload, batch=1), 1, exponent))
        for a in autobatches
    ]
    ratio = float(np.median(ratios)) if ratios else 1.0
    return {
        "base_gb": base,
        "per_image_gb": per,
        "model_exponent": exponent,
        "autobatch_ratio": ratio,
        "points": len(rows),
    }


def memory_low(points: Sequence[Point], autobatches: Sequence[gpu_corpus.AutoBatch]) -> float:
    """The memory model's measured low end: the least printed GPU_mem over its prediction, each point
    predicted by the model fitted without its source (a plan is refused only past the card at this)."""
    ratios = []
    for p in points:
        if not p.gpu_mem_gb:
            continue
        m = fit_memory([q for q in points if q.source != p.source], [a for a in autobatches if a.source != p.source])
        scale = _memory_scale(p.sample.workload, p.sample.gpus, m["model_exponent"])
        ratios.append(p.gpu_mem_gb / (m["base_gb"] + m["per_image_gb"] * scale))
    return min(ratios) if ratios else 1.0


def _memory_scale(w: Workload, gpus: int, exponent: float) -> float:
    return max(1, w.batch // max(1, gpus)) * (w.imgsz / 640) ** 2 * model_factor(w.gflops, REF) ** exponent


def _round(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def priors_file(points: Sequence[Point]) -> dict[str, Any]:
    f = fit(points)
    detect = [p for p in points if p.task == gpu_corpus.DETECT]
    counts = Counter(p.gpu.name for p in detect)
    tasks = Counter(p.task for p in points)
    law = {
        "k_at_100_tflops": _round(math.exp(f.value("log_k100"))),
        "tflops_exponent": _round(f.value("tflops_exponent")),
    }
    sources = len({p.source for p in points})
    return {
        "source": f"{gpu_corpus.PUBLIC.name}: {len(points)} published figures"
        f" ({', '.join(f'{n} {t}' for t, n in sorted(tasks.items()))}) from {sources} sources, fitted by"
        " `python -m bench gpu-priors`",
        "terms": {k: _round(v) for k, v in f.terms().items()},
        "loader_tasks": {t: _round(v) for t, v in sorted(f.tasks.items())},
        "factors": {"family": {k: _round(v) for k, v in sorted(f.families().items())}},
        "spreads": SITE_SPREADS,
        "k": {
            "law": law,
            "types": {t: {"k": _round(f.k(gputypes.TYPES[t])), "points": n} for t, n in sorted(counts.items())},
        },
        "ddp_efficiency": _round(f.ddp_efficiency),
        "memory": {
            **{k: _round(v) for k, v in fit_memory(detect, gpu_corpus.autobatches()).items()},
            "low_ratio": _round(memory_low(detect, gpu_corpus.autobatches())),
        },
    }


def text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[2:] if argv is None else argv
    points, _ = gpu_corpus.load()
    fresh = text(priors_file(points))
    target: Path = gpu_priors.GPU_PRIORS
    if args == ["--check"]:
        if target.read_text() != fresh:
            sys.exit(f"{target} is not what the GPU corpus gives: run python -m bench gpu-priors")
        print(f"{target.name}: what the GPU corpus gives")
        return
    target.write_text(fresh)
    print(f"wrote {target}")
