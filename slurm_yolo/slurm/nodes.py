"""The partitions' node shapes, as the plan sizes jobs from them: the config's keys over Slurm's node
records (one ``sinfo`` call, skipped where the config states every partition's shape). A Slurm that
cannot be asked leaves a shape unknown: the plan says so. Nothing is written: a refused plan changes
nothing, not even a cache."""

from __future__ import annotations

import logging

from slurm_yolo.core.config import Config, Partition
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.parsers import NodeShape

logger = logging.getLogger(__name__)
ASK_TIMEOUT = 5.0  # a dry run off-site must not wait long on an unreachable controller


def slurm_shapes(config: Config) -> dict[str, NodeShape]:
    """Every partition's GPU node shape from Slurm ({} when it cannot be asked: the plan says so)."""
    try:
        return commands.node_shapes(config.bin_dir, min(ASK_TIMEOUT, config.slurm.timeout_seconds))
    except SlurmYoloError as e:
        logger.debug("node shapes: Slurm did not answer: %s", e)
        return {}


def shaped(config: Config, names: list[str]) -> dict[str, Partition]:
    """Each named partition with its node shape: the config's keys, else Slurm's records; never more
    than Slurm's records say a node has (a job asking more pends for ever: PartitionConfig)."""
    parts = {name: config.partition(name) for name in names}
    if all(p.node_cpus_per_gpu and p.node_memory_gb_per_gpu and p.threads_per_core for p in parts.values()):
        return parts
    shapes = slurm_shapes(config)
    out = {}
    for name, p in parts.items():
        s = shapes.get(name)
        if s is not None:
            p = p._replace(  # the config may state less than Slurm has (to keep some back), never more
                node_cpus_per_gpu=min(p.node_cpus_per_gpu or s.cpus_per_gpu, s.cpus_per_gpu),
                node_memory_gb_per_gpu=min(p.node_memory_gb_per_gpu or s.memory_gb_per_gpu, s.memory_gb_per_gpu)
                if s.memory_gb_per_gpu > 0
                else p.node_memory_gb_per_gpu,
                threads_per_core=p.threads_per_core or s.threads_per_core,
            )
        out[name] = p
    return out
