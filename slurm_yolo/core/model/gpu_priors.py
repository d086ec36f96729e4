"""The GPU-type priors: a partition's time model and GPU memory before its own runs (import-light).

``data/gpu_priors.json`` is fitted by ``python -m bench gpu-priors`` on ``bench/corpus/gpu_public.csv``
(published training speeds on named GPUs, each with its source) and on what a lent GPU measured
(``bench/corpus/gpu/``). One set of terms holds for every type (how compute grows with the model, the
batch and the image size, per-step costs, the data loader's CPU cost); each type the corpus has
figures for has its own ``k`` (seconds per million pixels of work (s/Mpx)), and any other type gets ``k``
from its dense FP16 TFLOPs by the law the corpus' types follow. A MIG slice computes at its share.

The memory model predicts ultralytics' ``GPU_mem`` (reserved memory at the batch's peak) from the
batch one GPU holds, the image size and the model: ``base + per_image x batch x (imgsz / 640)^2 x
model factor ^ exponent``; AutoBatch (``batch=-1`` or a fraction) picks the batch whose memory is that
fraction of the card's, as ultralytics' ``autobatch`` solves its own linear fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from slurm_yolo.core.gputypes import Card
from slurm_yolo.core.model.estimate import Workload, model_factor
from slurm_yolo.core.model.timemodel import TimeModel

GPU_PRIORS = Path(__file__).resolve().parents[2] / "data" / "gpu_priors.json"
AUTOBATCH_MAX = 1024  # ultralytics' clamp
MAX_BATCH = 65536  # per GPU: past this a batch is no run's (calibrate's bound too)


@cache
def shipped(path: Path = GPU_PRIORS) -> dict[str, Any]:
    """The GPU priors file (``bench/gpu_priors.py`` writes it)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def k_for(card: Card, priors: dict[str, Any]) -> tuple[float, str]:
    """(k, where it comes from) of a card: its type's own fit, else the TFLOPs law; a MIG slice's
    compute share slows it."""
    assert card.type is not None
    own = priors["k"]["types"].get(card.type.name)
    if own:
        k, why = own["k"], f"fitted on {own['points']} published figure(s) for {card.type.name}"
    else:
        law = priors["k"]["law"]
        k = law["k_at_100_tflops"] * (card.type.tflops / 100.0) ** -law["tflops_exponent"]
        why = f"from its {card.type.tflops:g} dense FP16 TFLOPs (no published figure for {card.type.name})"
    if card.compute_share < 1:
        k /= card.compute_share
        why += f", a MIG slice with {card.compute_share:.2f} of its compute"
    return k, why


def model_for(base: TimeModel, card: Card, priors: dict[str, Any]) -> tuple[TimeModel, str]:
    """``base`` (the config's prior: its start-up) with the GPU terms, the card's ``k`` and each task's
    loader factor (``loader_tasks``: a segment image costs its loader more than a detect one)."""
    k, why = k_for(card, priors)
    families = {**base.family_factors, **priors["factors"]["family"]}
    tasks = {**base.loader_task_factors, **priors.get("loader_tasks", {})}
    tm = replace(
        base,
        **priors["terms"],
        k=k,
        family_factors=families,
        loader_task_factors=tasks,
        spreads=dict(priors["spreads"]),
    )
    return tm, f"GPU-type priors for {card.type.label if card.type else '?'} (k {why})"


def memory_gb(w: Workload, gpus: int, reference_gflops: float, priors: dict[str, Any]) -> float:
    """Predicted peak GPU memory (GB, ultralytics' GPU_mem) of one GPU training this workload."""
    m = priors["memory"]
    per_gpu = max(1, w.batch // max(1, gpus))
    scale = (w.imgsz / 640) ** 2 * model_factor(w.gflops, reference_gflops) ** m["model_exponent"]
    return float(m["base_gb"] + m["per_image_gb"] * per_gpu * scale)


def largest_batch(
    w: Workload, gpus: int, memory: float, reference_gflops: float, priors: dict[str, Any], fraction: float = 1.0
) -> int:
    """The largest global batch whose predicted memory per GPU is within ``fraction`` of ``memory``
    (0 when not even one image per GPU fits)."""
    m = priors["memory"]
    one = memory_gb(replace(w, batch=max(1, gpus)), gpus, reference_gflops, priors) - m["base_gb"]
    per_gpu = math.floor((memory * fraction - m["base_gb"]) / one) if one > 0 else 0
    return min(max(0, per_gpu), MAX_BATCH) * max(1, gpus)


def autobatch(w: Workload, memory: float, fraction: float, reference_gflops: float, priors: dict[str, Any]) -> int:
    """The batch ultralytics' AutoBatch picks for this run on a card of ``memory`` GB at ``fraction``
    of it: its linear fit of memory against batch (its profile counts ``autobatch_ratio`` of a
    training step's memory per image), solved for that fraction, clamped to 1-1024 and to the
    training images."""
    m = priors["memory"]
    profile = {**priors, "memory": {**m, "per_image_gb": m["per_image_gb"] * m["autobatch_ratio"]}}
    b = largest_batch(w, 1, memory, reference_gflops, profile, fraction)
    return max(1, min(b, AUTOBATCH_MAX, w.train_images))
