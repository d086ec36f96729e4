"""``python -m bench gpu-accuracy``: the GPU-type priors against the published figures they were not fitted on.

Every figure below is leave-one-source-out: the priors that predict a point were fitted without every
point of its source (a page, an issue, a README), so no point is evidence for itself.

- **Day one** (nothing calibrated): each detect point predicted by those priors; the median
  |log(predicted / published)| as a factor (target: within 1.5x).
- **Calibrated on one run per type**: for each point of a type with several sources, the partition's
  fit (``fitting.fit``, the product's own MAP fit) on that one point, then the type's points of
  *other* sources predicted (target: within 1.25x).
- **The named series**: ultralytics' single-V100 YOLOv5 n/s/m/l/x times and the YOLOv5l DDP epochs on
  1/2/4/8 A100s, calibrated on one point of the series (its smallest), each other point's error
  (target: each within 20%).
- **AutoBatch and GPU memory**: the memory model (fitted without the point's source) against every
  printed detect ``GPU_mem``, and the batch it would pick against every logged AutoBatch choice.
- **Other tasks** (segment), apart: day one as above, the task's loader factor fitted on its points of
  the other sources; where the left-out source is the task's only one, the factor falls back to 1 and
  the line says so (the raw miss); and the shipped factor on those same points, in-sample (no test).

The detect figures are the detect points' alone: the other tasks' points only fit their loader factor.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

from bench import gpu_corpus, gpu_priors
from bench.gpu_corpus import DETECT, Point
from slurm_yolo.core.model import fitting
from slurm_yolo.core.model import gpu_priors as runtime
from slurm_yolo.core.model.timemodel import TimeModel

REF = gpu_priors.REF


@cache
def _loso(points: tuple[Point, ...], source: str) -> gpu_priors.Fit:
    return gpu_priors.fit([p for p in points if p.source != source])


def ratio(p: Point, tm: TimeModel, ddp: float) -> float:
    """published seconds / predicted seconds: > 1 predicts the run faster than it was."""
    actual = p.sample.total_seconds or p.sample.train_seconds
    return actual / gpu_priors.predict(p, tm, ddp)


def factor(logs: Sequence[float]) -> float:
    return math.exp(statistics.median(abs(x) for x in logs)) if logs else math.nan


def day_one(points: tuple[Point, ...], task: str = DETECT) -> list[tuple[Point, float]]:
    """(point, log(published / predicted)) of the task's points, each from priors fitted without its source."""
    out = []
    for p in (q for q in points if q.task == task):
        f = _loso(points, p.source)
        out.append((p, math.log(ratio(p, f.model(p.gpu), f.ddp_efficiency))))
    return out


def calibrated(f: gpu_priors.Fit, on: Point) -> TimeModel:
    """The partition's model after its first run (``on``), from priors ``f``: the product's own fit."""
    prior = replace_spreads(f.model(on.gpu))
    return fitting.fit_terms([on.sample], prior, f.ddp_efficiency, REF)


def replace_spreads(tm: TimeModel) -> TimeModel:
    return replace(tm, spreads=dict(gpu_priors.SITE_SPREADS))


def one_run(points: tuple[Point, ...], task: str = DETECT) -> list[float]:
    """log errors of a type's points of other sources after calibrating on one point of the type (the
    task's points alone)."""
    logs = []
    mine = [p for p in points if p.task == task]
    for on in mine:
        others = [q for q in mine if q.gpu.name == on.gpu.name and q.source != on.source]
        if not others:
            continue
        f = _loso(points, on.source)
        tm = calibrated(f, on)
        logs += [math.log(ratio(q, tm, f.ddp_efficiency)) for q in others]
    return logs


def series(points: tuple[Point, ...], name: str, on: int = 0) -> list[tuple[Point, float]]:
    """Each other point of a named series after calibrating on its ``on``-th (smallest model, fewest
    GPUs first), from priors fitted without the series' source."""
    members = sorted((p for p in points if p.series == name), key=lambda p: (p.sample.gpus, p.sample.workload.gflops))
    if len(members) < 2:
        return []
    f = _loso(points, members[on].source)
    tm = calibrated(f, members[on])
    return [(p, ratio(p, tm, f.ddp_efficiency)) for i, p in enumerate(members) if i != on]


def memory(points: tuple[Point, ...]) -> list[tuple[Point, float, float]]:
    """(point, printed GPU_mem, predicted) with the memory model fitted without the point's source (the
    detect points', as the shipped one)."""
    out = []
    detect = [p for p in points if p.task == DETECT]
    for p in detect:
        if not p.gpu_mem_gb:
            continue
        m = gpu_priors.fit_memory([q for q in detect if q.source != p.source], gpu_corpus.autobatches())
        pred = runtime.memory_gb(p.sample.workload, p.sample.gpus, REF, {"memory": m})
        out.append((p, p.gpu_mem_gb, pred))
    return out


def autobatch(points: tuple[Point, ...]) -> list[tuple[gpu_corpus.AutoBatch, int]]:
    """(logged AutoBatch choice, the batch the memory model picks), the model fitted without its source."""
    logged = gpu_corpus.autobatches()
    detect = [p for p in points if p.task == DETECT]
    out = []
    for a in logged:
        m = gpu_priors.fit_memory(
            [q for q in detect if q.source != a.source], [b for b in logged if b.source != a.source]
        )
        out.append((a, runtime.autobatch(a.workload, a.memory_gb, a.fraction, REF, {"memory": m})))
    return out


def task_lines(points: tuple[Point, ...], task: str) -> list[str]:
    """A task's points apart: day one leave-one-source-out (saying where its factor fell back to 1),
    and the shipped factor on the same points (in-sample)."""
    mine = [p for p in points if p.task == task]
    if not mine:
        return []
    sources = sorted({p.source for p in mine})
    full = gpu_priors.fit(points)
    shipped = full.tasks.get(task, 1.0)
    d1 = day_one(points, task)
    xs = [x for _, x in d1]
    fallback = [p for p in mine if task not in _loso(points, p.source).tasks]
    out = [
        f"{task} ({len(mine)} points from {len(sources)} source(s); its loader factor x{shipped:.2f} in the shipped"
        f" priors): day one {factor(xs):.2f}x, published / predicted x{math.exp(statistics.mean(xs)):.2f} on average"
    ]
    if len(fallback) == len(mine):
        out.append(
            f"  leave-one-source-out leaves no {task} point to fit its factor on ({', '.join(sources)} is its only"
            " source): the factor falls back to 1.0, and the line above is the raw miss"
        )
    elif fallback:
        out.append(f"  {len(fallback)} of them from a task's only source left out: factor 1.0 for those")
    ins = [math.log(ratio(p, full.model(p.gpu), full.ddp_efficiency)) for p in mine]
    out.append(
        f"  with the shipped x{shipped:.2f} (fitted on these same points: in-sample, no test): {factor(ins):.2f}x,"
        f" published / predicted x{math.exp(statistics.mean(ins)):.2f} on average"
    )
    return out


def main() -> None:
    points, skipped = gpu_corpus.load()
    pts = tuple(points)
    sources = {p.source for p in pts}
    tasks = Counter(p.task for p in pts)
    print(
        f"public GPU corpus: {len(pts)} points ({', '.join(f'{n} {t}' for t, n in sorted(tasks.items()))}) from"
        f" {len(sources)} sources ({len(skipped)} rows skipped); every figure leave-one-source-out"
    )
    d1 = day_one(pts)
    print(
        f"day one (nothing calibrated): median |log ratio| as a factor {factor([x for _, x in d1]):.2f}x"
        f" (target <= 1.5x) over {len(d1)} detect points"
    )
    by_type: dict[str, list[float]] = {}
    for p, x in d1:
        by_type.setdefault(p.gpu.name, []).append(x)
    for t, xs in sorted(by_type.items()):
        bias = math.exp(statistics.mean(xs))
        print(f"  {t:10s} {len(xs):3d} points: {factor(xs):.2f}x, published / predicted x{bias:.2f} on average")
    o = one_run(pts)
    print(
        f"calibrated on one run of the type: the type's points of other sources {factor(o):.2f}x"
        f" (target <= 1.25x) over {len(o)} predictions"
    )
    for name, label in (
        ("v100-yolov5", "single-V100 YOLOv5 n..x (300 COCO epochs)"),
        ("a100-ddp", "YOLOv5l DDP on 1/2/4/8 A100"),
    ):
        got = series(pts, name)
        if not got:
            print(f"{label}: not in the corpus")
            continue
        cells = ", ".join(f"{p.sample.workload.model} x{p.sample.gpus}: {r - 1:+.0%}" for p, r in got)
        worst = max(abs(r - 1) for _, r in got)
        print(f"{label}, calibrated on its first point: {cells} (worst {worst:.0%}, target each within 20%)")
        every = [abs(r - 1) for i in range(len(got) + 1) for _, r in series(pts, name, i)]
        print(
            f"  calibrated on each of its points in turn: the others within {statistics.median(every):.0%} (median),"
            f" {max(every):.0%} (worst)"
        )
    mem = memory(pts)
    if mem:
        logs = [math.log(a / b) for _, a, b in mem]
        print(
            f"GPU memory: printed GPU_mem against predicted, {len(mem)} points: {factor(logs):.2f}x median,"
            f" worst {math.exp(max(abs(x) for x in logs)):.2f}x"
        )
    picks = [
        f"{a.workload.model} on {a.gpu.name} at {a.fraction:.0%}: logged {a.batch}, planned {b}"
        for a, b in autobatch(pts)
    ]
    print(f"AutoBatch (the memory model fitted without the choice's source): {'; '.join(picks)}")
    for task in sorted(set(tasks) - {DETECT}):
        for line in task_lines(pts, task):
            print(line)
