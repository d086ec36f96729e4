"""Estimate + calibration + cluster state -> a submission plan (pure: no I/O, no Slurm).

The plan is everything ``yolo-sbatch`` decides: partition, GPUs, GRES (whole GPUs, or shards for
light jobs), QOS tier, the predicted run time and a time limit with its buffer, and the reasons,
which ``--explain`` prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

from slurm_yolo.core import gputypes, sizing
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.config import Config, Partition
from slurm_yolo.core.durations import fmt_minutes, seconds_text
from slurm_yolo.core.errors import SlurmError, UsageError
from slurm_yolo.core.limits import MAX_LIMIT_SECONDS, SIGNAL_MIN_LIMIT, time_limit
from slurm_yolo.core.model import gpu_priors
from slurm_yolo.core.model.estimate import Workload, fmt_pixels, images_640, model_factor, pixels
from slurm_yolo.core.model.timemodel import (
    UNCALIBRATED,
    Buffer,
    TimeModel,
    buffer_for,
    components,
    ddp_factor,
    describe,
    final_val_seconds,
    outside_range,
    predict_seconds,
    predict_train_seconds,
    range_text,
    range_widening,
    startup_note,
)
from slurm_yolo.slurm.parsers import WillRun


class Request(NamedTuple):
    """What the user asked of the plan beyond the training command."""

    partition: str | None  # a name, "auto", or None: auto over the configured partitions, else Slurm's default
    gpus: int | None = None
    deadline_seconds: float | None = None
    priority: str = "dev"
    prefer: str = "soonest"  # --partition auto: the earliest finish; "cheapest": the least money (else hold);
    # "fastest": the shortest predicted run
    autobatch: float = 0.0  # batch=-1 or a fraction: the share of GPU memory AutoBatch fills (0: a batch given)
    cpus_per_gpu: int = 0  # --cpus-per-gpu (0: the plan's, from the loader's need, the site's floor, the node)
    cache: str = ""  # ultralytics' cache= as its trainer reads it: "ram", "disk" or ''
    time_limit_seconds: float | None = None  # -t/--time: the user's own limit instead of the plan's
    train_hours: float | None = None  # ultralytics' time=: it stops training after these hours (None, 0: no cap)


@dataclass(frozen=True)
class Plan:
    """A fully decided submission."""

    partition: str
    gpus: int
    gres: str
    shard: bool
    shard_share: float  # the share of one GPU a shard job gets (0: whole GPUs)
    qos: str
    priority: str
    # The work, in pixels (``estimate.fmt_pixels``): never budget tokens, which are ``*_tokens``
    pixels: float
    train_pixels: float
    val_pixels: float
    work_pixels: float  # pixels x the model's FLOPs factor: what the time model predicts from
    model_factor: float
    family_factor: float
    k: float
    k_source: str
    predicted_seconds: float
    predicted_train_seconds: float
    buffer: float
    buffer_reason: str
    coverage: float | None  # share of runs like the model's the limit is promised to cover
    time_limit_seconds: int
    workload: Workload
    explain: list[str] = field(default_factory=list)
    outside_range: list[str] = field(default_factory=list)  # where the plan leaves its model's calibrated range
    range_widening: float = 1.0  # the buffer's error scale, widened outside that range (timemodel.range_widening)
    expected_start: int | None = None  # epoch seconds, from Slurm's scheduler (``--partition auto``)
    feed: str = ""  # a GPU its job's CPUs cannot feed: the one line that says so, with the CPUs that would
    memory_warning: str = ""  # a batch past the card's memory, within the memory model's error: the one line
    cpus: int = 0  # --cpus-per-task (sizing.cpus: the loader's need within the site's floor and the node)
    memory_mb: int = 0  # --mem (0: not asked: the cluster's default, or job.mem_per_cpu_mb)
    short_limit: str = ""  # the user's own limit (-t) is likely too short: the one line that says so

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["workload"] = self.workload.to_dict()
        return d


MAX_CPUS_PER_GPU = 256  # what --cpus-per-gpu takes


def _gpus(
    w: Workload, tm: TimeModel, part: Partition, req: Request, devices: int | None, ref: float
) -> tuple[int, str]:
    limit = part.gpus_per_node
    if req.gpus is not None:
        if req.gpus < 1:
            raise UsageError(f"--gpus {req.gpus}: at least 1")
        if req.gpus > limit and part.gpu_type:
            raise UsageError(
                f"--gpus {req.gpus}: partition {part.name} has {limit} GPUs per node: ask at most {limit},"
                " or another partition (-p auto chooses)"
            )
        return req.gpus, "--gpus"
    if req.deadline_seconds is not None:
        deadline = seconds_text(req.deadline_seconds)
        if req.deadline_seconds < tm.startup_seconds:
            raise UsageError(
                f"--deadline {deadline} is shorter than the job's start-up alone on {part.name}"
                f" ({seconds_text(tm.startup_seconds)}): give a longer one"
            )
        for g in range(1, max(1, limit) + 1):
            if predict_seconds(w, tm, g, part.ddp_efficiency, ref) <= req.deadline_seconds:
                return g, f"fewest GPUs that finish within the deadline ({deadline})"
        best = predict_seconds(w, tm, max(1, limit), part.ddp_efficiency, ref)
        raise UsageError(
            f"--deadline {deadline} cannot be met on {part.name}: "
            f"needs {seconds_text(best)} even with {max(1, limit)} GPUs; give a longer one, or fewer epochs or images"
        )
    if devices:
        if devices > limit and part.gpu_type:  # Slurm would keep it pending for ever (PartitionConfig)
            raise UsageError(
                f"device= names {devices} GPUs: partition {part.name} has {limit} GPUs per node: name at"
                f" most {limit}, or another partition (-p auto chooses)"
            )
        return devices, "device= of the command"
    return 1, "default"


def _head(w: Workload, tm: TimeModel, k_source: str, ref: float) -> list[str]:
    """--explain's first lines: the work (images, pixels, the model's FLOPs) and the time model."""
    mf, ff = model_factor(w.gflops, ref), tm.compute_factor(w.model, w.family)
    px = pixels(w, tm.val_weight)
    return [
        f"images: {w.train_images} train x {w.epochs} epochs at imgsz {w.imgsz}, {w.val_images} val"
        f" ({w.val_passes} passes + final), batch {w.batch}, {w.iterations} iterations",
        f"pixels per epoch: {fmt_pixels(w.train_images * w.imgsz**2)} train;"
        f" run: {fmt_pixels(px)} = {images_640(px)} 640-equivalent images"
        f" (val weight {tm.val_weight:.2f})",
        f"model: {w.model} {w.gflops:.2f} GFLOPs ({w.model_source}), factor {mf:.2f} x family {w.family} {ff:.2f}"
        + (" (with the model's own)" if w.model in tm.model_factors else "")
        + f" -> work {fmt_pixels(px * mf * ff)} (what the time model predicts from; budget tokens are charged"
        " for GPU time)",
        f"time model: {k_source}",
        *(f"  {line}" for line in describe(tm)),
        *([f"  {covered}"] if (covered := range_text(tm)) else []),
        *([f"  {startup_note(tm)} (in the prediction, and so in the limit)"] if tm.n and not tm.startup_n else []),
    ]


def plan_partition(
    w: Workload,
    tm: TimeModel,
    k_source: str,
    part: Partition,
    req: Request,
    config: Config,
    devices: int | None = None,
) -> Plan:
    """The plan on one partition. A refusal carries the work and the time model worked out before it
    (``explain``), for ``--explain`` to show."""
    try:
        return _plan(w, tm, k_source, part, req, config, devices)
    except UsageError as e:
        e.explain = (*_head(w, tm, k_source, config.estimate.reference_gflops), *e.explain)
        raise


def _plan(
    w: Workload, tm: TimeModel, k_source: str, part: Partition, req: Request, config: Config, devices: int | None
) -> Plan:
    ref = config.estimate.reference_gflops
    card = gputypes.card(part)
    gpu = card.type is not None and card.memory_gb > 0  # a known card: its memory bounds the batch
    batch_line: list[str] = []
    if gpu and req.autobatch > 0:
        w, batch_line = _autobatch(w, card, req.autobatch, ref)
    gpus, gpus_why = _gpus(w, tm, part, req, devices, ref)
    checked, memory_warning = _check_memory(w, gpus, card, part, ref, bool(batch_line)) if gpu else ([], "")
    memory_lines = [*batch_line, *checked]
    light = config.light
    shard = (
        gpus == 1
        and part.shards_per_gpu > 0
        and w.gflops <= light.max_model_gflops
        and w.batch * w.imgsz**2 <= light.max_batch_pixels
        and _fits_share(w, card, light.gpu_share, part.shards_per_gpu, ref)
    )
    share = max(1, math.ceil(light.gpu_share * part.shards_per_gpu)) / part.shards_per_gpu if shard else 0.0
    whole_for_cpus = shard and not sizing.fits_shard(w, tm, part, req.cpus_per_gpu, share, ref)
    if whole_for_cpus:
        shard, share = False, 0.0  # its loader needs more CPUs than a shard's share of the node: a whole GPU
    cpus_per_gpu, cores, cpus_why = sizing.cpus(
        w, tm, part, gpus, req.cpus_per_gpu, config.job.cpus_per_gpu, ref, share
    )
    cpus = cpus_per_gpu * gpus
    mem_mb, mem_why = (
        sizing.memory_mb(w, cpus_per_gpu, gpus, req.cache, part, share) if card.type is not None else (0, "")
    )
    # A shard of a known card computes at its share while the card's other shards train too (Slurm's
    # shards time-slice one GPU): planned at that share, as its CPUs are (device-node GPUs train on CPUs)
    timed = replace(tm, k=tm.k / share) if share and card.type is not None else tm
    predicted = predict_seconds(w, timed, gpus, part.ddp_efficiency, ref, cores * gpus)
    train = predict_train_seconds(w, timed, gpus, part.ddp_efficiency, ref, cores * gpus)
    widening = range_widening(tm, w)
    capped: list[str] = []
    cap = (req.train_hours or 0.0) * 3600
    if cap > 0:
        predicted, train, capped = _time_capped(w, timed, ref, predicted, train, cap)
    buf = buffer_for(tm, config.estimate.buffer, predicted, widening)
    limit = time_limit(predicted, buf.value)
    if capped:  # the hours ultralytics trains are certain: the buffer is for start-up and validation alone
        limit = max(60, math.ceil((cap + (predicted - cap) * (1 + buf.value)) / 60) * 60)
        buf = Buffer(limit / predicted - 1, f"{buf.reason}, on all but the {fmt_minutes(cap)} time= trains")
    short_limit = ""
    if req.time_limit_seconds is not None:
        buf, limit, short_limit = _own_limit(tm, req.time_limit_seconds, predicted, widening)
    if limit > MAX_LIMIT_SECONDS:
        e = UsageError(
            f"the job would need a time limit of {limit / 86400:.0f} days on {part.name} (predicted"
            f" {predicted / 86400:.1f} days): more than a year; train fewer epochs or images, or on more GPUs"
            + (
                f" ({part.name} is uncalibrated, so the limit is the prediction doubled: -t sets your own)"
                if buf.reason == UNCALIBRATED and predicted <= MAX_LIMIT_SECONDS
                else ""
            )
        )
        e.explain = (
            f"time: {fmt_minutes(predicted)} predicted ({fmt_minutes(train)} training) on {gpus} GPU(s) [{gpus_why}]",
            f"buffer: {buf.value:.2f} ({buf.reason}) -> time limit {limit // 60} min",
        )
        raise e

    gtype = f"{part.gpu_type}:" if part.gpu_type else ""
    units = max(1, math.ceil(light.gpu_share * part.shards_per_gpu))
    gres = f"shard:{gtype}{units}" if shard else f"gpu:{gtype}{gpus}"

    qos_cfg = config.qos
    if req.priority not in ("prod", "dev", "explore"):
        raise UsageError(f"--priority {req.priority}: one of prod, dev, explore")
    short = limit <= qos_cfg.short_max_minutes * 60 and req.priority != "explore"
    qos = qos_cfg.short if short else qos_cfg.of(req.priority)

    feed = _feed_line(w, tm, part, gpus, cpus_per_gpu, cores, ref, share) if card.type is not None else ""
    shape = sizing.shape_text(part, _shape_source(config.partitions.get(part.name)))
    mf = model_factor(w.gflops, ref)
    ff = tm.compute_factor(w.model, w.family)
    px = pixels(w, tm.val_weight)
    eff = px * mf * ff
    explain = [
        *_head(w, tm, k_source, ref),
        *(
            [
                f"  outside it: {'; '.join(outside)} (an extrapolation: "
                + (
                    f"the limit's error scale is widened x{widening:.2f} for it)"
                    if widening > 1
                    else "the cross-validated error says nothing of it)"
                )
            ]
            if (outside := outside_range(tm, w, gpus, train))
            else []
        ),
        *([unknown] if (unknown := gputypes.unknown_line(part)) and unknown not in k_source else []),
        f"time: {fmt_minutes(predicted)} predicted ({fmt_minutes(train)} training) on {gpus} GPU(s)"
        f" [{gpus_why}, DDP x{ddp_factor(gpus, part.ddp_efficiency):.2f}]",
        *capped,
        *memory_lines,
        (
            f"time limit: {buf.reason}"  # the user's own: what it covers, not a buffer she never chose
            if req.time_limit_seconds is not None
            else f"buffer: {buf.value:.2f} ({buf.reason}) -> time limit {limit // 60} min"
        )
        + (f", promised to cover {buf.coverage:.0%} of runs like the {tm.n} behind the model" if buf.coverage else ""),
        f"gres: {gres}"
        + (" (light job: shares a GPU)" if shard else "")
        + (
            " (a light job, but its CPUs are more than a shard's share of the node: a whole GPU)"
            if whole_for_cpus
            else ""
        ),
        f"cpus: {cpus}" + (f" ({cores * gpus} cores)" if cores * gpus != cpus else "") + f" [{cpus_why}]; {shape}",
        *([f"memory: {mem_mb / 1024:.1f} GB [{mem_why}]"] if mem_mb else []),
        f"qos: {qos} ("
        + (
            f"a short job, limit at most {qos_cfg.short_max_minutes} min: {qos}'s priority and tier rate"
            f" instead of priority {req.priority}'s {qos_cfg.of(req.priority)})"
            if short
            else f"priority {req.priority})"
        ),
    ]
    return Plan(
        partition=part.name,
        gpus=gpus,
        gres=gres,
        shard=shard,
        shard_share=share,
        qos=qos,
        priority=req.priority,
        pixels=px,
        train_pixels=w.train_pixels,
        val_pixels=w.val_pixels + w.final_val_pixels,
        work_pixels=eff,
        model_factor=mf,
        family_factor=ff,
        k=tm.k,
        k_source=k_source,
        predicted_seconds=predicted,
        predicted_train_seconds=train,
        buffer=buf.value,
        buffer_reason=buf.reason,
        coverage=buf.coverage,
        time_limit_seconds=limit,
        workload=w,
        explain=explain,
        outside_range=outside,
        range_widening=widening,
        feed=feed,
        memory_warning=memory_warning,
        cpus=cpus,
        memory_mb=mem_mb,
        short_limit=short_limit,
    )


def _time_capped(
    w: Workload, tm: TimeModel, ref: float, predicted: float, train: float, cap: float
) -> tuple[float, float, list[str]]:
    """The run under ultralytics' ``time=``: its trainer stops once ``hours`` of training have passed and,
    after each epoch, re-plans its epochs to fill them (ceil(time / mean epoch time)), so it trains
    for the hours whatever ``epochs=`` says; the interrupted epoch is validated before it stops.
    ``cap``: time= in seconds. Returns (predicted, training, the --explain line)."""
    per_epoch = train / max(1, w.epochs)
    capped_train = cap + final_val_seconds(w, tm, ref)  # the validation that closes the stopped epoch
    epochs = cap / per_epoch if per_epoch > 0 else float(w.epochs)
    fits = f"about {math.ceil(epochs)} epochs" if epochs >= 1 else f"{epochs:.0%} of its first epoch"
    line = (
        f"time={cap / 3600:g}: ultralytics trains {fmt_minutes(cap)} and stops, re-planning its epochs to fit:"
        f" {fits} at the predicted {fmt_minutes(per_epoch)} each, where epochs={w.epochs} would take"
        f" {fmt_minutes(train)}; predicted and held for that, plus start-up and validation"
    )
    return predicted - train + capped_train, capped_train, [line]


def _shape_source(configured: Partition | None) -> str:
    """Where the plan's node shape comes from, for --explain."""
    keys = [k for k in ("node_cpus_per_gpu", "node_memory_gb_per_gpu") if configured and getattr(configured, k)]
    if len(keys) == 2:
        return "the config"
    return "Slurm's node records" + (f", {keys[0].split('_')[1]} per GPU as the config states" if keys else "")


def _own_limit(tm: TimeModel, seconds: float, predicted: float, widening: float) -> tuple[Buffer, int, str]:
    """The user's own limit (-t) in Slurm's whole minutes, its buffer with what it covers by the
    partition's measured errors, and a warning when it is likely too short (the user's call: no refusal)."""
    limit = time_limit(seconds, 0.0)
    if limit > MAX_LIMIT_SECONDS:
        raise UsageError(f"--time {seconds_text(seconds)}: more than a year, which no hold covers")
    covered = tm.covers(limit / predicted, predicted, widening) if predicted > 0 else None
    said = f"your limit {seconds_text(limit)}"
    if covered is not None:
        why = f"{said}: covers the predicted {fmt_minutes(predicted)} at {covered:.0%} of {tm.n} cross-validated runs"
    else:
        why = f"{said}: the model keeps no cross-validated errors to say what it covers of the predicted {fmt_minutes(predicted)}"
    short = ""
    if limit < predicted or (covered is not None and covered < 0.5):
        short = (
            f"{said} is under the predicted {fmt_minutes(predicted)}: the job will likely reach it"
            + (
                " (it checkpoints and requeues at the USR2 Slurm sends before it)"
                if limit >= SIGNAL_MIN_LIMIT
                else f" (a limit under {SIGNAL_MIN_LIMIT // 60} min gets no USR2 to checkpoint and requeue at: the job"
                " ends there, and only the epochs it saved are kept)"
            )
            if limit < predicted
            else f"{said} covers the predicted {fmt_minutes(predicted)} at {covered:.0%} of runs like it"
        )
    return Buffer(limit / predicted - 1 if predicted > 0 else 0.0, why), limit, short


def _autobatch(w: Workload, card: gputypes.Card, fraction: float, ref: float) -> tuple[Workload, list[str]]:
    """The workload at the batch AutoBatch would pick on this card, and the line that says so."""
    b = gpu_priors.autobatch(w, card.memory_gb, fraction, ref, gpu_priors.shipped())
    return replace(w, batch=b), [
        f"batch: AutoBatch would pick {b} on this {card.memory_gb:g} GB card ({fraction * 100:.3g}%"
        " of its memory by its own profile: a training step takes more, below), planned at it"
    ]


def _check_memory(
    w: Workload, gpus: int, card: gputypes.Card, part: Partition, ref: float, autobatch: bool = False
) -> tuple[list[str], str]:
    """The predicted GPU memory against the card's: (explain lines, a warning). Past the card, a plan
    is refused (with a batch that fits) only when even the memory model's measured low end
    (``memory.low_ratio``: the least a published run used of its prediction) is past it; in between, a
    warning names the largest batch that fits the prediction: a job that does not fit fails in its first minute, while
    a false refusal leaves no way round it. A batch AutoBatch picks is ultralytics' choice: said."""
    priors = gpu_priors.shipped()
    need = gpu_priors.memory_gb(w, gpus, ref, priors)
    line = (
        f"GPU memory: about {need:.1f} GB per GPU predicted (batch {w.batch // max(1, gpus)} per GPU at imgsz"
        f" {w.imgsz}, {w.model}) of the {card.memory_gb:g} GB card"
    )
    if need <= card.memory_gb:
        return [line], ""
    if autobatch:
        return [f"{line}: AutoBatch's pick may run out of memory (a lower fraction, e.g. batch=0.6, leaves room)"], ""
    fits = gpu_priors.largest_batch(w, gpus, card.memory_gb, ref, priors)
    hint = f"batch={fits} would fit" if fits >= 1 else f"not even batch={gpus} fits: a smaller imgsz or model"
    more = ", or more GPUs with --gpus: DDP splits the batch" if gpus < part.gpus_per_node else ""
    label = card.type.label if card.type else "GPU"
    low = float(priors["memory"].get("low_ratio", 1.0))
    if need * low <= card.memory_gb:
        warning = (
            f"batch={w.batch} at imgsz {w.imgsz} may not fit partition {part.name}'s {label}: about {need:.0f} GB"
            f" of GPU memory per GPU predicted ({w.model}), though runs like it have used as little as"
            f" {need * low:.0f} GB; {hint.replace('would fit', 'fits the prediction')} (a job that does not fit"
            " fails in its first minute)"
        )
        return [f"{line}: over the card, within the memory model's measured error (x{low:.2f} at its low end)"], warning
    raise UsageError(
        f"batch={w.batch} at imgsz {w.imgsz} needs about {need:.0f} GB of GPU memory per GPU ({w.model}) and"
        f" partition {part.name}'s {label} has {card.memory_gb:g} GB: {hint}"
        f" (or batch=-1: AutoBatch{more})"
    )


def _fits_share(w: Workload, card: gputypes.Card, share: float, shards: int, ref: float) -> bool:
    """Whether a shard's share of one card holds the run's memory (unknown cards: the light rule alone)."""
    if card.type is None or card.memory_gb <= 0 or shards <= 0:
        return True
    n = max(1, math.ceil(share * shards))
    return gpu_priors.memory_gb(w, 1, ref, gpu_priors.shipped()) <= card.memory_gb * n / shards


def _feed_line(
    w: Workload,
    tm: TimeModel,
    part: Partition,
    gpus: int,
    cpus_per_gpu: int,
    cores_per_gpu: int,
    ref: float,
    share: float = 0.0,
) -> str:
    """One line when the job's CPUs cannot load images as fast as its GPUs compute (a shard: its share
    of one): how busy the GPUs stay, and the CPUs per GPU that would keep them busy (where the node
    has them)."""
    c = components(w, tm, gpus, part.ddp_efficiency, ref, cores_per_gpu * gpus)
    if share:
        c = c._replace(compute=c.compute / share)
    if c.loader <= 0 or c.loader <= c.compute * 1.05:  # within the sizing's headroom: fed
        return ""
    rate = w.epochs * w.train_images / c.loader
    tpc = max(1, part.threads_per_core)
    need = math.ceil(cores_per_gpu * c.loader / c.compute) * tpc
    node = part.node_cpus_per_gpu
    if share and need > sizing.shard_cap(part, share):
        fix = (
            f"a shard has at most {sizing.shard_cap(part, share)} of the node's CPUs (more take a whole GPU,"
            " which they would feed less well): a smaller imgsz, or a bigger batch, uses it better"
        )
    elif node and need > node:
        fix = f"its nodes have {node} CPUs per GPU: a smaller imgsz, or a bigger model or batch, uses the GPU better"
    elif need <= MAX_CPUS_PER_GPU:
        fix = f"--cpus-per-gpu {need} would keep up"
    else:
        fix = f"not even --cpus-per-gpu {MAX_CPUS_PER_GPU} would: a smaller imgsz, or a bigger model or batch, uses it"
    threads = f" ({cores_per_gpu * gpus} cores)" if tpc > 1 else ""
    held = f"its share of a GPU ({share:g})" if share else f"its {gpus} GPU(s)"
    return (
        f"data loading bounds this run: {cpus_per_gpu * gpus} CPU(s){threads} load about {rate:.0f} images/s, which"
        f" keeps {held} about {c.compute / c.loader:.0%} busy; {fix}"
    )


def clock(epoch: float) -> str:
    """A time as the user reads it: local ``YYYY-MM-DDTHH:MM:SS``, as Slurm prints times."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def choose(
    plans: list[Plan],
    answers: list[WillRun],
    now: float,
    holds: Sequence[float] | None = None,
    prefer: str = "soonest",
    labels: Sequence[str] | None = None,
) -> Plan:
    """``--partition auto``: the plan with the earliest predicted finish: its start as Slurm's own
    scheduler expects it (``answers``: ``sbatch --test-only`` of each plan's script) plus its
    predicted run time; with ``prefer`` "cheapest", the one whose cost (``holds``: budget tokens, or
    the money the site prices it at) is smallest, and with "fastest" the shortest predicted run on
    its card (whatever the queue), the earliest finish among equals. Partitions Slurm
    refuses are skipped, with their reason in ``explain``; ``labels`` say each plan's cost there."""
    costs = list(holds) if holds is not None else [0.0] * len(plans)
    usable = [(p, a.start, c) for p, a, c in zip(plans, answers, costs, strict=True) if a.start is not None]
    if not usable:
        why = "; ".join(f"{p.partition}: {a.refused}" for p, a in zip(plans, answers, strict=True))
        raise SlurmError(f"--partition auto: Slurm refuses the job on every partition ({why})")
    first = {"cheapest": lambda u: u[2], "fastest": lambda u: u[0].predicted_seconds}.get(prefer)
    best, start, _ = min(usable, key=lambda u: ((first(u),) if first else ()) + (u[1] + u[0].predicted_seconds,))
    held = (
        list(labels) if labels is not None else [f", holds {fmt_tokens(c)}" if holds is not None else "" for c in costs]
    )
    lines = [
        f"partition auto: {p.partition} refused by Slurm: {a.refused}"
        if a.start is None
        else f"partition auto: {p.partition} would start {clock(a.start)} + {p.predicted_seconds / 60:.1f} min predicted"
        f" -> finish {clock(a.start + p.predicted_seconds)}{h}"
        for p, a, h in zip(plans, answers, held, strict=True)
    ]
    lines += [
        f"partition auto: {best.partition} "
        + (
            "is the only one Slurm would run it on"
            if len(usable) == 1
            else {"cheapest": "is the cheapest", "fastest": "runs fastest"}.get(prefer, "finishes first")
        ),
        f"expected start: {clock(start)} on {best.partition}, in {fmt_minutes(max(0.0, start - now))} (Slurm's scheduler)",
    ]
    return replace(best, expected_start=start, explain=best.explain + lines)
