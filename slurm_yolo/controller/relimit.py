"""A run requeued for time: its job's next limit, within what admission would admit now.

The limit the job's progress asks for (``limits.next_limit``, from the summary in its Comment: its
user's text, which asks but never widens a cap) is capped by the partition's MaxTime and by what
native admission (job_submit.lua) would admit for the account now: its balance less its
commitments, that is the worst cases of its other GPU jobs pending (and running, not yet held) on
this cluster, from slurmctld's own job list, and on a ledger several clusters share, what the other
clusters counted at their last admission (``Ledger.admit``); divided by what a minute of this job
costs. A limit raised past that would let the job's next run hold tokens a co-member's admitted job
was counted against, and that job would be cancelled at its start as over budget. On a shared
ledger the longer limit is counted there too, in one turn with the other clusters' admissions, so
theirs count it from then on. Commitments that cannot be learned (squeue does not answer) keep the
limit: fail closed.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, NamedTuple

from slurm_yolo.core import limits
from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import PAST_A_YEAR, JobRecord
from slurm_yolo.state import ledger
from slurm_yolo.state.eventlog import log_event

if TYPE_CHECKING:
    from slurm_yolo.state.ledger import store

BALANCE_CAP = "the account's balance less its commitments"
MAXTIME_CAP = "the partition's MaxTime"


def job_worst(lg: ledger.Ledger, job: JobRecord, config: Config, cluster: str, at: float) -> int:
    """What one task of ``job`` (slurmctld's record: its requested or allocated GPUs, partitions,
    limit, QOS) may hold when it starts, as job_submit.lua counts it: its dearest partition that is
    not exempt (time limit or the configured cap x GPU share x the price in effect at ``at`` x its
    QOS tier's rate, the dearest tier when it has none). 0 for a job without GPUs or of an exempt
    account. ValueError for a limit past a year (squeue's INVALID: no worst case to read)."""
    if job.time_limit == PAST_A_YEAR:
        raise ValueError(f"job {job.job_id}: a time limit past a year (squeue prints INVALID)")
    if ledger.exempt("", job.account, config):
        return 0
    seconds = ledger.limit_seconds(job.time_limit, config)
    rate = (
        lg.tier_rate(job.qos, cluster)
        if job.qos
        else max([policy.RATE_SCALE, *(int(r["rate_ppm"]) for r in lg.tiers())])
    )
    worst = 0
    for name in job.partition.split(","):
        if not name or ledger.exempt(name, "", config):
            continue
        share = policy.gpus(job.tres, config.partition(name).shards_per_gpu)
        price = lg.price_at(name, at, int(config.ledger.default_price), cluster)
        worst = max(worst, policy.tokens(seconds, share, price, rate))
    return worst


def committed_here(lg: ledger.Ledger, jobs: list[JobRecord], config: Config, cluster: str, at: float) -> dict[str, int]:
    """Per account, what its GPU jobs on ``cluster`` may still hold, from ``jobs`` (slurmctld's pending
    and running jobs there, one record per array task: ``commands.queued_jobs``). As job_submit.lua's
    ``committed``: a pending job counts each task's worst case, a running one only while the ledger
    holds none of its runs (just started, or its prolog failed)."""
    held = {job for c, job in lg.held_jobs() if c == cluster}
    totals: dict[str, int] = {}
    for j in jobs:
        if j.state == "PENDING" or (j.state == "RUNNING" and j.job_id not in held):
            worst = job_worst(lg, j, config, cluster, at)
            if worst:
                totals[j.account] = totals.get(j.account, 0) + worst
    return totals


def committed_elsewhere(lg: ledger.Ledger, account: str, cluster: str) -> int:
    """What the other clusters sharing the ledger counted for ``account`` at their last admission."""
    return sum(int(r["tokens"]) for r in lg.commitments() if r["account"] == account and r["cluster"] != cluster)


def _per_minute(lg: ledger.Ledger, rec: JobRecord, row: store.Row, config: Config, cluster: str, at: float) -> int:
    """What a minute of the job's next run may hold: the dearer of what its last run was held at and
    what admission prices it at now (a price or tier changed since; the default tier's, when a longer
    limit moves it out of the short QOS)."""
    held = policy.tokens(60, ledger.run_share(row), row["price"], row["rate_ppm"])
    q = config.qos
    qos = {rec.qos, q.of(config.estimate.default_priority)} if rec.qos == q.short else {rec.qos}
    now = (job_worst(lg, rec._replace(time_limit=60, qos=name), config, cluster, at) for name in qos)
    return max(held, *now)


class Room(NamedTuple):
    """What admission would count against a relimited job's account now (tokens)."""

    balance: int
    committed: int  # the account's GPU jobs on this cluster but this one (``committed_here``)
    elsewhere: int  # the account's commitments on the other clusters sharing the ledger
    per_minute: int  # what a minute of the job's next run may hold (``_per_minute``)
    here: dict[str, int]  # this cluster's commitments per account, the job at its present limit included
    shared: bool  # other clusters share the ledger: their admissions read its commitments

    @property
    def left(self) -> int:
        return max(0, self.balance - self.committed - self.elsewhere)


def _room(lg: ledger.Ledger, rec: JobRecord, row: store.Row, config: Config) -> Room:
    """``Room`` for ``rec``'s account, from slurmctld's job list (squeue first: no ledger statement is
    open across it) and the ledger. SlurmYoloError when squeue does not answer, ValueError when a job
    has no worst case to read."""
    jobs = commands.queued_jobs(bin_dir=config.bin_dir)
    cluster, at = str(row["cluster"]), time.time()
    here = committed_here(lg, jobs, config, cluster, at)
    others = committed_here(lg, [j for j in jobs if j.job_id != rec.job_id], config, cluster, at)
    # Priced as it waits now: sacct's record of the run names the partition it ran on, but the
    # requeued job pends on every partition it asked for and may start on the dearest (a hostile
    # review's -p t4,a100 job, relimited at t4's price, then held 3x on an a100)
    pending = next((j for j in jobs if j.job_id == rec.job_id), None)
    priced = rec._replace(partition=pending.partition) if pending is not None and pending.partition else rec
    return Room(
        lg.balance(rec.account),
        others.get(rec.account, 0),
        committed_elsewhere(lg, rec.account, cluster),
        _per_minute(lg, priced, row, config, cluster, at),
        here,
        lg.version() is not None,
    )


def _count_on_ledger(config: Config, rec: JobRecord, row: store.Row, room: Room, want: int) -> str:
    """On a shared ledger, count the job at its new limit among this cluster's commitments, in one
    ledger turn with every other cluster's admissions (``Ledger.admit``), so that theirs count it from
    now on; '' when it fits, else why not (another cluster admitted a job since ``room``)."""
    mine = room.here.get(rec.account, 0)
    need = room.per_minute * math.ceil(want / 60) - (mine - room.committed)  # beyond what it counts now
    with ledger.writer(config, publish=False) as lg:
        got = lg.admit(str(row["cluster"]), rec.account, max(0, need), room.here)
    if got.ok:
        return ""
    return (
        f"{BALANCE_CAP}, in the shared ledger's turn: balance {got.balance}, {got.committed_here} committed"
        f" here and {got.committed_elsewhere} elsewhere"
    )


def relimit(config: Config, rec: JobRecord, row: store.Row, summary: beacon.Beacon | None) -> int | None:
    """Give a job whose run was requeued for time (``limits``) the limit its progress asks for, within
    the partition's MaxTime and what admission would admit for its account now (its run just
    settled): its balance less its commitments on every cluster sharing the budget, this job left
    out, over the job's cost per minute; out of the short QOS (``qos.short``) into the default tier's
    when it outgrows it. The new limit, or None (kept)."""
    lead = int(config.job.signal_seconds)
    # near the limit it started with (the ledger's, from the prolog), or a longer one an admin set since:
    # a user may lower her job's limit to make an early requeue look like one for time (a hostile helper's)
    started = max(int(row["time_limit"] or 0), rec.time_limit or 0)
    if (
        summary is None
        or summary.workload is None
        or rec.time_limit is None
        or not limits.requeued_for_time(started, rec.elapsed, lead)
    ):
        return None
    asked = limits.next_limit(
        rec.time_limit,
        rec.elapsed,
        summary.train_seconds,
        summary.epochs_done,
        summary.workload.epochs,
        lead,
        float(config.estimate.buffer),
    )
    event: dict[str, object] = {"event": "relimit", "job": rec.job_id, "limit": rec.time_limit, "asked": asked}
    if asked <= rec.time_limit:
        log_event(config, {**event, "result": "kept"})
        return None
    bin_dir = config.bin_dir
    caps: list[tuple[int, str]] = []
    maxtime = commands.partition_time_limit(rec.partition, bin_dir=bin_dir)
    if maxtime is not None:
        caps.append((maxtime, MAXTIME_CAP))
    lg = ledger.reader(config)
    room: Room | None = None
    if lg is not None:
        with lg:
            try:
                room = _room(lg, rec, row, config)
            except (SlurmYoloError, ValueError) as e:
                why = f"the account's commitments could not be learned ({str(e).splitlines()[0][:200]})"
                log_event(config, {**event, "result": f"kept: {why}"})
                return None
    if room is not None and room.per_minute > 0:
        caps.append((room.left // room.per_minute * 60, BALANCE_CAP))
        event |= {
            "balance": room.balance,
            "committed": room.committed,
            "elsewhere": room.elsewhere,
            "per_minute": room.per_minute,
        }
    cap, which = min(caps, default=(asked, ""))
    want = min(asked, cap)
    if want <= rec.time_limit:
        log_event(config, {**event, "cap": which, "result": f"kept: {which}"})
        return None
    if room is not None and room.shared and room.per_minute > 0:
        refused = _count_on_ledger(config, rec, row, room, want)
        if refused:
            log_event(config, {**event, "result": f"kept: {refused}"})
            return None
    q = config.qos
    qos = q.of(config.estimate.default_priority) if rec.qos == q.short and want > q.short_max_minutes * 60 else ""
    commands.set_time_limit(str(rec.job_id), want, qos, bin_dir=bin_dir)
    capped = f" (capped by {which})" if want < asked else ""
    log_event(
        config,
        {
            **event,
            **({"cap": which} if want < asked else {}),
            "result": f"raised to {want // 60} min{capped}" + (f", qos {qos}" if qos else ""),
        },
    )
    return want
