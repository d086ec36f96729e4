"""``slurm-yolo simulate``'s pure parts: the history it replays (GPU runs only, idle stretches cut),
the limits each arm gives, and the replay cluster's spec from sinfo (the replay itself:
test_simulate_cluster.py)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from slurm_yolo.admin import simulate as sim
from slurm_yolo.core.limits import time_limit
from slurm_yolo.core.model.timemodel import TimeModel, buffer_for
from slurm_yolo.slurm import parsers
from slurm_yolo.slurm.records import JobRecord

BASE = TimeModel(k=1.0, overhead_seconds=5.0, val_weight=0.5, iteration_seconds=0.02, startup_seconds=20.0)


def record(job: int, submit: int, elapsed: int, tres: dict[str, str], limit: int = 600, wait: int = 0) -> JobRecord:
    start = submit + wait
    return JobRecord(
        job, submit, "COMPLETED", "t4", "vision", "normal", "alice", tres, limit, elapsed, start, "yolo", 0,
        start + elapsed,
    )  # fmt: skip


def test_the_history_is_its_gpu_runs_in_order_with_idle_stretches_cut_to_the_gap() -> None:
    gpu, shard, cpu = {"gres/gpu": "2", "cpu": "8"}, {"gres/shard": "1", "cpu": "2"}, {"cpu": "4"}
    records = [
        record(3, 1000 + 100, 50, shard),  # while 1 still runs: no gap
        record(1, 1000, 300, gpu),
        record(2, 1000 + 5000, 60, gpu, limit=120),  # 3700 s after the busy stretch ended (1300): cut to GAP
        record(4, 1000 + 20, 10, cpu),  # a CPU run: left out
        record(5, 500, 10, gpu),  # before --since: left out
        record(6, 1000 + 30, 0, gpu)._replace(start=0, end=0),  # never started: left out
    ]
    runs = sim.history(records, since=1000)
    assert [r.job_id for r in runs] == [1, 3, 2]
    assert [r.at for r in runs] == [0, 100, 300 + sim.GAP]
    assert [(r.gres, r.gpus, r.cpus) for r in runs] == [("gpu:2", 2.0, 8), ("shard:1", 0.25, 2), ("gpu:2", 2.0, 8)]
    assert [(r.seconds, r.asked) for r in runs] == [(300, 600), (50, 600), (60, 120)]


def test_as_submitted_keeps_the_users_limits_and_slurm_yolo_gives_its_own() -> None:
    runs = sim.history([record(1, 10, 3000, {"gres/gpu": "1"}, limit=86400)], since=0)
    assert sim.limits(runs, "as submitted", None, 0) == {0: 86400}  # type: ignore[arg-type]
    calibrated = replace(BASE, n=30, noise_relative=0.1, noise_seconds=0.0, coverage_z=2.33, coverage=0.99, cv_bias=0.0)
    limit = sim.product_limit(runs[0], calibrated, 0.2, random.Random(0))
    # the same draw by hand: log(actual / predicted) ~ N(0, 0.1), the buffer the model gives that prediction
    predicted = 3000 / math.exp(random.Random(0).gauss(0.0, 0.1))
    assert limit == time_limit(predicted, buffer_for(calibrated, 0.2, predicted).value)
    assert 3000 < limit < 86400 / 10
    prior = BASE  # uncalibrated: a wide draw and the doubled limit
    wide = [sim.product_limit(runs[0], prior, 0.2, random.Random(s)) for s in range(50)]
    assert min(wide) < 3000 * 2 < max(wide) and all(w % 60 == 0 for w in wide)


def test_a_replay_clusters_spec_is_each_gpu_partitions_nodes_as_sinfo_states_them() -> None:
    text = """a100*|gpu-a100-1|32|256000|1|gpu:a100:2(S:0-1),shard:a100:8(S:0-1)
t4|gpu-t4-1|16|64000|2|gpu:t4:2,shard:t4:8
t4|gpu-t4-2|8|32000+|1|gpu:t4:2,shard:t4:8
cpu|cpu-1|64|128000|1|(null)
garbage line
"""
    assert parsers.partition_nodes(text) == [
        {"name": "a100", "gpu_type": "a100", "nodes": 1, "gpus_per_node": 2, "cpus_per_node": 32,
         "memory_mb": 256000, "shards_per_gpu": 4},
        {"name": "t4", "gpu_type": "t4", "nodes": 2, "gpus_per_node": 2, "cpus_per_node": 8,
         "memory_mb": 32000, "shards_per_gpu": 4},
    ]  # fmt: skip


def test_limits_become_whole_real_minutes_never_under_one() -> None:
    assert [sim.minutes(s, 1) for s in (1, 60, 61, 3600)] == [1, 1, 2, 60]
    assert [sim.minutes(s, 60) for s in (60, 3600, 3601)] == [1, 1, 2]
