"""GPU types: what a partition's GRES type (or its admin) says of its cards (pure, import-light).

Sites spell one card many ways (``a100``, ``a100_80g``, ``nvidia_a100-sxm4-80gb``, ``tesla_v100``,
``nvidia_h100_80gb_hbm3``, a MIG slice ``a100_3g.20gb``); ``identify`` reads them all into a type
of ``TYPES``: the card's dense FP16 tensor TFLOPs and memory as its maker publishes them. The time
model's GPU priors (``gpu_priors``) are fitted per type on published training speeds; a type the
corpus has no figure for is scaled from its TFLOPs. A partition whose type is none of these says so
(``--explain``, ``doctor``) and its admin sets ``gpu_like`` or ``gpu_tflops``/``gpu_memory_gb``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from slurm_yolo.core.config import Partition


class GpuType(NamedTuple):
    """A card as its maker publishes it."""

    name: str  # canonical: what ``gpu_like`` takes
    label: str
    tflops: float  # dense FP16 tensor TFLOPs (no sparsity); FP16 without tensor cores where it has none
    memory_gb: float
    source: str


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (FP16 Tensor Core 312 TFLOPS dense)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (FP16 Tensor Core, dense: half the sparse figure)"
_AMPERE = "NVIDIA Ampere GA102 GPU architecture whitepaper (FP16 tensor, FP32 accumulate, dense)"
TYPES: dict[str, GpuType] = {
    t.name: t
    for t in (
        GpuType("t4", "NVIDIA T4 16GB", 65.0, 16.0, "NVIDIA T4 datasheet (mixed precision FP16/FP32 65 TFLOPS)"),
        GpuType("p100", "NVIDIA Tesla P100 16GB", 18.7, 16.0, "NVIDIA Tesla P100 datasheet (PCIe: FP16 18.7 TFLOPS)"),
        GpuType("v100", "NVIDIA V100 16GB", 125.0, 16.0, "NVIDIA V100 datasheet (SXM2: tensor 125 TFLOPS)"),
        GpuType("v100_32g", "NVIDIA V100 32GB", 125.0, 32.0, "NVIDIA V100 datasheet (SXM2: tensor 125 TFLOPS)"),
        GpuType("a100", "NVIDIA A100 40GB", 312.0, 40.0, _A100),
        GpuType("a100_80g", "NVIDIA A100 80GB", 312.0, 80.0, _A100),
        GpuType("a10", "NVIDIA A10 24GB", 125.0, 24.0, "NVIDIA A10 datasheet (FP16 tensor 125 TFLOPS dense)"),
        GpuType("a30", "NVIDIA A30 24GB", 165.0, 24.0, "NVIDIA A30 datasheet (FP16 tensor 165 TFLOPS dense)"),
        GpuType("a40", "NVIDIA A40 48GB", 149.7, 48.0, "NVIDIA A40 datasheet (FP16 tensor 149.7 TFLOPS dense)"),
        GpuType("l4", "NVIDIA L4 24GB", 121.0, 24.0, "NVIDIA L4 datasheet (FP16 tensor 242 TFLOPS sparse)"),
        GpuType("l40s", "NVIDIA L40S 48GB", 362.0, 48.0, "NVIDIA L40S datasheet (FP16 tensor 733 TFLOPS sparse)"),
        GpuType("h100", "NVIDIA H100 SXM 80GB", 989.0, 80.0, _H100),
        GpuType("h100_pcie", "NVIDIA H100 PCIe 80GB", 756.0, 80.0, _H100),
        GpuType("h200", "NVIDIA H200 141GB", 989.0, 141.0, "NVIDIA H200 datasheet (FP16 tensor 1,979 TFLOPS sparse)"),
        GpuType("rtx3090", "NVIDIA GeForce RTX 3090 24GB", 71.0, 24.0, _AMPERE),
        GpuType("rtx_a6000", "NVIDIA RTX A6000 48GB", 154.8, 48.0, "NVIDIA RTX A6000 datasheet (309.7 TFLOPS sparse)"),
        GpuType(
            "rtx4090",
            "NVIDIA GeForce RTX 4090 24GB",
            165.2,
            24.0,
            "NVIDIA Ada GPU architecture whitepaper (FP16 tensor, FP32 accumulate, dense)",
        ),
    )
}

# Tokens of a spelling that name a type (checked in order: "a100" before "a10"), and the memory
# tokens that pick a variant ("80gb", "80g", "32gb").
_NAMES = (
    ("h200", "h200"),
    ("h100", "h100"),
    ("a100", "a100"),
    ("v100s", "v100_32g"),
    ("v100", "v100"),
    ("l40s", "l40s"),
    ("a6000", "rtx_a6000"),
    ("4090", "rtx4090"),
    ("3090", "rtx3090"),
    ("p100", "p100"),
    ("a10g", "a10"),
    ("a10", "a10"),
    ("a30", "a30"),
    ("a40", "a40"),
    ("l4", "l4"),
    ("t4", "t4"),
)
_MIG = re.compile(r"^(\d)g\.(\d+)gb$")  # a MIG profile: 3g.20gb is 3 of 7 compute slices and 20 GB
_MEMORY = re.compile(r"^(\d+)g(b)?$")


class Card(NamedTuple):
    """What a partition's GPU is, for the time model and the memory check."""

    type: GpuType | None  # None: unknown, or a partition whose "GPUs" train on its CPUs
    memory_gb: float  # of one GRES unit (a MIG slice's own)
    compute_share: float  # of the whole card: a MIG slice's g / 7, else 1
    cpu: bool  # gpu_like = "cpu": the GRES are device nodes and training runs on the CPUs
    how: str  # how it was known, for --explain


def identify(spelling: str) -> tuple[GpuType | None, float, float]:
    """(type, memory of one unit, compute share) of a GRES type or a card's name; (None, 0, 1) for
    none of ``TYPES``."""
    text = spelling.lower()
    tokens = [t for t in re.split(r"[^a-z0-9.]+", text.replace("-", "_").replace("_", " ")) if t]
    memory, share = 0.0, 1.0
    for t in tokens:
        if (m := _MIG.match(t)) and 1 <= int(m.group(1)) <= 7 and 0 < int(m.group(2)) <= 1024:
            share, memory = int(m.group(1)) / 7, float(m.group(2))
    for token, name in _NAMES:
        if token in tokens or (len(token) == 4 and token.isdigit() and any(t.endswith(token) for t in tokens)):
            base = TYPES[name]
            if name in ("a100", "v100", "h100") and not memory:
                if name == "h100" and "pcie" in tokens:
                    base = TYPES["h100_pcie"]
                sizes = [float(m.group(1)) for t in tokens if (m := _MEMORY.match(t))]
                if sizes and sizes[0] > base.memory_gb:
                    base = TYPES.get(f"{name}_{sizes[0]:.0f}g", base)._replace(memory_gb=sizes[0])
            return base, memory or base.memory_gb, share
    return None, 0.0, 1.0


def card(part: Partition) -> Card:
    """The card of a partition: ``gpu_like`` (a type's name, or "cpu") over its GRES type, and
    ``gpu_tflops``/``gpu_memory_gb`` for a card none of ``TYPES`` is."""
    like = part.gpu_like.strip().lower()
    if like == "cpu":
        return Card(None, 0.0, 1.0, True, "gpu_like = cpu: its GPUs are device nodes, training runs on CPUs")
    if part.gpu_tflops > 0:  # the site's own figures: k from the TFLOPs law, never a known type's fit
        own = GpuType(
            f"site:{part.name}",
            f"{part.gpu_type or part.name} (the site's figures)",
            part.gpu_tflops,
            part.gpu_memory_gb,
            "partitions.*.gpu_tflops",
        )
        return Card(own, part.gpu_memory_gb, 1.0, False, f"gpu_tflops = {part.gpu_tflops:g}")
    spelling = like or part.gpu_type
    found, memory, share = identify(spelling) if spelling else (None, 0.0, 1.0)
    if found is None:
        return Card(None, part.gpu_memory_gb, 1.0, False, f"GPU type {spelling or '(none)'} is not known")
    memory = part.gpu_memory_gb or memory
    key = "gpu_like" if like else "gpu_type"
    return Card(found, memory, share, False, f"{key} {spelling}: {found.label}")


def card_key(part: Partition) -> str:
    """What a partition's time model was fitted on, as its calibration records it: "cpu" (device-node
    GPUs that train on CPUs), a known type's name, the site's own TFLOPs, or an unknown spelling. A fit
    is good only for the card it was learned on."""
    c = card(part)
    if c.cpu:
        return "cpu"
    if c.type is None:
        return f"unknown:{part.gpu_like or part.gpu_type}"
    slice_ = f"@{c.compute_share:.3g}" if c.compute_share < 1 else ""
    return (f"tflops:{part.gpu_tflops:g}" if part.gpu_tflops > 0 else c.type.name) + slice_


def unknown_line(part: Partition) -> str:
    """A line for a partition whose card the model does not know ('' when it does, or trains on CPU)."""
    c = card(part)
    if c.type is not None or c.cpu:
        return ""
    return (
        f"partition {part.name}: {c.how}: its time model is the CPU prior; set partitions.{part.name}.gpu_like"
        f" to one of {', '.join(sorted(TYPES))}, or gpu_tflops and gpu_memory_gb (its dense FP16 TFLOPs, GB)"
    )
