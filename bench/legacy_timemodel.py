"""Baseline for ``bench accuracy``: the time model slurm-yolo shipped before the corpus (kept verbatim
but for imports, so the benchmark compares against what users had: forms picked by leave-one-out,
Huber on relative error, an uncalibrated 20 s start-up)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from slurm_yolo.core.model.estimate import FAMILY_PRIOR, MPX, Workload, model_factor
from slurm_yolo.core.model.timemodel import ddp_factor, median
from slurm_yolo.core.model.timemodel import quantile as _quantile

# Candidate forms, simplest first: which linear terms are free ("a" overhead, "k", "w" val weight, "c" per iteration).
FORMS: tuple[tuple[str, ...], ...] = (("k",), ("a", "k"), ("a", "k", "c"), ("a", "k", "w"), ("a", "k", "w", "c"))
HUBER = 0.10  # relative residual beyond which a run counts as an outlier and is down-weighted


@dataclass(frozen=True)
class TimeModel:
    """A partition's calibrated time model, with the evidence behind it."""

    k: float
    overhead_seconds: float
    val_weight: float
    iteration_seconds: float
    startup_seconds: float
    family_factors: dict[str, float] = field(default_factory=dict)
    form: str = "prior"
    n: int = 0
    loo_median: float | None = None  # median |pred - actual| / actual, leave-one-out
    loo_p90: float | None = None
    ratio_max: float | None = None  # largest actual / predicted (leave-one-out)
    ratio_p95: float | None = None

    def family_factor(self, family: str) -> float:
        return self.family_factors.get(family, FAMILY_PRIOR.get(family, 1.0))


class Sample(NamedTuple):
    """One finished run: its workload, its GPUs and how long training took."""

    workload: Workload
    gpus: int
    train_seconds: float
    key: str = ""


def scaled_iterations(w: Workload, reference_gflops: float) -> float:
    """Iterations weighted by model size: the per-step cost (optimizer update, gradient bookkeeping,
    data collation) grows with the parameter count, which tracks GFLOPs within a family."""
    return w.iterations * model_factor(w.gflops, reference_gflops)


def effective_mpx(w: Workload, tm: TimeModel, reference_gflops: float) -> tuple[float, float, float]:
    """(train, in-training val, final val) effective millions of pixels."""
    scale = model_factor(w.gflops, reference_gflops) * tm.family_factor(w.family) / MPX
    return w.train_pixels * scale, w.val_pixels * scale, w.final_val_pixels * scale


def predict_train_seconds(w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, reference_gflops: float) -> float:
    """Training time alone: what results.csv's ``time`` measures."""
    tr, va, _ = effective_mpx(w, tm, reference_gflops)
    compute = tm.k * (tr + tm.val_weight * va) / ddp_factor(max(1, gpus), ddp_eff)
    return tm.overhead_seconds + compute + tm.iteration_seconds * scaled_iterations(w, reference_gflops)


def predict_seconds(w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, reference_gflops: float) -> float:
    """The whole job: start-up, training, final validation."""
    _, _, final = effective_mpx(w, tm, reference_gflops)
    train = predict_train_seconds(w, tm, gpus, ddp_eff, reference_gflops)
    return tm.startup_seconds + train + tm.k * tm.val_weight * final


# --- the fit -------------------------------------------------------------------------------------


def _solve(rows: list[list[float]], ys: list[float], weights: list[float]) -> list[float] | None:
    """Weighted least squares by normal equations (tiny systems); None when singular."""
    p = len(rows[0])
    ata = [[0.0] * p for _ in range(p)]
    aty = [0.0] * p
    for row, y, wt in zip(rows, ys, weights, strict=True):
        for i in range(p):
            aty[i] += wt * row[i] * y
            for j in range(p):
                ata[i][j] += wt * row[i] * row[j]
    # Gaussian elimination with partial pivoting.
    m = [ata[i] + [aty[i]] for i in range(p)]
    for col in range(p):
        piv = max(range(col, p), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12 * max(1.0, max(abs(v) for v in m[piv][:p])):
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(p):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, p + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][p] / m[i][i] for i in range(p)]


def _features(s: Sample, tm: TimeModel, ddp_eff: float, ref: float) -> dict[str, float]:
    tr, va, _ = effective_mpx(s.workload, tm, ref)
    scale = ddp_factor(max(1, s.gpus), ddp_eff)
    return {"a": 1.0, "tr": tr / scale, "va": va / scale, "it": scaled_iterations(s.workload, ref)}


def _columns(form: tuple[str, ...], f: dict[str, float], prior: TimeModel) -> list[float]:
    """Design row for ``form``; a val weight that is not fitted comes from the prior."""
    row: list[float] = []
    if "a" in form:
        row.append(f["a"])
    if "w" in form:
        row += [f["tr"], f["va"]]  # k and k*w
    else:
        row.append(f["tr"] + prior.val_weight * f["va"])
    if "c" in form:
        row.append(f["it"])
    return row


def _unpack(form: tuple[str, ...], coef: list[float], prior: TimeModel) -> TimeModel:
    it = iter(coef)
    a = next(it) if "a" in form else 0.0
    k = next(it)
    w = (next(it) / k if k > 0 else prior.val_weight) if "w" in form else prior.val_weight
    c = next(it) if "c" in form else 0.0
    return replace(prior, k=k, overhead_seconds=a, val_weight=w, iteration_seconds=c, form="+".join(form))


def fit_linear(
    samples: list[Sample], form: tuple[str, ...], prior: TimeModel, ddp_eff: float, ref: float
) -> TimeModel | None:
    """Robust (Huber, relative error) non-negative fit of the linear terms of ``form``."""
    feats = [_features(s, prior, ddp_eff, ref) for s in samples]
    active = list(form)
    for _ in range(len(form)):
        rows = [_columns(tuple(active), f, prior) for f in feats]
        ys = [s.train_seconds for s in samples]
        weights = [1.0 / (y * y) for y in ys]  # relative error
        coef = None
        for _ in range(8):
            coef = _solve(rows, ys, weights)
            if coef is None:
                return None
            resid = [
                (sum(c * x for c, x in zip(coef, row, strict=True)) - y) / y for row, y in zip(rows, ys, strict=True)
            ]
            weights = [(1.0 if abs(r) <= HUBER else HUBER / abs(r)) / (y * y) for r, y in zip(resid, ys, strict=True)]
        assert coef is not None
        # Non-negativity: drop the most negative free term (never k) and refit.
        names = [t for t in ("a", "k", "w", "c") if t in active]
        negative = [(v, n) for v, n in zip(coef, names, strict=True) if v < 0 and n != "k"]
        if coef[names.index("k")] <= 0:
            return None
        if not negative:
            tm = _unpack(tuple(active), coef, prior)
            return replace(tm, form="+".join(form))
        active.remove(min(negative)[1])
    return None


FOLDS = 10  # past this many runs, leave-one-out becomes 10-fold cross-validation (same answer, n/10 the fits)


def _loo(
    samples: list[Sample], form: tuple[str, ...], prior: TimeModel, ddp_eff: float, ref: float
) -> list[float] | None:
    """Held-out ratios actual / predicted: leave-one-out, or k-fold for many runs."""
    folds = len(samples) if len(samples) <= 4 * FOLDS else FOLDS
    ratios = []
    for f in range(folds):
        tm = fit_linear([s for i, s in enumerate(samples) if i % folds != f], form, prior, ddp_eff, ref)
        if tm is None:
            return None
        for s in samples[f::folds]:
            pred = predict_train_seconds(s.workload, tm, s.gpus, ddp_eff, ref)
            if pred <= 0:
                return None
            ratios.append(s.train_seconds / pred)
    return ratios


def _total_rel_error(samples: list[Sample], tm: TimeModel, ddp_eff: float, ref: float) -> float:
    return sum(
        abs(predict_train_seconds(s.workload, tm, s.gpus, ddp_eff, ref) - s.train_seconds) / s.train_seconds
        for s in samples
    )


def _fit_families(
    samples: list[Sample], form: tuple[str, ...], prior: TimeModel, ddp_eff: float, ref: float
) -> TimeModel:
    """Per-family cost factors, relative to an anchor family that keeps its prior (yolov8 when present)."""
    counts: dict[str, int] = {}
    for s in samples:
        counts[s.workload.family] = counts.get(s.workload.family, 0) + 1
    fitted = [f for f, n in counts.items() if n >= 2]
    if len(fitted) < 2:
        return prior
    anchor = "yolov8" if "yolov8" in fitted else max(fitted, key=lambda f: counts[f])
    factors = {f: prior.family_factor(f) for f in counts}

    def loss(fam: str, value: float) -> float:
        trial = replace(prior, family_factors={**factors, fam: value})
        tm = fit_linear(samples, form, trial, ddp_eff, ref)
        return math.inf if tm is None else _total_rel_error(samples, tm, ddp_eff, ref)

    for _ in range(2):
        for fam in fitted:
            if fam == anchor:
                continue
            lo, hi = math.log(factors[fam] / 4), math.log(factors[fam] * 4)
            g = (math.sqrt(5) - 1) / 2
            for _ in range(30):  # golden-section search on log scale
                m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
                if loss(fam, math.exp(m1)) <= loss(fam, math.exp(m2)):
                    hi = m2
                else:
                    lo = m1
            factors[fam] = math.exp((lo + hi) / 2)
    return replace(prior, family_factors=factors)


def fit(
    samples: list[Sample],
    prior: TimeModel,
    ddp_eff: float = 0.9,
    reference_gflops: float = 8.86,
    forms: tuple[tuple[str, ...], ...] = FORMS,
) -> TimeModel:
    """The best-supported model for these runs; ``prior`` supplies what the data cannot."""
    if not samples:
        return prior
    n = len(samples)
    best: tuple[float, TimeModel, list[float] | None] | None = None
    for form in forms:
        p = len(form)
        if n < p + 2 and not (form == ("k",) and n >= 1):
            continue
        base = _fit_families(samples, form, prior, ddp_eff, reference_gflops) if n >= 4 else prior
        tm = fit_linear(samples, form, base, ddp_eff, reference_gflops)
        if tm is None:
            continue
        ratios = _loo(samples, form, base, ddp_eff, reference_gflops) if n >= 2 else None
        score = math.inf if ratios is None else sum(abs(1 / r - 1) for r in ratios) / len(ratios)
        # A richer form must beat the simpler one by 10% to be worth its parameters.
        if best is None or score < best[0] * 0.9 or (best[0] == math.inf and score < math.inf):
            best = (score, tm, ratios)
    if best is None:
        return prior
    _, tm, ratios = best
    tm = replace(tm, n=n)
    if ratios:
        errors = [abs(1 / r - 1) for r in ratios]
        tm = replace(
            tm,
            loo_median=median(errors),
            loo_p90=_quantile(errors, 0.9),
            ratio_max=max(ratios),
            ratio_p95=_quantile(ratios, 0.95),
        )
    return tm


class Buffer(NamedTuple):
    """The time-limit headroom and why."""

    value: float
    reason: str


def buffer_for(tm: TimeModel, base: float) -> Buffer:
    """Never below ``base``; widened to what the fit's leave-one-out residuals show, more with few runs."""
    if tm.n == 0:
        return Buffer(max(base, 1.0), "uncalibrated partition: prior k, limit doubled")
    if tm.ratio_max is None:
        return Buffer(max(base, 0.5), f"only {tm.n} calibration run(s): no residuals yet")
    if tm.n < 20:
        margin = 0.05 * (20 - tm.n) / 20
        needed = tm.ratio_max - 1 + margin
        why = f"max actual/predicted {tm.ratio_max:.2f} over {tm.n} runs + {margin:.2f} small-sample margin"
    else:
        needed = (tm.ratio_p95 or 1.0) - 1
        why = f"p95 actual/predicted {tm.ratio_p95:.2f} over {tm.n} runs"
    if needed > base:
        return Buffer(needed, why)
    return Buffer(base, f"configured {base:.2f} (residuals need {max(0.0, needed):.2f}: {why})")
