"""The site replay's figures from Slurm's own records (``sacct -D``: every run of every job) and the
stand-in's clock (the GPU time it trained), in simulated seconds (real x the scenario's scale).

- wait: the first run's start less the job's submission (as the replay submitted it);
- job completion time (JCT): its last run's end less its submission; bounded slowdown: JCT over
  max(its runs' time, TAU), at least 1;
- makespan: the last end less the first submission;
- GPU-hours allocated: every run's elapsed x its GPUs (a shard: its share of one), as sacct has them;
  busy: what the stand-ins trained; utilisation: what they trained during the burst (from the first
  submission until the last job started: while a job waited, an idle GPU was waste) over the
  cluster's GPUs x the burst, and over the whole makespan (``utilisation_makespan``);
- killed: runs Slurm ended at their limit (TIMEOUT); requeued: runs ended by a requeue; GPU-hours lost:
  a run's GPU time after its last checkpoint where it did not complete, and all of a job's GPU time
  where the job never completed;
- tokens: every run's elapsed x GPUs x the partition's price (the ledger's rule), from sacct.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAU = 600.0  # simulated seconds: the bounded slowdown's floor on a job's run time
SHARDS_PER_GPU = 4
FIELDS = ("JobIDRaw", "JobName", "Partition", "Submit", "Start", "End", "ElapsedRaw", "State", "AllocTRES")


@dataclass
class Run:
    job: str  # the job's name in the replay (its sbatch --job-name)
    job_id: int
    partition: str
    submit: float  # real epoch seconds, as slurmctld took it (a requeued run's: its requeue)
    start: float
    end: float
    elapsed: float  # real seconds
    state: str
    gpus: float


def gpus_of(alloc_tres: str) -> float:
    """GPUs of an AllocTRES (``gres/gpu=2``; ``gres/shard=2`` is half a GPU of 4 shards)."""
    out = 0.0
    for part in alloc_tres.split(","):
        key, _, value = part.partition("=")
        if key == "gres/gpu" and value.isdigit():
            out = max(out, float(value))
        elif key == "gres/shard" and value.isdigit() and out == 0:
            out = float(value) / SHARDS_PER_GPU
    return out


def parse_runs(text: str) -> list[Run]:
    """``sacct -X -D -n -P -o FIELDS --time-format %s`` rows (times as epoch seconds)."""
    runs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(FIELDS):
            continue
        jid, name, partition, submit, start, end, elapsed, state, tres = parts
        try:
            q, s, e = float(submit), float(start), float(end)
        except ValueError:
            continue  # never started, or still running
        runs.append(
            Run(name, int(jid.split("_")[0]), partition, q, s, e, float(elapsed or 0), state.split()[0], gpus_of(tres))
        )
    return runs


def clock(log_dir: Path) -> list[dict[str, Any]]:
    """The stand-ins' epochs (real times), every job's."""
    out = []
    for path in sorted(log_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def arm_metrics(
    runs: list[Run],
    submitted: dict[str, float],
    epochs: list[dict[str, Any]],
    scale: float,
    capacity: float,
    prices: dict[str, float],
) -> dict[str, Any]:
    """One arm's figures (``docs/benchmarks.md``, "The site replay"). ``submitted``: the job names the
    replay submitted (with when it asked); a job's submission is slurmctld's (its first run's Submit).
    Every submitted job must have ended (else the figures are of fewer jobs: said)."""
    by_job: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        if r.job in submitted:
            by_job[r.job].append(r)
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in epochs:
        by_id[str(e["job"])].append(e)
    waits, jcts, slowdowns = [], [], []
    allocated = lost = tokens = 0.0
    killed = requeued = 0
    ends: list[float] = []
    unfinished = []
    firsts: list[float] = []
    starts: list[float] = []
    for name in submitted:
        rs = sorted(by_job.get(name, []), key=lambda r: r.start)
        if not rs:
            unfinished.append(name)
            continue
        final, submit = rs[-1], min(r.submit for r in rs)
        firsts.append(submit)
        starts.append(rs[0].start)
        ran = sum(r.elapsed for r in rs)
        waits.append((rs[0].start - submit) * scale)
        jct = (final.end - submit) * scale
        jcts.append(jct)
        slowdowns.append(max(1.0, jct / max(ran * scale, TAU)))
        ends.append(final.end)
        completed = final.state == "COMPLETED"
        for r in rs:
            gpu_s = r.elapsed * r.gpus * scale
            allocated += gpu_s
            tokens += gpu_s * prices.get(r.partition, 0.0)
            killed += r.state == "TIMEOUT"
            requeued += r.state in ("REQUEUED", "PREEMPTED", "NODE_FAIL")
            if not completed:
                lost += gpu_s
            elif r is not final:
                saved = [e["t1"] for e in by_id.get(str(r.job_id), []) if r.start <= e["t1"] <= r.end]
                lost += (r.end - (max(saved) if saved else r.start)) * r.gpus * scale
    start = min(firsts) if firsts else 0.0
    makespan = (max(ends) - start) * scale if ends else 0.0
    busy = sum((e["t1"] - e["t0"]) * float(e["gpus"]) for e in epochs) * scale
    # The burst: until the last job started (while one waited, an idle GPU was waste, not want of work)
    burst_end = max(starts) if starts else start
    in_burst = sum(max(0.0, min(e["t1"], burst_end) - max(e["t0"], start)) * float(e["gpus"]) for e in epochs) * scale
    burst = (burst_end - start) * scale
    return {
        "jobs": len(submitted) - len(unfinished),
        "unfinished": sorted(unfinished),
        "mean_wait_s": statistics.fmean(waits) if waits else 0.0,
        "median_wait_s": statistics.median(waits) if waits else 0.0,
        "p95_wait_s": _quantile(waits, 0.95),
        "mean_jct_s": statistics.fmean(jcts) if jcts else 0.0,
        "mean_bounded_slowdown": statistics.fmean(slowdowns) if slowdowns else 0.0,
        "makespan_s": makespan,
        "gpu_hours_allocated": allocated / 3600,
        "gpu_hours_busy": busy / 3600,
        "utilisation": in_burst / (capacity * burst) if burst > 0 else 0.0,
        "burst_s": burst,
        "utilisation_makespan": busy / (capacity * makespan) if makespan else 0.0,
        "killed": killed,
        "requeued": requeued,
        "gpu_hours_lost": lost / 3600,
        "tokens_charged": round(tokens),
        "waits_s": sorted(waits),
    }


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def busy_over_time(
    epochs: list[dict[str, Any]], start: float, scale: float, step: float = 2.0
) -> tuple[list[float], list[float]]:
    """(simulated hours, GPUs busy) sampled every ``step`` real seconds, for the PNG."""
    if not epochs:
        return [], []
    end = max(e["t1"] for e in epochs)
    xs, ys = [], []
    t = start
    while t <= end:
        xs.append((t - start) * scale / 3600)
        ys.append(sum(float(e["gpus"]) for e in epochs if e["t0"] <= t < e["t1"]))
        t += step
    return xs, ys
