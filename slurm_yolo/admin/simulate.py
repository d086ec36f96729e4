"""``slurm-yolo simulate``: the site's own history replayed on Slurm's own scheduler, twice: with the
limits its users asked for, and with the limits slurm-yolo would have set at its measured accuracy.

The replay runs on a replay cluster beside the site's (``deploy/replaycluster``, whose spec
``--spec`` writes from this cluster's nodes): never on the site's own, which ``--on`` may not name.
Each GPU run of the history (``sacct``: its submission, partition, GPUs or shards, CPUs, account,
elapsed and requested limit) becomes a job that sleeps its elapsed time over ``scale``, submitted at
its own time over ``scale``; idle stretches of the history (nothing pending or running for more than
``GAP`` seconds) are cut to ``GAP``, so a month that was busy a few afternoons replays in those.

Arms, one after the other on the same (idle) replay cluster:

- ``as submitted``: each run's own requested limit: what the site did;
- ``slurm-yolo``: each run's limit as yolo-sbatch sets it (``limits.time_limit`` of a prediction with the
  buffer ``timemodel.buffer_for`` gives), the prediction its true time off by an error drawn from the
  partition's calibrated accuracy (cross-validated error scale and bias; an uncalibrated partition's
  prior is drawn at ``PRIOR_NOISE`` and gets its doubled limit); a run its limit is too short for is
  killed there and goes on in a follow-up job (its checkpoint), as the launcher's requeue does.

What it does not know: the history's jobs ran as they ran (a run cut short by its own limit has no
true time past it: it is replayed as long as it ran), and its users' CPU jobs are left out."""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.limits import time_limit
from slurm_yolo.core.model.timemodel import TimeModel, buffer_for, quantile
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import JobRecord
from slurm_yolo.state import calibration

logger = logging.getLogger(__name__)

GAP = 600.0  # seconds: an idle stretch of the history longer than this is cut to it
PRIOR_NOISE = 0.5  # log units: an uncalibrated partition's error scale (the shipped priors' day-one spread)
ARMS = ("as submitted", "slurm-yolo")
POLL = 2.0  # real seconds between looks at the replay cluster's queue
NAME = "sim"  # the replay jobs' name prefix: sim-ARM-JOBID


@dataclass(frozen=True)
class Run:
    """One GPU run of the history, as the replay submits it (seconds simulated: the history's own)."""

    key: int  # its place in the history: a requeued job's runs are each a run
    job_id: int
    at: float  # submission, from the history's first (idle stretches cut)
    partition: str
    account: str
    gres: str  # "gpu:N" or "shard:N", untyped: each partition of a replay cluster has one card
    gpus: float  # GPUs it held (a shard its share, where the partition's shards are known)
    cpus: int
    seconds: int  # how long it ran (its true time, as far as the history knows)
    asked: int  # its requested limit, seconds


@dataclass
class ArmResult:
    """What one arm's replay measured, in the history's seconds."""

    arm: str
    jobs: int = 0
    waits: list[float] = field(default_factory=list)
    makespan: float = 0.0
    killed: int = 0  # runs ended at their limit
    followups: int = 0  # killed runs that went on in a follow-up job (slurm-yolo's requeue)
    gpu_hours: float = 0.0  # allocated
    gpu_hours_lost: float = 0.0  # of runs killed with no follow-up: all they ran

    def figures(self) -> dict[str, float | int | str]:
        waits = sorted(self.waits)
        return {
            "arm": self.arm,
            "jobs": self.jobs,
            "mean_wait_s": round(sum(waits) / len(waits), 1) if waits else 0.0,
            "median_wait_s": round(quantile(waits, 0.5), 1) if waits else 0.0,
            "p95_wait_s": round(quantile(waits, 0.95), 1) if waits else 0.0,
            "makespan_s": round(self.makespan, 1),
            "killed": self.killed,
            "requeued": self.followups,
            "gpu_hours_allocated": round(self.gpu_hours, 3),
            "gpu_hours_lost": round(self.gpu_hours_lost, 3),
        }


def count(record: JobRecord, key: str) -> int:
    """A whole-number TRES of a run (``gres/gpu``, ``cpu``); 0 where it has none."""
    value = record.tres.get(key, "")
    return int(value) if value.isdigit() else 0


def gpus_of(record: JobRecord) -> tuple[str, float]:
    """A run's GPU request as the replay asks it, and its GPUs: ``gpu:N`` or ``shard:N`` (a shard a
    quarter of a card, the bundled nodes' and replay clusters' default); ("", 0) for a CPU run."""
    gpus = count(record, "gres/gpu")
    if gpus:
        return f"gpu:{gpus}", float(gpus)
    shards = count(record, "gres/shard")
    return (f"shard:{shards}", shards / 4) if shards else ("", 0.0)


def history(records: Sequence[JobRecord], since: float) -> list[Run]:
    """The GPU runs submitted since ``since`` that started, in submission order, idle stretches cut."""
    ran = sorted((r for r in records if r.start and r.submit >= since and gpus_of(r)[0]), key=lambda r: r.submit)
    out: list[Run] = []
    shift, busy_until = 0.0, None
    for r in ran:
        if busy_until is not None and r.submit - busy_until > GAP:
            shift += r.submit - busy_until - GAP
        end = r.end or (r.start + r.elapsed)
        busy_until = end if busy_until is None else max(busy_until, end)
        gres, gpus = gpus_of(r)
        out.append(
            Run(
                len(out),
                r.job_id,
                r.submit - shift - (ran[0].submit if ran else 0),
                r.partition,
                r.account,
                gres,
                gpus,
                max(1, count(r, "cpu")),
                max(1, r.elapsed),
                r.time_limit or max(60, r.elapsed),
            )
        )
    return out


def product_limit(run: Run, model: TimeModel, base_buffer: float, rng: random.Random) -> int:
    """The limit yolo-sbatch would have given this run: its prediction (the true time off by an
    error drawn from the partition's calibrated accuracy) with the buffer the model gives it."""
    if model.n and (model.noise_relative or model.noise_seconds):
        sigma = model.noise(run.seconds)
    elif model.n and model.cv_median:
        sigma = model.cv_median / 0.6745  # |error|'s median of a normal is 0.6745 sigma
    else:
        sigma = PRIOR_NOISE
    bias = -math.log1p(model.cv_bias) if model.n and model.cv_bias and model.cv_bias > -1 else 0.0
    predicted = run.seconds / math.exp(rng.gauss(bias, sigma))  # log(actual / predicted) ~ N(bias, sigma)
    return time_limit(predicted, buffer_for(model, base_buffer, predicted).value)


def limits(runs: Sequence[Run], arm: str, config: Config, seed: int) -> dict[int, int]:
    """Each run's limit in ``arm``, seconds."""
    if arm == "as submitted":
        return {r.key: r.asked for r in runs}
    rng = random.Random(seed)
    models = {p: calibration.load(config, p).model for p in sorted({r.partition for r in runs})}
    return {r.key: product_limit(r, models[r.partition], config.estimate.buffer, rng) for r in runs}


def minutes(seconds: float, scale: float) -> int:
    """A limit of ``seconds`` (simulated) as the replay's whole real minutes, never under one."""
    return max(1, math.ceil(seconds / scale / 60))


class Replayer:
    """Submits an arm's runs to the replay cluster at their times and reads back what Slurm did."""

    def __init__(self, on: Path, scale: float, timeout: float) -> None:
        self.on, self.scale, self.timeout = on, scale, timeout

    def submit(self, run: Run, arm: str, limit: int, sleep: float, after: int | None = None) -> int:
        args = [
            f"--job-name={NAME}-{arm.replace(' ', '-')}-{run.job_id}",
            f"--partition={run.partition}",
            f"--account={run.account}",
            f"--gres={run.gres}",
            f"--cpus-per-task={run.cpus}",
            f"--time={minutes(limit, self.scale)}",
            "--output=/dev/null",
            "--no-requeue",
        ]
        if after is not None:
            args.append(f"--dependency=afterany:{after}")
        script = f"#!/bin/sh\nexec sleep {max(0.1, sleep / self.scale):.2f}\n"
        return commands.submit(script, args, bin_dir=self.on, timeout=self.timeout)

    def idle(self) -> bool:
        return not commands.queued_jobs(bin_dir=self.on)

    def replay(self, runs: Sequence[Run], arm: str, limit_of: dict[int, int], say: Callable[[str], None]) -> ArmResult:
        """One arm: every run submitted at its time (over ``scale``), a run its limit is too short for
        followed, in slurm-yolo's arm, by a job for the rest of it (the requeue from its checkpoint);
        then every job's record read back once the queue is empty."""
        if not self.idle():
            raise UsageError("the replay cluster has jobs queued or running: simulate needs it idle")
        started = time.time()
        ids: dict[int, int] = {}
        followups: dict[int, int] = {}
        for run in runs:
            delay = started + run.at / self.scale - time.time()
            if delay > 0:
                time.sleep(delay)
            limit = limit_of[run.key]
            real_limit = minutes(limit, self.scale) * 60 * self.scale
            ids[run.key] = self.submit(run, arm, limit, min(run.seconds, real_limit + 60 * self.scale))
            if arm != "as submitted" and run.seconds > real_limit:  # killed at its limit: the rest goes on
                rest = run.seconds - real_limit
                followups[run.key] = self.submit(run, arm, time_limit(rest, 0.2), rest, after=ids[run.key])
        say(f"simulate: {arm}: {len(ids)} runs submitted; waiting for the replay cluster to drain")
        deadline = time.time() + max(600.0, 4 * (runs[-1].at if runs else 0) / self.scale + 600)
        while not self.idle():
            if time.time() > deadline:
                raise UsageError(f"simulate: {arm}: the replay cluster did not drain in time")
            time.sleep(POLL)
        return self.measure(runs, arm, ids, followups, started)

    def measure(
        self, runs: Sequence[Run], arm: str, ids: dict[int, int], followups: dict[int, int], t0: float
    ) -> ArmResult:
        every = [*ids.values(), *followups.values()]
        records = {job: found[-1] for job, found in commands.job_runs(every, bin_dir=self.on).items() if found}
        out = ArmResult(arm, jobs=len(ids), followups=len(followups))
        last = t0
        by_run = {run.key: run for run in runs}
        for original, job in ids.items():
            rec = records.get(job)
            if rec is None or not rec.start:
                continue
            out.waits.append((rec.start - rec.submit) * self.scale)
            ended = [rec, *([records[f]] if (f := followups.get(original)) in records else [])]
            for r in ended:
                if r.start:
                    out.gpu_hours += r.elapsed * self.scale * by_run[original].gpus / 3600
                last = max(last, r.end or r.start + r.elapsed)
            if rec.state == "TIMEOUT":
                out.killed += 1
                if original not in followups:
                    out.gpu_hours_lost += rec.elapsed * self.scale * by_run[original].gpus / 3600
        out.makespan = (last - t0) * self.scale
        return out


def simulate(
    config: Config,
    records: Sequence[JobRecord],
    since: float,
    on: Path,
    scale: float,
    seed: int,
    say: Callable[[str], None],
    max_runs: int | None = None,
) -> list[ArmResult]:
    """The history since ``since`` (``records``: sacct's runs) replayed on the cluster whose client
    commands are in ``on``, once per arm."""
    if not (0 < scale <= 3600):
        raise UsageError(f"--scale {scale:g}: give a factor between 1 and 3600")
    own, theirs = commands.cluster_name(config.bin_dir), commands.cluster_name(on)
    if own == theirs:
        raise UsageError(f"--on {on} is cluster {own}, this site's own: simulate replays on a replay cluster")
    runs = history(records, since)[:max_runs]
    if not runs:
        raise UsageError("no GPU run in that window of the history: nothing to replay")
    missing = sorted({r.partition for r in runs} - set(commands.partitions(on)))
    if missing:
        raise UsageError(
            f"the replay cluster {theirs} has no partition {', '.join(missing)}: bring it up from"
            " `slurm-yolo simulate --spec` (deploy/replaycluster up SPEC.json)"
        )
    replayer = Replayer(on, scale, config.slurm.timeout_seconds)
    say(
        f"simulate: {len(runs)} GPU runs of {own} since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))},"
        f" replayed on {theirs} at x{scale:g}: about {runs[-1].at / scale / 60:.0f} min of submissions per arm"
    )
    return [replayer.replay(runs, arm, limits(runs, arm, config, seed), say) for arm in ARMS]


def records(config: Config, since: float, until: float) -> list[JobRecord]:
    """Every run of the history between ``since`` and ``until``, read a day at a time (as the sweeps
    read sacct: one slow day neither times out the rest nor holds a month in one answer)."""
    found = {
        (r.job_id, r.submit): r
        for a, b in commands.days(since, until)
        for r in commands.runs_since(a, bin_dir=config.bin_dir, timeout=config.slurm.timeout_seconds * 2, until=b)
    }
    return list(found.values())


def spec(config: Config, records: Sequence[JobRecord], since: float) -> dict[str, object]:
    """A ``deploy/replaycluster`` spec of this cluster: its GPU partitions' nodes as sinfo states
    them, and the history's accounts (root submits the replay under each)."""
    parts = commands.partition_nodes(bin_dir=config.bin_dir, timeout=config.slurm.timeout_seconds)
    if not parts:
        raise UsageError("sinfo lists no GPU node: nothing to replay on")
    accounts = sorted({r.account for r in history(records, since)} or {"vision"})
    return {
        "name": re.sub(r"[^a-z0-9]", "", commands.cluster_name(config.bin_dir).lower())[:30] + "sim",
        "partitions": parts,
        "users": {"root": accounts},
    }
