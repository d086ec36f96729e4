"""CPUs and host memory for a planned job: enough CPUs to keep its GPUs fed, memory for them (pure).

A GPU trains only as fast as its data loaders hand it images: loading costs ``loader_seconds`` CPU-
seconds per image (the GPU-type priors' term, per core: a hyperthread adds little to a loader), so the
plan asks for the cores that load as fast as the GPU computes, a fifth more for the loader model's
error, at least the site's floor (``job.cpus_per_gpu``) and at most what the partition's nodes have
per GPU (Slurm's node records, or ``partitions.NAME.node_cpus_per_gpu``): more than that pends for
ever (``PartitionConfig``). Memory follows: the training process, a share per loader worker, and a
``cache=ram`` dataset decoded, per GPU (each DDP rank caches its own copy).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from slurm_yolo.core.config import Partition
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import TimeModel, components

HEADROOM = 1.2  # loader cores beyond the model's need: its error, and the main process's own share
UNKNOWN_CPUS_PER_GPU = 8  # a node shape neither Slurm nor the config states: a common GPU node's share
PROCESS_GB = 3.0  # one training process's host memory: torch, the CUDA context, model and optimizer copies
WORKER_GB = 0.5  # one data loader worker: its mosaic buffers and a copy-on-write share of the labels
BYTES_PER_PIXEL = 3  # a decoded RGB image, as ultralytics' cache=ram holds it (at imgsz, long side)


class Sizing(NamedTuple):
    """What the job asks Slurm for beyond its GPUs, and why (``--explain``)."""

    cpus: int  # --cpus-per-task
    cpus_per_gpu: int
    cores: int  # physical cores those CPUs are (the loader's rate counts cores)
    memory_mb: int  # --mem (0: not asked; the cluster's DefMemPerCPU or job.mem_per_cpu_mb)
    lines: tuple[str, ...]


def shape_text(part: Partition, source: str) -> str:
    """The partition's node shape as the plan knows it, for ``--explain``."""
    if not part.node_cpus_per_gpu:
        return (
            f"the nodes' shape is not known (Slurm did not say, and no partitions.{part.name}.node_cpus_per_gpu):"
            f" at most {UNKNOWN_CPUS_PER_GPU} CPUs per GPU assumed"
        )
    memory = f" and {part.node_memory_gb_per_gpu:g} GB" if part.node_memory_gb_per_gpu else ""
    threads = f"; {part.threads_per_core} Slurm CPUs to a core" if part.threads_per_core > 1 else ""
    return f"per GPU, its nodes have {part.node_cpus_per_gpu} CPUs{memory}{threads} ({source})"


def check_cpus_per_gpu(asked: int, part: Partition) -> None:
    """``--cpus-per-gpu`` beyond what a node of the partition has per GPU: refused (Slurm keeps such a
    job pending for ever, reason PartitionConfig)."""
    if part.node_cpus_per_gpu and asked > part.node_cpus_per_gpu:
        raise UsageError(
            f"--cpus-per-gpu {asked}: partition {part.name}'s nodes have {part.node_cpus_per_gpu} CPUs per GPU"
            f" (Slurm would keep the job pending for ever, PartitionConfig): ask at most {part.node_cpus_per_gpu}"
        )


def loader_need(w: Workload, tm: TimeModel, gpus: int, ddp_eff: float, ref: float) -> float:
    """Cores per GPU whose loading keeps pace with the GPUs' compute (0: the model has no loader term)."""
    c = components(w, tm, gpus, ddp_eff, ref, gpus)  # one core per GPU
    if c.loader <= 0 or c.compute <= 0:
        return 0.0
    return c.loader / c.compute


def shard_cap(part: Partition, share: float) -> int:
    """The CPUs a shard of ``share`` of one GPU may have: its share of the node's per-GPU CPUs, whole cores."""
    tpc = max(1, part.threads_per_core)
    return max(tpc, int((part.node_cpus_per_gpu or UNKNOWN_CPUS_PER_GPU) * share) // tpc * tpc)


def fits_shard(w: Workload, tm: TimeModel, part: Partition, asked: int, share: float, ref: float) -> bool:
    """Whether a light job's CPUs fit a shard's share of the node: the user's ``--cpus-per-gpu``, or the
    cores its loader needs to keep up with its share of the GPU (a job whose loader needs more takes a
    whole GPU and its CPUs)."""
    cap = shard_cap(part, share)
    if asked:
        return asked <= cap
    need = loader_need(w, tm, 1, part.ddp_efficiency, ref) * share
    return math.ceil(need * HEADROOM) * max(1, part.threads_per_core) <= cap


def cpus(
    w: Workload,
    tm: TimeModel,
    part: Partition,
    gpus: int,
    asked: int,
    floor: int,
    ref: float,
    share: float = 0.0,
) -> tuple[int, int, str]:
    """(CPUs per GPU, cores per GPU, why): the user's ``--cpus-per-gpu`` (``asked``), else the loader's
    need within the site's floor and the node's share; a shard (``share`` of one GPU) gets its share
    of the node's CPUs at most."""
    tpc = max(1, part.threads_per_core)
    cap = shard_cap(part, share) if share else part.node_cpus_per_gpu or UNKNOWN_CPUS_PER_GPU
    if asked:
        check_cpus_per_gpu(asked, part)
        per, why = asked, "--cpus-per-gpu"
    else:
        need = loader_need(w, tm, gpus, part.ddp_efficiency, ref) * (share or 1.0)  # a shard computes at its share
        per_need = math.ceil(need * HEADROOM) * tpc if need else 0
        per = max(1, floor, per_need)
        per = math.ceil(per / tpc) * tpc  # Slurm gives whole cores
        if per_need > floor:
            why = f"{math.ceil(need * HEADROOM)} core(s) per GPU load as fast as it computes ({need:.1f}, a fifth more)"
        else:
            why = "the site's job.cpus_per_gpu" + (" (enough to feed the GPU)" if need else "")
        if per > cap:
            why += f"; capped at the {'shard' if share else 'node'}'s {cap} per GPU"
            per = cap
    return per, max(1, per // tpc), why


def memory_mb(w: Workload, workers: int, gpus: int, cache: str, part: Partition, share: float = 0.0) -> tuple[int, str]:
    """(--mem in MB, why): per GPU, the training process, its loader workers and a ``cache=ram``
    dataset decoded (every DDP rank holds its own), at most the node's memory per GPU (its share for
    a shard). 0 MB: not asked."""
    cached = 0.0
    if cache == "ram":
        cached = (w.train_images + w.val_images) * w.imgsz**2 * BYTES_PER_PIXEL / 1e9
    per_gpu = PROCESS_GB + WORKER_GB * workers + cached
    ranks = 1 if share else gpus
    want = per_gpu * ranks
    why = f"{PROCESS_GB:g} GB for training + {WORKER_GB:g} GB x {workers} loader worker(s)" + (
        f" + {cached:.1f} GB for cache=ram (the dataset decoded)" if cached else ""
    )
    if ranks > 1:
        why += f", x {ranks} GPUs"
    node = part.node_memory_gb_per_gpu * (share or gpus)
    if node and want > node:
        why += f"; capped at the node's {node:g} GB" + (
            " (cache=ram will not fit: ultralytics caches only what its check of the node's free memory allows,"
            " and the job may run out of memory: cache=disk or cache=False)"
            if cached
            else ""
        )
        if not cached:
            why += " (less than training usually takes: the job may run out of memory)"
        return max(1, math.floor(node * 1024)), why  # never past what the node has: Slurm would refuse it
    return max(256, math.ceil(want * 1024 / 256) * 256), why


def cache_mode(value: object) -> str:
    """ultralytics' ``cache`` as its trainer reads it: True or "ram" caches in memory, "disk" on disk."""
    if value is True or str(value).lower() in ("true", "ram"):
        return "ram"
    return "disk" if str(value).lower() == "disk" else ""
