"""The time model: what a run costs, term by term (pure functions, no I/O, import-light).

    train_seconds = overhead
                    + epoch_seconds x epochs + val_pass_seconds x val_passes
                    + iteration_seconds x step_factor[family] x iterations x model_factor^iteration_exponent
                    + image_seconds x epochs x train images + val_image_seconds x val_passes x val images
                    + k x (cost(train batch) x train_eff + val_weight x cost(val batch) x val_eff) / ddp(gpus)
    seconds       = startup x startup_factor[family] x model_factor^startup_exponent + train_seconds
                    + val_pass_seconds + val_image_seconds x val images
                    + k x val_weight x cost(val batch) x final_val_eff

Each term is something a run does: a fixed cost inside training (data loaders, first batch), a cost
per epoch (loader restart, metrics, checkpoint) and per validation pass (set-up, NMS), a cost per
optimizer step that grows far slower than the model's FLOPs (and differs by family: on the corpus'
CPU runs yolo26 cost ~1.24x yolov8 per step), a cost per image that compute does not hide
(decoding, augmenting, NMS, metrics), and compute. ``*_eff`` are millions of pixels of work
(pixels x GFLOPs / reference GFLOPs x family factor x the model's own factor, where its runs showed
one) and ``cost(b) = imgsz_cost(imgsz) x (b x imgsz^2 / (16 x 640^2)) ^ batch_exponent`` for a real
batch b (no more images than the split has; validation's is twice
training's): small images cost more per pixel (measured ~1.5x at 96 px on CPU), and a batch's pixels
change the cost per pixel (on a CPU big batches spill caches: > 0; on a GPU they fill it better:
< 0). The start-up (process start, model build, saving) is not in results.csv; jobs teach it. The
fit (``fitting``, numpy) never runs on the login path; this module only predicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from slurm_yolo.core.model.estimate import FAMILY_PRIOR, MPX, Workload, model_factor

REFERENCE_IMGSZ = 640  # where the model table's GFLOPs were measured: cost(640) = 1
REFERENCE_BATCH = 16  # ultralytics' default batch: the batch term is 1 at 16 images of 640 px
# The per-family and per-model factor groups and the TimeModel field each lives in.
FACTOR_FIELDS = {
    "family": "family_factors",
    "model": "model_factors",
    "step": "step_factors",
    "startup": "startup_factors",
}


@dataclass(frozen=True)
class TimeModel:
    """A partition's calibrated time model, with the evidence behind it."""

    k: float  # seconds per million pixels of work (s/Mpx) per GPU, at imgsz 640
    overhead_seconds: float
    val_weight: float
    iteration_seconds: float  # per optimizer step of the reference model
    startup_seconds: float  # for the reference model; x model factor ^ startup_exponent (build, load, save)
    epoch_seconds: float = 0.0
    val_pass_seconds: float = 0.0
    imgsz_exponent: float = 0.0
    imgsz_curvature: float = 0.0  # x exp(this x ln(imgsz / 640)^2): > 0 makes the cost per pixel U-shaped in imgsz
    batch_exponent: float = (
        0.0  # cost per pixel ~ (batch pixels / 16 x 640^2) ^ this: > 0 where big batches spill caches
    )
    iteration_exponent: float = 0.0
    startup_exponent: float = 0.0
    # compute ~ model factor ^ this: 1 on CPUs; on a GPU a small model leaves it idle, so compute grows
    # far slower than FLOPs (published single-V100 COCO times: 46x the FLOPs, ~8x the time)
    compute_exponent: float = 1.0
    loader_seconds: float = 0.0  # CPU-seconds of data loading per training image at 640 px; 0: not modelled
    loader_imgsz_exponent: float = 0.0  # x (imgsz / 640) ^ this: mosaic and warps cost by the pixels they make
    # x this for a task's images (``Workload.task``: segment's masks, pose's keypoints); 1 for a task not in it
    loader_task_factors: dict[str, float] = field(default_factory=dict)
    image_seconds: float = 0.0  # per training image, outside compute (decode, augment, collate)
    val_image_seconds: float = 0.0  # per validated image, outside compute (decode, NMS, metrics)
    family_factors: dict[str, float] = field(default_factory=dict)  # compute per pixel, vs the anchor family
    model_factors: dict[str, float] = field(default_factory=dict)  # compute of a model vs its GFLOPs x family
    step_factors: dict[str, float] = field(default_factory=dict)  # per family: cost per iteration
    startup_factors: dict[str, float] = field(default_factory=dict)  # per family: build and save
    # How sure the prior is of each term, in log units (``fitting.SPREAD``'s names, factors as
    # "family:yolo11"): the shipped corpus priors (``priors``) set it; absent terms keep fitting.SPREAD
    spreads: dict[str, float] = field(default_factory=dict)
    form: str = "prior"
    n: int = 0
    startup_n: int = 0  # whole-job runs behind startup_seconds (jobs, not run folders)
    cv_median: float | None = None  # median |pred - actual| / actual of the whole job, cross-validated
    cv_p90: float | None = None
    cv_bias: float | None = None  # mean signed (pred - actual) / actual: < 0 predicts low
    coverage: float | None = None  # share of runs the limit covers: prediction x limit_ratio(prediction)
    coverage_z: float | None = None  # conformal quantile of cross-validated log(actual / predicted) / noise
    noise_relative: float | None = None  # the error scale's relative part (the model's own error)
    noise_seconds: float | None = None  # its absolute part (start-up jitter): weighs on short runs only
    # The cross-validated log(actual / predicted) / noise, sorted: what a limit the user gives covers
    scores: list[float] = field(default_factory=list)
    # What the fit's runs cover (``calibrated_range``): a plan outside it is an extrapolation, and says so
    covered: dict[str, Any] = field(default_factory=dict)
    # The card it was fitted on (``gputypes.card_key``): a fit is used only while the partition has that
    # card. '' in models saved before cards were recorded (``fitted_on`` infers theirs).
    card: str = ""

    def fitted_on(self) -> str:
        """The card this model was fitted on; for a model saved before cards were recorded, "cpu" where
        its compute grows with FLOPs as on CPUs (exponent 1: a GPU's grows far slower), else ''."""
        if self.card:
            return self.card
        return "cpu" if self.n and self.compute_exponent >= 0.99 else ""

    def noise(self, seconds: float) -> float:
        """The cross-validated error scale, in log units, of a run predicted to take ``seconds``: a few
        seconds of jitter are a large share of a one-minute job and nothing in a ten-hour one."""
        a, b = self.noise_relative or 0.0, self.noise_seconds or 0.0
        return math.sqrt(a * a + (b / max(1.0, seconds)) ** 2)

    def limit_ratio(self, seconds: float, widening: float = 1.0) -> float | None:
        """actual / predicted that the limit must allow for a run this long (None: not cross-validated),
        its error scale ``widening`` times wider outside the calibrated range (``range_widening``)."""
        if self.coverage_z is None:
            return None
        return math.exp(self.coverage_z * self.noise(seconds) * widening)

    def covers(self, ratio: float, seconds: float, widening: float = 1.0) -> float | None:
        """The share of runs like the cross-validated ones that a limit of ``ratio`` x the prediction
        of a run this long covers (conformal: of n + 1); None without cross-validated runs."""
        if not self.scores or ratio <= 0:
            return None
        score = math.log(ratio) / (self.noise(seconds) * widening)
        return sum(1 for s in self.scores if s <= score) / (len(self.scores) + 1)

    def family_factor(self, family: str) -> float:
        return self.family_factors.get(family, FAMILY_PRIOR.get(family, 1.0))

    def factor(self, group: str, key: str) -> float:
        """A factor of a group (``FACTOR_FIELDS``) for a family or a model: 1 where the model has
        none, but a family's compute, which falls back to the shipped family prior."""
        if group == "family":
            return self.family_factor(key)
        return float(getattr(self, FACTOR_FIELDS[group]).get(key, 1.0))

    def compute_factor(self, model: str, family: str) -> float:
        """Cost per GFLOP-pixel of a model, relative to the anchor family: its family's factor, and the
        model's own where its runs showed that its GFLOPs over- or understate what it costs."""
        return self.family_factor(family) * self.factor("model", model)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimeModel:
        """A stored model; keys of older versions that this one no longer has are dropped."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        ratio = data.get("coverage_ratio")
        if ratio and "coverage_z" not in data:  # one ratio for every run length: an error scale of 1
            kept.update(coverage_z=math.log(ratio), noise_relative=1.0, noise_seconds=0.0)
        return cls(**kept)


class Sample(NamedTuple):
    """One finished run: its workload, its GPUs and CPUs, how long training (and the job) took."""

    workload: Workload
    gpus: int
    train_seconds: float
    key: str = ""
    total_seconds: float | None = None  # the whole job (Slurm's elapsed), when a job reported it
    cpus: int = 0  # CPUs the run had (0: unknown)
    # What the run asked of the options the model has no term for yet (``RECORDED_OPTIONS``), as a
    # run folder's args.yaml says: kept for a fit that learns them (a GPU corpus); None: unknown (a job's
    # feedback)
    options: dict[str, bool | int | str] | None = None
    owner: int | None = None  # the uid whose job summary this is (None: a run folder an admin chose)


# ultralytics options the corpus showed no term for on CPU (``bench accuracy``) but a GPU site may:
# recorded with each run-folder sample, never read by today's fit
RECORDED_OPTIONS = ("rect", "cache", "amp", "workers", "close_mosaic")


def ddp_factor(gpus: int, efficiency: float) -> float:
    """Effective GPU count: each doubling keeps ``efficiency`` of the ideal speed-up."""
    if gpus <= 1:
        return 1.0
    return gpus * efficiency ** math.log2(gpus)


def batch_pixels(w: Workload, val: bool = False, gpus: int = 1) -> float:
    """Pixels of one GPU's real batch over the reference batch's: ultralytics splits the batch over
    DDP's GPUs, validates with twice the training batch, and a batch never holds more images than its
    split has."""
    batch = max(1, w.batch // max(1, gpus))
    images = min(2 * batch, w.val_images) if val else min(batch, w.train_images)
    return max(1, images) * w.imgsz**2 / (REFERENCE_BATCH * REFERENCE_IMGSZ**2)


def imgsz_cost(imgsz: float, exponent: float, curvature: float) -> float:
    """Cost per pixel at this image size over 640 px's: (imgsz / 640) ^ -exponent x exp(curvature x
    ln(imgsz / 640)^2). The curvature lets it fall and rise again (on the corpus' CPU runs a 96 px
    pixel cost ~1.5x a 640 px one and a 320 px one less than either)."""
    x = math.log(max(1.0, imgsz) / REFERENCE_IMGSZ)
    return math.exp(-exponent * x + curvature * x * x)


def pixel_cost(w: Workload, tm: TimeModel, reference_gflops: float, val: bool = False, gpus: int = 1) -> float:
    """Seconds-per-k of one effective million pixels (Mpx) of this workload (model, family, image size,
    one GPU's batch pixels: training's or validation's)."""
    size = imgsz_cost(w.imgsz, tm.imgsz_exponent, tm.imgsz_curvature)
    batch = batch_pixels(w, val, gpus) ** tm.batch_exponent
    mf = model_factor(w.gflops, reference_gflops) ** tm.compute_exponent
    return mf * tm.compute_factor(w.model, w.family) * size * batch / MPX


def effective_mpx(w: Workload, tm: TimeModel, reference_gflops: float, gpus: int = 1) -> tuple[float, float, float]:
    """(train, in-training val, final val) effective millions of pixels, image-size cost included."""
    train, val = pixel_cost(w, tm, reference_gflops, gpus=gpus), pixel_cost(w, tm, reference_gflops, True, gpus)
    return w.train_pixels * train, w.val_pixels * val, w.final_val_pixels * val


class Components(NamedTuple):
    """The parts of a training-time prediction (seconds), for ``--explain`` and the k feedback."""

    fixed: float  # overhead, per-epoch, per-validation, per-iteration and per-image costs
    compute: float  # k x effective pixels / DDP speed-up
    loader: float  # data loading when it, not compute, bounds an epoch (0 unless modelled)


def components(
    w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, reference_gflops: float, cpus: int = 0
) -> Components:
    """Training time split into what k scales and what it does not."""
    tr, va, _ = effective_mpx(w, tm, reference_gflops, max(1, gpus))
    compute = tm.k * (tr + tm.val_weight * va) / ddp_factor(max(1, gpus), ddp_eff)
    steps = w.iterations * model_factor(w.gflops, reference_gflops) ** tm.iteration_exponent
    fixed = (
        tm.overhead_seconds
        + tm.epoch_seconds * w.epochs
        + tm.val_pass_seconds * w.val_passes
        + tm.iteration_seconds * tm.factor("step", w.family) * steps
        + tm.image_seconds * w.epochs * w.train_images
        + tm.val_image_seconds * w.val_passes * w.val_images
    )
    per_image = (
        tm.loader_seconds
        * (max(1, w.imgsz) / REFERENCE_IMGSZ) ** tm.loader_imgsz_exponent
        * tm.loader_task_factors.get(w.task, 1.0)
    )
    loader = per_image * w.epochs * w.train_images / cpus if tm.loader_seconds > 0 and cpus > 0 else 0.0
    return Components(fixed, compute, loader)


def predict_train_seconds(
    w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, reference_gflops: float, cpus: int = 0
) -> float:
    """Training time alone: what results.csv's ``time`` measures. A data-loader-bound run (a GPU site
    that fitted ``loader_seconds``) takes the loader's time instead of the compute's."""
    c = components(w, tm, gpus, ddp_eff, reference_gflops, cpus)
    return c.fixed + max(c.compute, c.loader)


def final_val_seconds(w: Workload, tm: TimeModel, reference_gflops: float) -> float:
    """The validation ultralytics runs after training (best.pt, one device): not in results.csv."""
    _, _, final = effective_mpx(w, tm, reference_gflops)
    return tm.val_pass_seconds + tm.val_image_seconds * w.val_images + tm.k * tm.val_weight * final


def predict_seconds(
    w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, reference_gflops: float, cpus: int = 0
) -> float:
    """The whole job: start-up, training, final validation."""
    train = predict_train_seconds(w, tm, gpus, ddp_eff, reference_gflops, cpus)
    return startup_seconds(w, tm, reference_gflops) + train + final_val_seconds(w, tm, reference_gflops)


def startup_seconds(w: Workload, tm: TimeModel, reference_gflops: float) -> float:
    """Outside training: process start, model build, weights saved; bigger models take longer."""
    return (
        tm.startup_seconds
        * tm.factor("startup", w.family)
        * model_factor(w.gflops, reference_gflops) ** tm.startup_exponent
    )


def median(values: list[float]) -> float:
    """The median (statistics.median, without its import cost on the login path)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def quantile(values: list[float], q: float) -> float:
    """The ceil(q x n)-th smallest value (no interpolation: a value some run really had)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Buffer(NamedTuple):
    """The time-limit headroom, the coverage it promises, and why."""

    value: float
    reason: str
    coverage: float | None = None  # share of runs like the calibration ones the limit covers


FEW_RUNS = 5  # below this, the quantile rests on too little: at least FEW_RUNS_BUFFER


FEW_RUNS_BUFFER = 0.5
UNCALIBRATED = "uncalibrated partition: prior model, limit doubled"  # the buffer's reason, which refusals name


def buffer_for(tm: TimeModel, base: float, seconds: float, widening: float = 1.0) -> Buffer:
    """The headroom that covers ``tm.coverage`` of cross-validated runs for a run predicted to take
    ``seconds`` (split-conformal on errors scaled by the run's error scale, ``widening`` times wider
    outside the calibrated range), never below ``base``: the limit must not kill a job, and no more
    than that."""
    if tm.n == 0:
        return Buffer(max(base, 1.0), UNCALIBRATED)
    ratio = tm.limit_ratio(seconds, widening)
    if ratio is None or tm.coverage is None:
        return Buffer(max(base, FEW_RUNS_BUFFER), f"only {tm.n} calibration run(s): no cross-validation yet")
    needed = ratio - 1
    why = f"covers {tm.coverage:.0%} of {tm.n} cross-validated runs (actual/predicted up to {ratio:.2f} for a run this long"
    why += f", error scale x{widening:.2f} outside the calibrated range)" if widening > 1 else ")"
    if math.isclose(tm.coverage, tm.n / (tm.n + 1)):  # the config asked for more than this many runs can show
        why += f"; {tm.n} runs can promise no more than {tm.coverage:.0%} (estimate.coverage asks more: each run adds)"
    if tm.n < FEW_RUNS and needed < FEW_RUNS_BUFFER:
        return Buffer(
            max(base, FEW_RUNS_BUFFER),
            f"{why}; fewer than {FEW_RUNS} runs: at least {FEW_RUNS_BUFFER:.2f}",
            tm.coverage,
        )
    if needed > base:
        return Buffer(needed, why, tm.coverage)
    return Buffer(base, f"configured {base:.2f} ({why})", tm.coverage)


def calibrated_range(samples: Sequence[Sample]) -> dict[str, Any]:
    """The range a fit's runs cover: imgsz, batch pixels (``batch_pixels``: over the reference batch's),
    training seconds and GPUs (lowest and highest), and the model families and models they trained."""
    if not samples:
        return {}
    ws = [s.workload for s in samples]

    def span(values: list[float]) -> list[float]:
        return [min(values), max(values)]

    return {
        "imgsz": span([w.imgsz for w in ws]),
        "batch_pixels": span([batch_pixels(w) for w in ws]),
        "train_seconds": span([s.train_seconds for s in samples]),
        "gpus": span([s.gpus for s in samples]),
        "families": sorted({w.family for w in ws}),
        "models": sorted({w.model for w in ws}),
    }


def outside_range(tm: TimeModel, w: Workload, gpus: int, train_seconds: float) -> list[str]:
    """How a plan lies outside the range its model's runs cover (``calibrated_range``), one phrase per
    dimension: an extrapolation the model's cross-validated error does not vouch for. Empty inside it,
    or for a model without a recorded range (a prior, or one fitted before ranges were kept)."""
    r = tm.covered
    if not r:
        return []
    out = []
    for key, value, unit in (
        ("imgsz", w.imgsz, " px"),
        ("batch_pixels", batch_pixels(w), "x 16 x 640^2"),
        ("train_seconds", train_seconds, " s"),
        ("gpus", gpus, " GPU(s)"),
    ):
        low, high = r.get(key) or (value, value)
        if not low <= value <= high:
            out.append(f"{key.replace('_', ' ')} {value:.6g}{unit}, outside the calibrated {low:.6g}-{high:.6g}")
    if w.family not in r.get("families", [w.family]):
        out.append(f"model family {w.family}, not among the calibrated {', '.join(r['families'])}")
    return out


# How much wider the error scale is outside the calibrated range (``bench accuracy`` measures it: fitted
# on part of the corpus, predicting the rest): x(1 + WIDEN_PER_LOG x the log-distance beyond the range
# of imgsz and batch pixels (measured 0.36-0.54 per unit above it, none below: both sides widen), and
# x(1 + WIDEN_FAMILY) for a family the fit never saw (measured x0.88-1.20). Longer runs of the same
# kind did not need it (3-10x bigger: 7.5% against 7.0% cross-validated).
WIDEN_PER_LOG = 0.5
WIDEN_FAMILY = 0.2


def range_widening(tm: TimeModel, w: Workload) -> float:
    """The factor on the error scale of a plan outside its model's calibrated range (1 inside it, and
    for a model without a recorded range)."""
    r = tm.covered
    if not r:
        return 1.0
    distance = 0.0
    for key, value in (("imgsz", float(max(1, w.imgsz))), ("batch_pixels", batch_pixels(w))):
        low, high = r.get(key) or (value, value)
        distance += max(0.0, math.log(value / high), math.log(low / value))
    unseen = w.family not in r.get("families", [w.family])
    return (1 + WIDEN_PER_LOG * distance) * (1 + WIDEN_FAMILY if unseen else 1.0)


def range_text(tm: TimeModel) -> str:
    """The calibrated range in one line (empty without one)."""
    r = tm.covered
    if not r:
        return ""
    return (
        f"calibrated range: imgsz {r['imgsz'][0]:g}-{r['imgsz'][1]:g}, batch pixels {r['batch_pixels'][0]:.3g}-"
        f"{r['batch_pixels'][1]:.3g}x 16 x 640^2, training {r['train_seconds'][0]:.0f}-{r['train_seconds'][1]:.0f} s, "
        f"{r['gpus'][0]:g}-{r['gpus'][1]:g} GPU(s), families {', '.join(r['families'])}"
    )


def startup_note(tm: TimeModel) -> str:
    """Where a model's start-up comes from: only whole jobs (Slurm's elapsed) show it."""
    if tm.startup_n:
        return f"start-up {tm.startup_seconds:.1f} s, learned from {tm.startup_n} job(s)"
    return f"start-up {tm.startup_seconds:.1f} s is the prior: run folders cannot show it, finished jobs will teach it"


def describe(tm: TimeModel) -> list[str]:
    """The model in two lines an admin can read: its terms, and the evidence behind them."""
    terms = (
        f"k {tm.k:.4g} s/Mpx (x (imgsz/640)^-{tm.imgsz_exponent:.2f} x exp({tm.imgsz_curvature:.2f} x"
        f" ln(imgsz/640)^2) x batch pixels^{tm.batch_exponent:.2f}),"
        f" overhead {tm.overhead_seconds:.2f} s,"
        f" {tm.epoch_seconds:.2f} s/epoch, {tm.val_pass_seconds:.2f} s/val pass,"
        f" {tm.iteration_seconds * 1000:.3g} ms/iteration (x model factor^{tm.iteration_exponent:.2f}),"
        f" {tm.image_seconds * 1000:.3g} ms/train image, {tm.val_image_seconds * 1000:.3g} ms/val image,"
        f" val weight {tm.val_weight:.2f}, start-up {tm.startup_seconds:.1f} s (x model factor^{tm.startup_exponent:.2f})"
    )
    if tm.compute_exponent != 1:
        terms += f", compute x model factor^{tm.compute_exponent:.2f}"
    if tm.loader_seconds > 0:
        terms += f", loader {tm.loader_seconds * 1000:.3g} CPU-ms/image"
        if tm.loader_imgsz_exponent:
            terms += f" (x (imgsz/640)^{tm.loader_imgsz_exponent:.2f})"
    for label, factors in (
        ("families", tm.family_factors),
        ("models", tm.model_factors),
        ("per-step", tm.step_factors),
        ("start-up", tm.startup_factors),
    ):
        if factors:
            terms += f"; {label} " + ", ".join(f"{f} {v:.2f}" for f, v in sorted(factors.items()))
    short, long = tm.limit_ratio(60), tm.limit_ratio(3600)
    if tm.cv_median is None or tm.cv_bias is None or tm.coverage is None or short is None or long is None:
        return [terms, f"evidence: {tm.n} run(s), too few to cross-validate"]
    evidence = (
        f"evidence: {tm.n} runs; cross-validated error median {tm.cv_median:.1%}, p90 {tm.cv_p90 or 0:.1%},"
        f" bias {tm.cv_bias:+.1%}; limits cover {tm.coverage:.0%} (actual/predicted up to {short:.2f} for a"
        f" 1-minute run, {long:.2f} for a 1-hour run)"
    )
    return [terms, evidence]
