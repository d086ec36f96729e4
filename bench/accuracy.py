"""Prediction accuracy on the committed corpus of real ultralytics CPU runs (refits in seconds).

Three models, each judged on whole-job time (what a time limit must cover):
- the seeds' ``T = k x tokens`` (k fitted as the geometric mean of seconds per effective token, a
  fixed 20% buffer);
- slurm-yolo's model before the corpus (``bench/legacy_timemodel.py``);
- today's model (``slurm_yolo.core.model.fitting``).

It prints 10-fold cross-validation on the calibration and long splits together (what a site
calibrates from: 3-40 s runs and 3-7 minute runs), the extrapolation split (fitted on the small
calibration runs alone, predicting the runs 3-10x bigger than they are), the coverage the time
limit promises against the coverage it realises (nested: each limit comes from a fit that did not see the run), the median
time limit / actual wall for runs of 60 s or more, and how fits on 1, 2 and 3 runs per model compare
with the prior alone.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench import corpus, legacy_timemodel
from bench import priors as bench_priors
from slurm_yolo.core import config
from slurm_yolo.core.model import fitting, priors
from slurm_yolo.core.model.timemodel import (
    Sample,
    TimeModel,
    batch_pixels,
    buffer_for,
    describe,
    effective_mpx,
    predict_seconds,
    predict_train_seconds,
    quantile,
)
from slurm_yolo.login.plan import time_limit

REF = 8.86
DDP = 0.9
LONG = 60.0  # runs at least this long (wall) for the limit / actual target
FIVE_MINUTES = 300.0  # Slurm's whole minutes weigh little past this: the buffer shows in limit / actual
FEW = (1, 2, 3)
FEW_DRAWS = 10
SITE_RUNS = 3  # run folders per model a site calibrates from (the site protocol)


class Predictor(NamedTuple):
    """A model fitted on some runs: whole-job seconds, and the time limit it would set."""

    seconds: Callable[[Sample], float]
    limit: Callable[[Sample], int]
    promised: float | None
    train: Callable[[Sample], float] | None = None  # training time alone (results.csv), where the model has it


Fitter = Callable[[list[Sample]], Predictor]


def ours(prior: TimeModel, base: float, coverage: float) -> Fitter:
    def fit(train: list[Sample]) -> Predictor:
        tm = fitting.fit(train, prior, DDP, REF, coverage)

        def seconds(s: Sample) -> float:
            return predict_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus)

        def limit(s: Sample) -> int:
            return time_limit(seconds(s), buffer_for(tm, base, seconds(s)).value)

        return Predictor(
            seconds,
            limit,
            tm.coverage,
            lambda s: predict_train_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus),
        )

    return fit


def legacy(prior: TimeModel, base: float) -> Fitter:
    lprior = legacy_timemodel.TimeModel(
        k=prior.k, overhead_seconds=5.0, val_weight=prior.val_weight, iteration_seconds=0.0, startup_seconds=20.0
    )

    def fit(train: list[Sample]) -> Predictor:
        old = [legacy_timemodel.Sample(s.workload, s.gpus, s.train_seconds, s.key) for s in train]
        tm = legacy_timemodel.fit(old, lprior, DDP, REF)
        buf = legacy_timemodel.buffer_for(tm, base)

        def seconds(s: Sample) -> float:
            return legacy_timemodel.predict_seconds(s.workload, tm, s.gpus, DDP, REF)

        return Predictor(
            seconds,
            lambda s: time_limit(seconds(s), buf.value),
            None,
            lambda s: legacy_timemodel.predict_train_seconds(s.workload, tm, s.gpus, DDP, REF),
        )

    return fit


def seeds(base: float) -> Fitter:
    unit = TimeModel(k=1.0, overhead_seconds=0, val_weight=1.0, iteration_seconds=0, startup_seconds=0)

    def pixels(s: Sample) -> float:
        tr, va, final = effective_mpx(s.workload, unit, REF)
        return tr + va + final

    def fit(train: list[Sample]) -> Predictor:
        k = math.exp(statistics.fmean(math.log(wall(s) / pixels(s)) for s in train))
        return Predictor(lambda s: k * pixels(s), lambda s: time_limit(k * pixels(s), base), None)

    return fit


def wall(s: Sample) -> float:
    assert s.total_seconds is not None, "corpus runs carry their wall time"
    return s.total_seconds


class Scores(NamedTuple):
    mape: float
    median: float
    p90: float
    bias: float
    realised: float  # share of runs within their time limit
    limit_ratio: float | None  # median limit / actual over runs >= LONG s
    long_runs: int


def score(pairs: list[tuple[Sample, float, int]]) -> Scores:
    errors = [(pred - wall(s)) / wall(s) for s, pred, _ in pairs]
    absolute = sorted(abs(e) for e in errors)
    long = [limit / wall(s) for s, _, limit in pairs if wall(s) >= LONG]
    return Scores(
        mape=statistics.fmean(absolute),
        median=statistics.median(absolute),
        p90=quantile(absolute, 0.9),
        bias=statistics.fmean(errors),
        realised=sum(1 for s, _, limit in pairs if wall(s) <= limit) / len(pairs),
        limit_ratio=statistics.median(long) if long else None,
        long_runs=len(long),
    )


def cross_validate(fitter: Fitter, runs: list[Sample], folds: int = 10) -> list[tuple[Sample, float, int]]:
    out = []
    for f in range(folds):
        p = fitter([s for i, s in enumerate(runs) if i % folds != f])
        out += [(s, p.seconds(s), p.limit(s)) for s in runs[f::folds]]
    return out


def held_out(
    fitter: Fitter, train: list[Sample], test: list[Sample]
) -> tuple[list[tuple[Sample, float, int]], Predictor]:
    p = fitter(train)
    return [(s, p.seconds(s), p.limit(s)) for s in test], p


def _row(label: str, sc: Scores) -> str:
    ratio = f"{sc.limit_ratio:.2f} ({sc.long_runs})" if sc.limit_ratio else "-"
    return (
        f"  {label:<26} MAPE {sc.mape:6.1%}  median {sc.median:6.1%}  p90 {sc.p90:6.1%}  bias {sc.bias:+6.1%}"
        f"  covered {sc.realised:6.1%}  limit/actual>=60s {ratio}"
    )


def few_runs(fitter: Fitter, cal: list[Sample], test: list[Sample]) -> dict[int, tuple[float, float]]:
    """MAPE (mean, worst over draws) after fitting n runs per model, on every run the fit did not see."""
    by_model: dict[str, list[Sample]] = {}
    for s in cal:
        by_model.setdefault(s.workload.model, []).append(s)
    rng = random.Random(7)
    out = {}
    for n in FEW:
        mapes = []
        for _ in range(FEW_DRAWS):
            train = [s for runs in by_model.values() for s in rng.sample(runs, min(n, len(runs)))]
            keys = {s.key for s in train}
            p = fitter(train)
            rest = [s for s in cal + test if s.key not in keys]
            mapes.append(statistics.fmean(abs(p.seconds(s) - wall(s)) / wall(s) for s in rest))
        out[n] = (statistics.fmean(mapes), max(mapes))
    return out


def site_split(runs: list[tuple[dict[str, Any], Sample]]) -> tuple[list[Sample], list[Sample], list[Sample]]:
    """What a site does: calibrate on the 3 lowest-index small runs per model as run folders (training
    time alone: no wall), predict the other small and long runs ("rest") and the 3-10x runs."""
    by_model: dict[str, list[Sample]] = {}
    for rec, s in runs:
        if rec["design"]["split"] == "calibration":
            by_model.setdefault(s.workload.model, []).append(s)
    cal = [s._replace(total_seconds=None) for ss in by_model.values() for s in ss[:SITE_RUNS]]
    keys = {s.key for s in cal}
    rest = [s for rec, s in runs if rec["design"]["split"] != "extrapolation" and s.key not in keys]
    return cal, rest, [s for rec, s in runs if rec["design"]["split"] == "extrapolation"]


def error_figures(pairs: list[tuple[Sample, float]]) -> tuple[float, float, float, float]:
    """(MAPE, bias, p90, worst) of predicted training time alone against results.csv's (what run
    folders measure)."""
    errors = [(pred - s.train_seconds) / s.train_seconds for s, pred in pairs]
    absolute = sorted(map(abs, errors))
    return statistics.fmean(absolute), statistics.fmean(errors), quantile(absolute, 0.9), absolute[-1]


def train_pairs(tm: TimeModel, runs: list[Sample]) -> list[tuple[Sample, float]]:
    return [(s, predict_train_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus)) for s in runs]


def site_protocol(runs: list[tuple[dict[str, Any], Sample]]) -> dict[str, tuple[float, float, float, float]]:
    """The site protocol's errors with the config's priors, the shipped ones (fitted on the whole
    corpus: these runs included), and, for each run, priors fitted without its family's runs (a
    family the corpus never had: the honest figure)."""
    cal, rest, ext = site_split(runs)
    base = bench_priors.config_prior()
    shipped = priors.apply(base, priors.shipped())
    families = sorted({s.workload.family for _, s in runs})
    without = {
        f: fitting.fit_terms(
            cal,
            priors.apply(
                base,
                bench_priors.fit_priors([s for _, s in runs if s.workload.family != f], base, f"without {f}", draws=10),
            ),
            DDP,
            REF,
        )
        for f in families
    }
    print(
        f"site protocol: calibrated on {len(cal)} run folders ({SITE_RUNS} lowest-index small runs per model,"
        f" training time alone); training time predicted for the {len(rest)} other small and long runs ('rest')"
        f" and the {len(ext)} runs 3-10x bigger"
    )
    out = {}
    for label, tm in (
        ("config priors", fitting.fit_terms(cal, base, DDP, REF)),
        ("shipped priors", fitting.fit_terms(cal, shipped, DDP, REF)),
    ):
        for split, test in (("rest", rest), ("3-10x", ext)):
            out[f"{label.split()[0]} {split}"] = error_figures(train_pairs(tm, test))
    for split, test in (("rest", rest), ("3-10x", ext)):
        pairs = [pair for s in test for pair in train_pairs(without[s.workload.family], [s])]
        out[f"held-out-family {split}"] = error_figures(pairs)
    labels = {
        "config": "config priors",
        "shipped": "shipped priors (in-sample)",
        "held-out-family": "priors without the run's family",
    }
    for key, (mape, bias, p90, worst) in out.items():
        kind, split = key.rsplit(" ", 1)
        print(
            f"  {labels[kind]:<34} {split:<6} MAPE {mape:6.1%}  bias {bias:+6.1%}  p90 {p90:6.1%}  worst {worst:6.1%}"
        )
    return out


def unmodelled(runs: list[tuple[dict[str, Any], Sample]]) -> None:
    """The options the time model has no term for (``rect``, ``cache``), by their runs' mean error
    under a fit on every run: a term is worth adding where that mean stands out of the noise."""
    tm = fitting.fit_terms([s for _, s in runs], bench_priors.config_prior(), DDP, REF)
    groups = {
        "rect=True": lambda d: d["rect"],
        "cache=ram": lambda d: d["cache"] == "ram",
        "cache=disk": lambda d: d["cache"] == "disk",
        "neither": lambda d: not d["rect"] and not d["cache"],
    }
    parts = []
    for label, member in groups.items():
        errors = [
            (predict_train_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus) - s.train_seconds) / s.train_seconds
            for rec, s in runs
            if member(rec["design"])
        ]
        parts.append(
            f"{label} {len(errors)} runs: mean {statistics.fmean(errors):+.1%}"
            f" (+-{statistics.stdev(errors) / math.sqrt(len(errors)):.1%})"
        )
    print(
        "options without a term (training time, fitted on every run; mean error, +- its standard error): "
        + "; ".join(parts)
    )
    ratios, extra = [], []
    for rec, _ in runs:  # the first epoch against the mean of the later ones (results.csv's cumulative time)
        rows = [r.split(",") for r in rec["results_csv"].strip().splitlines()]
        col = [c.strip() for c in rows[0]].index("time")
        cumulative = [float(r[col]) for r in rows[1:]]
        if len(cumulative) >= 3:
            later = (cumulative[-1] - cumulative[0]) / (len(cumulative) - 1)
            ratios.append(cumulative[0] / later)
            extra.append(cumulative[0] - later)
    print(
        f"first epoch: x{statistics.median(ratios):.3f} a later one, {statistics.median(extra):+.2f} s (medians of the"
        f" {len(ratios)} runs of 3 epochs or more): inside the overhead term, no term of its own"
    )


def widening(runs: list[tuple[dict[str, Any], Sample]]) -> None:
    """How much wider the error is outside the calibrated range (``timemodel.WIDEN_PER_LOG`` and
    ``WIDEN_FAMILY`` rest on this): fitted, with priors fitted on the same side, on the calibration
    runs on one side of a line (imgsz, batch pixels, family), the rest predicted; the RMS of their
    log errors against the fit's cross-validated error scale, per unit of log-distance beyond the range."""
    every = [s for _, s in runs]
    base = bench_priors.config_prior()
    middle = statistics.median(batch_pixels(s.workload) for s in every)

    def distance(key: str) -> Callable[[Sample, TimeModel], float]:
        def d(s: Sample, tm: TimeModel) -> float:
            low, high = tm.covered[key]
            value = s.workload.imgsz if key == "imgsz" else batch_pixels(s.workload)
            return max(0.0, math.log(value / high), math.log(low / value))

        return d

    lines = [
        ("imgsz above 320", lambda s: s.workload.imgsz <= 320, distance("imgsz")),
        ("imgsz below 160", lambda s: s.workload.imgsz >= 160, distance("imgsz")),
        ("batch pixels above their median", lambda s: batch_pixels(s.workload) <= middle, distance("batch_pixels")),
        *(
            (f"family {f}", lambda s, f=f: s.workload.family != f, lambda s, tm: 1.0)
            for f in sorted({s.workload.family for s in every})
        ),
    ]
    print("outside the calibrated range (error scale beyond it / cross-validated inside it):")
    for label, inside, far in lines:
        cal = [s for rec, s in runs if rec["design"]["split"] == "calibration" and inside(s)]
        test = [s for s in every if not inside(s)]
        part = priors.apply(base, bench_priors.fit_priors([s for s in every if inside(s)], base, label, draws=3))
        tm = fitting.fit(cal, part, DDP, REF, 0.99)
        errors = [math.log(wall(s) / predict_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus)) for s in test]
        ratio = math.sqrt(statistics.fmean(e * e for e in errors)) / (tm.noise_relative or math.nan)
        d = statistics.fmean(far(s, tm) for s in test)
        per_unit = (
            f" at a mean log-distance {d:.2f} ({(ratio - 1) / d:+.2f} per unit)"
            if d < 1 or "family" not in label
            else ""
        )
        print(f"  {label:<32} {len(test):3d} runs: x{ratio:.2f}{per_unit}")


def main(path: Path = corpus.CORPUS) -> dict[str, float]:
    runs = corpus.load(path)
    small = [s for rec, s in runs if rec["design"]["split"] == "calibration"]
    long = [s for rec, s in runs if rec["design"]["split"] == "long"]
    ext = [s for rec, s in runs if rec["design"]["split"] == "extrapolation"]
    cal = small + long  # what a site calibrates from: short and long jobs alike (10-fold CV)
    cfg = config.load(Path("/nonexistent"))  # the shipped defaults
    # The config's priors alone: the shipped priors are fitted on these very runs (``site_protocol``
    # shows what they add, and what they add to a family they never saw)
    prior = bench_priors.config_prior()
    base, coverage = cfg.estimate.buffer, cfg.estimate.coverage
    walls = [wall(s) for _, s in runs]
    small_pixels = statistics.median(s.workload.train_pixels * s.workload.gflops for s in small)
    print(
        f"corpus {path.name}: {len(runs)} real ultralytics CPU runs ({len(small)} calibration, {len(long)} long,"
        f" {len(ext)} extrapolation: median {statistics.median(s.workload.train_pixels * s.workload.gflops for s in ext) / small_pixels:.1f}x"
        f" the calibration runs' FLOP-tokens); wall {min(walls):.0f}-{max(walls):.0f} s"
    )
    models = {
        "seeds T = k x tokens": seeds(base),
        "before the corpus": legacy(prior, base),
        "this model": ours(prior, base, coverage),
    }
    result: dict[str, float] = {}
    cv_label = f"10-fold CV ({len(cal)} runs)"
    for label, fitter in models.items():
        cv = score(cross_validate(fitter, cal))
        pairs, _ = held_out(fitter, small, ext)
        ex = score(pairs)
        print(f"{label}:")
        print(_row(cv_label, cv))
        print(_row("extrapolation (3-10x)", ex))
        predictor = fitter(small)
        if predictor.train is not None:
            tr = [(predictor.train(s) - s.train_seconds) / s.train_seconds for s in ext]
            print(
                f"  {'training time alone, extrap.':<26} MAPE {statistics.fmean(map(abs, tr)):6.1%}"
                f"  bias {statistics.fmean(tr):+6.1%}  (results.csv: no start-up, no final validation)"
            )
        result[f"{label}: cv_mape"], result[f"{label}: extrapolation_mape"] = cv.mape, ex.mape
    final = fitting.fit(cal, prior, DDP, REF, coverage)
    promised = final.coverage or 0.0
    cv_pairs = cross_validate(models["this model"], cal)
    ext_pairs = held_out(models["this model"], small, ext)[0]
    cv, ex, pooled = score(cv_pairs), score(ext_pairs), score(cv_pairs + ext_pairs)
    print(
        f"this model on all {len(cal)} runs: cross-validated median error {final.cv_median:.1%},"
        f" bias {final.cv_bias:+.1%}; limits promise {promised:.0%} coverage (error scale {final.noise_relative or 0:.3f}"
        f" + {final.noise_seconds or 0:.1f} s: actual/predicted up to {final.limit_ratio(60) or 0:.2f} at 1 min,"
        f" {final.limit_ratio(600) or 0:.2f} at 10 min); realised {cv.realised:.1%} in CV, {ex.realised:.1%} extrapolating"
    )
    for line in describe(final)[:1]:
        print(f"  fitted terms: {line}")
    prior_alone = Predictor(lambda s: predict_seconds(s.workload, prior, s.gpus, DDP, REF, s.cpus), lambda s: 0, None)
    prior_mape = statistics.fmean(abs(prior_alone.seconds(s) - wall(s)) / wall(s) for s in cal + ext)
    few = few_runs(models["this model"], small, long + ext)
    print(
        f"few runs (n per model, {FEW_DRAWS} random draws): prior alone MAPE {prior_mape:.1%}; "
        + "; ".join(f"{n}: mean {m:.1%}, worst {w:.1%}" for n, (m, w) in few.items())
    )
    targets = {
        "CV MAPE <= 8%": cv.mape <= 0.08,
        "|bias| <= 3%": abs(cv.bias) <= 0.03,
        "extrapolation MAPE <= 12%": ex.mape <= 0.12,
        f"realised coverage >= promised {promised:.0%}": min(cv.realised, ex.realised) >= promised,
        f"median limit / actual <= 1.4 ({pooled.long_runs} runs >= 60 s, CV and extrapolation)": (
            pooled.limit_ratio or math.inf
        )
        <= 1.4,
        "1-3 runs never worse than the prior": all(w <= prior_mape for _, w in few.values()),
    }
    floor = statistics.median(
        time_limit(wall(s), base) / wall(s) for s, _, _ in cv_pairs + ext_pairs if wall(s) >= LONG
    )
    print(
        f"median limit / actual on the {pooled.long_runs} runs >= 60 s: {pooled.limit_ratio or math.inf:.2f};"
        f" a perfect prediction with the {base:.0%} buffer, in whole minutes, would give {floor:.2f}"
    )
    multipliers = [1 + buffer_for(final, base, pred).value for _, pred, _ in cv_pairs + ext_pairs]
    five = [(limit / wall(s)) for s, _, limit in cv_pairs + ext_pairs if wall(s) >= FIVE_MINUTES]
    print(
        f"buffer multiplier (limit / prediction before whole-minute rounding) at the promised {promised:.0%}:"
        f" median {statistics.median(multipliers):.2f}; limit / actual on the {len(five)} runs of 5 minutes or"
        f" more: median {statistics.median(five) if five else math.nan:.2f}, largest {max(five, default=math.nan):.2f}"
    )
    unmodelled(runs)
    site = site_protocol(runs)
    widening(runs)
    targets |= {
        f"site protocol with the shipped priors, {k.split()[1]} (in-sample): MAPE <= 8%, |bias| <= 4%": v[0] <= 0.08
        and abs(v[1]) <= 0.04
        for k, v in site.items()
        if k.startswith("shipped")
    }
    for name, ok in targets.items():
        print(f"  target {name}: {'met' if ok else 'MISSED'}")
    result.update(
        {
            f"site {k}: {m}": v
            for k, pair in site.items()
            for m, v in zip(("mape", "bias", "p90", "worst"), pair, strict=True)
        }
    )
    result.update(
        {
            "cv_mape": cv.mape,
            "cv_bias": cv.bias,
            "extrapolation_mape": ex.mape,
            "promised": promised,
            "realised_cv": cv.realised,
            "realised_extrapolation": ex.realised,
            "limit_ratio_long": pooled.limit_ratio or math.inf,
        }
    )
    return result


if __name__ == "__main__":
    main()
