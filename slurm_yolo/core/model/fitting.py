"""Fitting the time model to measured runs, and what cross-validation says about the fit (numpy).

The fit is a maximum a posteriori estimate: the error of a run is measured on ``log(pred / actual)``
(relative error on ``|pred - actual| / actual`` biases predictions low: over-predicting can cost
more than 100%, under-predicting never does), down-weighted past ``HUBER`` (a broken job must not
move the model), and every term is pulled toward its prior by a Gaussian penalty in log space
instead of being dropped when a handful of runs cannot tell it apart: with 1-3 runs the prior carries
the terms the runs cannot see, and k (the weakest prior) absorbs the rest; with hundreds the data
decide. The start-up comes from whole-job times (Slurm's elapsed) only; run folders do not have it.

The time limit's buffer is split-conformal, locally adaptive: cross-validated ``log(actual /
predicted)`` is scaled by the run's error scale (a relative part, and seconds of start-up jitter that
weigh on short runs only, both fitted to the same errors), and the quantile of the scaled errors that
covers the configured share of runs (the (n+1)-corrected rank) sets every limit, so the promise rests
on runs the model did not see and a long run is not padded for a short run's jitter. Admin and cron
path only: never imported on the login path or by a hook.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from slurm_yolo.core.model.estimate import MPX, model_factor
from slurm_yolo.core.model.timemodel import (
    FACTOR_FIELDS,
    REFERENCE_IMGSZ,
    Sample,
    TimeModel,
    batch_pixels,
    calibrated_range,
    ddp_factor,
    median,
    predict_seconds,
    predict_train_seconds,
    quantile,
)

HUBER = 0.15  # |log(pred / actual)| beyond which a run counts as an outlier and is down-weighted
FOLDS = 10  # past 2 x FOLDS runs, leave-one-out becomes 10-fold cross-validation
ANCHOR = "yolov8"  # the family whose factor stays at its prior when it is present (k carries its scale)

# Prior spread of each term, in log units (1.0: the prior is right within a factor e, usually). Wide:
# the shipped priors are a GPU site's guesses, and a site's own runs must be able to overrule them.
# A model's own factor is a small correction of its GFLOPs (0.4: within ~50%), a family's may be large.
SPREAD = {
    "overhead": 6.0,
    "epoch": 6.0,
    "val_pass": 6.0,
    "iteration": 6.0,
    "k": 10.0,
    "val_weight": 2.0,
    "startup": 4.0,
    "loader": 6.0,
    "image": 6.0,
    "val_image": 6.0,
    "imgsz_exponent": 1.0,
    "imgsz_curvature": 0.3,
    "batch_exponent": 0.8,
    "iteration_exponent": 1.2,
    "startup_exponent": 0.6,
    "family": 1.0,
    "model": 0.4,
    "step": 1.0,
    "startup_family": 1.0,
}
LOG_TERMS = ("overhead", "epoch", "val_pass", "iteration", "k", "val_weight", "startup", "loader", "image", "val_image")
FIELDS = {
    "overhead": "overhead_seconds",
    "epoch": "epoch_seconds",
    "val_pass": "val_pass_seconds",
    "iteration": "iteration_seconds",
    "k": "k",
    "val_weight": "val_weight",
    "loader": "loader_seconds",
    "startup": "startup_seconds",
    "image": "image_seconds",
    "val_image": "val_image_seconds",
    "imgsz_exponent": "imgsz_exponent",
    "imgsz_curvature": "imgsz_curvature",
    "batch_exponent": "batch_exponent",
    "iteration_exponent": "iteration_exponent",
    "startup_exponent": "startup_exponent",
}
# The spread of each factor group (timemodel.FACTOR_FIELDS), per family or per model.
FACTOR_SPREAD = {"family": "family", "model": "model", "step": "step", "startup": "startup_family"}
LINEAR_TERMS = ("imgsz_exponent", "imgsz_curvature", "batch_exponent", "iteration_exponent", "startup_exponent")
FLOOR = 1e-3  # a prior of 0 s becomes this (log space has no 0); the fit may go far below it. A small
# prior is kept as it is: a GPU's per-image cost outside its loader is far below a millisecond


@dataclass(frozen=True)
class _Design:
    """The runs as arrays: what each term multiplies."""

    epochs: np.ndarray
    val_passes: np.ndarray
    iterations: np.ndarray
    mf: np.ndarray  # model factor
    mf_compute: np.ndarray  # model factor ^ the prior's compute exponent (1 on CPUs: not fitted)
    size: np.ndarray  # imgsz / 640
    batch_pixels: np.ndarray  # batch x imgsz^2 / (16 x 640^2), as timemodel.batch_pixels
    val_batch_pixels: np.ndarray
    train_mpx: np.ndarray  # pixels / 1e6 / DDP speed-up (no model, family or image-size cost)
    val_mpx: np.ndarray
    final_mpx: np.ndarray  # the final validation's, on one device
    loader_images: np.ndarray  # epochs x train images / CPUs (0 when CPUs are unknown)
    train_images: np.ndarray  # epochs x train images
    val_images: np.ndarray  # validation passes x val images
    final_images: np.ndarray  # val images (the final validation)
    factors: dict[str, tuple[np.ndarray, np.ndarray]]  # per group: each run's parameter (-1: none), its prior
    seconds: np.ndarray  # measured training seconds
    total: np.ndarray  # the whole job's seconds (Slurm's elapsed), NaN where unknown (run folders)


class _Params:
    """Names, prior means and spreads of the parameter vector."""

    def __init__(self, prior: TimeModel, families: list[str], models: list[str], startup: bool) -> None:
        self.names: list[str] = []
        mu: list[float] = []
        sd: list[float] = []
        self.prior = prior
        optional = {"loader": prior.loader_seconds > 0, "startup": startup}
        for name in (t for t in LOG_TERMS if optional.get(t, True)):
            self.names.append(name)
            value = getattr(prior, FIELDS[name])
            mu.append(math.log(value if value > 0 else FLOOR))
            sd.append(prior.spreads.get(name, SPREAD[name]))
        for name in LINEAR_TERMS[: len(LINEAR_TERMS) if startup else -1]:
            self.names.append(name)
            mu.append(getattr(prior, FIELDS[name]))
            sd.append(prior.spreads.get(name, SPREAD[name]))
        self.groups = {"family": families, "model": models, "step": families, "startup": families if startup else []}
        for prefix, spread in FACTOR_SPREAD.items():
            for key in self.groups[prefix]:
                self.names.append(f"{prefix}:{key}")
                mu.append(math.log(prior.factor(prefix, key)))
                sd.append(prior.spreads.get(f"{prefix}:{key}", SPREAD[spread]))
        self.mu = np.array(mu)
        self.sd = np.array(sd)
        self.index = {n: i for i, n in enumerate(self.names)}

    def lookup(self, prefix: str, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each run's parameter of a group (-1 where it has none) and the group's prior for it."""
        idx = np.array([self.index.get(f"{prefix}:{k}", -1) for k in keys], dtype=int)
        return idx, np.array([self.prior.factor(prefix, k) for k in keys])

    def model(self, theta: np.ndarray) -> TimeModel:
        values: dict[str, Any] = {
            FIELDS[n]: (math.exp(theta[i]) if n in LOG_TERMS else float(theta[i]))
            for n, i in self.index.items()
            if ":" not in n
        }
        for prefix, field in FACTOR_FIELDS.items():
            factors = dict(getattr(self.prior, field))
            factors.update({k: math.exp(theta[self.index[f"{prefix}:{k}"]]) for k in self.groups[prefix]})
            values[field] = factors
        return replace(self.prior, **values)


def _factor(theta: np.ndarray, d: _Design, prefix: str) -> np.ndarray:
    """Each run's factor of a group: fitted where the group has a parameter, else its prior."""
    idx, fixed = d.factors[prefix]
    return np.where(idx >= 0, np.exp(theta[np.maximum(idx, 0)]), fixed)


def _design(samples: list[Sample], p: _Params, ddp_eff: float, ref: float) -> _Design:
    ws = [s.workload for s in samples]
    by_family, by_model = [w.family for w in ws], [w.model for w in ws]
    train_images = np.array([w.epochs * w.train_images for w in ws], float)
    mf = np.array([model_factor(w.gflops, ref) for w in ws])
    ddp = np.array([ddp_factor(max(1, s.gpus), ddp_eff) for s in samples])
    return _Design(
        epochs=np.array([w.epochs for w in ws], float),
        val_passes=np.array([w.val_passes for w in ws], float),
        iterations=np.array([w.iterations for w in ws], float),
        mf=mf,
        mf_compute=mf**p.prior.compute_exponent,
        size=np.array([max(1, w.imgsz) / REFERENCE_IMGSZ for w in ws]),
        batch_pixels=np.array([batch_pixels(w, gpus=s.gpus) for w, s in zip(ws, samples, strict=True)]),
        val_batch_pixels=np.array([batch_pixels(w, True, s.gpus) for w, s in zip(ws, samples, strict=True)]),
        train_mpx=np.array([w.train_pixels for w in ws]) / MPX / ddp,
        val_mpx=np.array([w.val_pixels for w in ws]) / MPX / ddp,
        final_mpx=np.array([w.final_val_pixels for w in ws]) / MPX,
        loader_images=train_images
        * np.array([1 / s.cpus if s.cpus > 0 else 0.0 for s in samples])
        * np.array([(max(1, w.imgsz) / REFERENCE_IMGSZ) ** p.prior.loader_imgsz_exponent for w in ws])
        * np.array([p.prior.loader_task_factors.get(w.task, 1.0) for w in ws]),  # as predictions apply it
        train_images=train_images,
        val_images=np.array([w.val_passes * w.val_images for w in ws], float),
        final_images=np.array([w.val_images for w in ws], float),
        factors={prefix: p.lookup(prefix, by_model if prefix == "model" else by_family) for prefix in FACTOR_FIELDS},
        seconds=np.array([s.train_seconds for s in samples], float),
        total=np.array([s.total_seconds or math.nan for s in samples], float),
    )


def _predict(theta: np.ndarray, p: _Params, d: _Design) -> tuple[np.ndarray, np.ndarray]:
    """(training seconds, final validation seconds) of every run."""
    g = theta
    i = p.index
    fam = _factor(g, d, "family") * _factor(g, d, "model")
    lsize = np.log(d.size)
    per_mpx = (
        np.exp(g[i["k"]])
        * fam
        * d.mf_compute
        * np.exp(-g[i["imgsz_exponent"]] * lsize + g[i["imgsz_curvature"]] * lsize**2)
    )
    cost = per_mpx * d.batch_pixels ** g[i["batch_exponent"]]
    val_cost = per_mpx * d.val_batch_pixels ** g[i["batch_exponent"]] * np.exp(g[i["val_weight"]])
    compute = cost * d.train_mpx + val_cost * d.val_mpx
    if "loader" in i:
        compute = np.maximum(compute, np.exp(g[i["loader"]]) * d.loader_images)
    val_pass, val_image = np.exp(g[i["val_pass"]]), np.exp(g[i["val_image"]])
    steps = d.iterations * d.mf ** g[i["iteration_exponent"]] * _factor(g, d, "step")
    train = (
        np.exp(g[i["overhead"]])
        + np.exp(g[i["epoch"]]) * d.epochs
        + val_pass * d.val_passes
        + np.exp(g[i["iteration"]]) * steps
        + np.exp(g[i["image"]]) * d.train_images
        + val_image * d.val_images
        + compute
    )
    return train, val_pass + val_image * d.final_images + val_cost * d.final_mpx


def _residuals(theta: np.ndarray, p: _Params, d: _Design, weights: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Log errors of training time (``weights``: the users' and the robust rounds'), then of whole-job
    time (measured training + start-up + final validation: the part a run folder cannot show; ``base``:
    the users' alone), then the prior penalties."""
    train, final = _predict(theta, p, d)
    parts = [np.sqrt(weights) * (np.log(np.maximum(train, 1e-9)) - np.log(d.seconds))]
    if "startup" in p.index:
        known = ~np.isnan(d.total)
        startup = (
            np.exp(theta[p.index["startup"]])
            * d.mf[known] ** theta[p.index["startup_exponent"]]
            * _factor(theta, d, "startup")[known]
        )
        job = startup + d.seconds[known] + final[known]
        parts.append(np.sqrt(base[known]) * (np.log(job) - np.log(d.total[known])))
    return np.concatenate([*parts, (theta - p.mu) / p.sd])


def minimize(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, iterations: int = 60) -> np.ndarray:
    """Levenberg-Marquardt on ``residuals`` from ``theta`` (a numeric Jacobian: the terms are few)."""
    lam = 1e-2
    r = residuals(theta)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = np.zeros_like(theta)
            step[j] = 1e-6
            jac[:, j] = (residuals(theta + step) - r) / 1e-6
        jtj = jac.T @ jac
        grad = jac.T @ r
        while True:
            delta = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-9), -grad)
            trial = theta + delta
            r_trial = residuals(trial)
            c_trial = float(r_trial @ r_trial)
            if c_trial < cost or lam > 1e8:
                break
            lam *= 10
        if c_trial >= cost:
            break
        converged = cost - c_trial < 1e-10 * max(1.0, cost)
        theta, r, cost, lam = trial, r_trial, c_trial, max(lam / 10, 1e-7)
        if converged:
            break
    return theta


def user_weights(samples: list[Sample]) -> np.ndarray:
    """Each run's weight before the robust rounds. A user writes her job summaries herself, so her
    runs together weigh at most as many as the median user's (one user's flood of forged summaries
    counts as one typical user's runs, and Huber then treats it as the outliers it is); with one user,
    or users alike, nothing changes. A run folder an admin chose (no owner) weighs one."""
    counts: dict[int, int] = {}
    for s in samples:
        if s.owner is not None:
            counts[s.owner] = counts.get(s.owner, 0) + 1
    cap = float(np.median(list(counts.values()))) if counts else 1.0
    return np.array([1.0 if s.owner is None else min(1.0, cap / counts[s.owner]) for s in samples])


def _solve(p: _Params, d: _Design, base: np.ndarray, iterations: int = 60) -> np.ndarray:
    """Levenberg-Marquardt on the penalised log residuals, from the ``base`` weights, Huber-reweighted
    between rounds."""
    theta = p.mu.copy()
    weights = base
    for _ in range(3):  # rounds of robust reweighting
        theta = minimize(functools.partial(_residuals, p=p, d=d, weights=weights, base=base), theta, iterations)
        err = np.abs(np.log(np.maximum(_predict(theta, p, d)[0], 1e-9)) - np.log(d.seconds))
        weights = base * np.where(err <= HUBER, 1.0, HUBER / np.maximum(err, 1e-12))
    return theta


def _families(samples: list[Sample]) -> list[str]:
    """Families whose factor the data may move: all seen, but the anchor when it is among them."""
    seen = sorted({s.workload.family for s in samples})
    return [f for f in seen if f != ANCHOR] if ANCHOR in seen else seen[1:] if len(seen) > 1 else []


def fit_terms(
    samples: list[Sample],
    prior: TimeModel,
    ddp_eff: float = 0.9,
    reference_gflops: float = 8.86,
    weights: Sequence[float] | None = None,
) -> TimeModel:
    """The model these runs support, without cross-validation (``fit`` adds it). ``weights``: each
    run's own (a run that shared its node weighs less: ``calibration``), times the users' cap."""
    if not samples:
        return prior
    families = _families(samples)
    models = sorted({s.workload.model for s in samples})
    jobs = sum(1 for s in samples if s.total_seconds)
    p = _Params(prior, families, models, startup=jobs > 0)
    base = user_weights(samples) * (np.ones(len(samples)) if weights is None else np.asarray(weights, float))
    tm = p.model(_solve(p, _design(samples, p, ddp_eff, reference_gflops), base))
    return replace(tm, startup_n=jobs or prior.startup_n, n=len(samples), form="map-log")


def cross_validated(
    samples: list[Sample],
    prior: TimeModel,
    ddp_eff: float = 0.9,
    reference_gflops: float = 8.86,
    folds: int = FOLDS,
    weights: Sequence[float] | None = None,
) -> list[tuple[Sample, float, float]]:
    """(run, predicted, actual) seconds, each predicted by a fit that did not see it: leave-one-out up
    to 2 x ``folds`` runs, else ``folds``-fold (runs dealt round-robin), each ``scored``."""
    n = len(samples)
    k = n if n <= 2 * folds else folds
    out = []
    for f in range(k):
        kept = [i for i in range(n) if i % k != f]
        tm = fit_terms(
            [samples[i] for i in kept],
            prior,
            ddp_eff,
            reference_gflops,
            None if weights is None else [weights[i] for i in kept],
        )
        out += [(s, *scored(s, tm, ddp_eff, reference_gflops)) for s in samples[f::k]]
    return out


def scored(s: Sample, tm: TimeModel, ddp_eff: float, reference_gflops: float) -> tuple[float, float]:
    """(predicted, actual) seconds of a run by ``tm``: a job's whole elapsed, a run folder's training
    time alone, which is all it measured (adding the model's assumed start-up and final validation to
    both sides would hide its error behind them)."""
    if s.total_seconds:
        return predict_seconds(s.workload, tm, s.gpus, ddp_eff, reference_gflops, s.cpus), s.total_seconds
    return predict_train_seconds(s.workload, tm, s.gpus, ddp_eff, reference_gflops, s.cpus), s.train_seconds


def conformal_quantile(scores: list[float], coverage: float) -> tuple[float, float]:
    """(score, coverage it gives): the ceil((n+1) x coverage)-th smallest score, which covers
    ``coverage`` of future runs exchangeable with these; with too few runs for that rank, the
    largest, which covers n / (n+1)."""
    if not scores or not 0 < coverage < 1:
        raise ValueError("a conformal quantile needs scores and a coverage in (0, 1)")
    ordered = sorted(scores)
    n = len(ordered)
    rank = math.ceil((n + 1) * coverage)
    if rank > n:
        return ordered[-1], n / (n + 1)
    return ordered[rank - 1], coverage


def noise_scale(predicted: list[float], log_errors: list[float]) -> tuple[float, float]:
    """(relative, seconds): the error scale sqrt(relative^2 + (seconds / predicted)^2) that fits the
    squared cross-validated log errors best (least squares, both parts >= 0). Start-up jitter is
    seconds, whatever the run; the model's own error is a share of the run. The relative part is
    never below the spread of the longest third of the runs: past the lengths it was calibrated on,
    a run is not promised more accuracy than the longest runs showed."""
    x = np.array([1.0 / max(1.0, p) ** 2 for p in predicted])
    y = np.array(log_errors) ** 2
    design = np.column_stack([np.ones_like(x), x])
    a2, b2 = np.linalg.lstsq(design, y, rcond=None)[0]
    if a2 < 0 or b2 < 0:  # one part alone
        a2, b2 = (0.0, float(x @ y / (x @ x))) if a2 < 0 else (float(y.mean()), 0.0)
    longest = y[np.argsort(predicted)[-max(1, len(y) // 3) :]]
    return max(math.sqrt(a2), math.sqrt(float(longest.mean())), 1e-3), math.sqrt(b2)


def fit(
    samples: list[Sample],
    prior: TimeModel,
    ddp_eff: float = 0.9,
    reference_gflops: float = 8.86,
    coverage: float = 0.99,
) -> TimeModel:
    """The fitted model with its cross-validated error, the error scale of a run by its length, and
    the conformal quantile its limits use (of log errors over that scale: locally adaptive)."""
    return fit_cv(samples, prior, ddp_eff, reference_gflops, coverage)[0]


def fit_cv(
    samples: list[Sample],
    prior: TimeModel,
    ddp_eff: float = 0.9,
    reference_gflops: float = 8.86,
    coverage: float = 0.99,
    weights: Sequence[float] | None = None,
) -> tuple[TimeModel, list[tuple[Sample, float, float]]]:
    """``fit``, with each run's cross-validated (run, predicted, actual) seconds: ``calibrate``
    compares them with the current model's predictions of the same runs."""
    tm = replace(fit_terms(samples, prior, ddp_eff, reference_gflops, weights), covered=calibrated_range(samples))
    if len(samples) < 2:
        return tm, []
    cv = cross_validated(samples, prior, ddp_eff, reference_gflops, weights=weights)
    errors = [(pred - actual) / actual for _, pred, actual in cv]
    predicted = [pred for _, pred, _ in cv]
    logs = [math.log(actual / pred) for _, pred, actual in cv]
    relative, seconds = noise_scale(predicted, logs)
    scaled = replace(tm, noise_relative=relative, noise_seconds=seconds)
    scores = [r / scaled.noise(p) for p, r in zip(predicted, logs, strict=True)]
    z, promised = conformal_quantile(scores, coverage)
    absolute = sorted(abs(e) for e in errors)
    fitted = replace(
        scaled,
        cv_median=median(absolute),
        cv_p90=quantile(absolute, 0.9),
        cv_bias=sum(errors) / len(errors),
        coverage=promised,
        coverage_z=z,
        scores=sorted(round(x, 4) for x in scores),
    )
    return fitted, cv
