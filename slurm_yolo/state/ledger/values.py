"""The ledger's value types and the helpers its parts share: a run and its key, an admission's and a
settlement's answer, the SQL that keeps one cluster's rows."""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import NamedTuple, TypeVar

from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import Config
from slurm_yolo.state.ledger import store

REDACTED = "redacted"  # the published copy's table that says what was left out of it
CREDITS = ("deposit", "refill", "adjustment")


KINDS = (*CREDITS, "hold", "charge", "refund", "expiry", "overrun")


_WRITE_TURN = threading.Lock()


T = TypeVar("T")


class Run(NamedTuple):
    """One run of a job, from facts slurmctld sets, with the price and tier rate it is billed at."""

    cluster: str
    job_id: int
    submit: int  # epoch seconds: a requeued job's next run has its own
    restart: int
    account: str
    user: str
    partition: str
    qos: str
    gpus: Fraction  # whole GPUs, or shards as a share of one
    time_limit: int | None  # seconds; None: unlimited
    hold_seconds: int  # what the hold covers (the limit, or the configured cap)
    price: int  # tokens per GPU-second, the partition's price when the run was held
    rate_ppm: int  # the QOS tier's rate when the run was held, in parts per million

    @property
    def key(self) -> str:
        return run_key(self.cluster, self.job_id, self.submit)


def run_key(cluster: str, job_id: int, submit: int) -> str:
    """A run's key from Slurm's own numbers (the cluster's name, the job id, the run's submit time in
    epoch seconds): the same whichever hook or reconcile meets the run first."""
    return f"{cluster}:{int(job_id)}:{int(submit)}"


def limit_seconds(time_limit: int | None, config: Config) -> int:
    """A run's time limit as Slurm reports it (seconds; None: unlimited), or the configured cap: what
    its hold covers at the start, and what a TIMEOUT pays at least at the end (the limit then)."""
    return policy.hold_seconds(time_limit, policy.unlimited_cap(config.ledger.unlimited_hold_hours))


def exempt(partition: str, account: str, config: Config) -> str:
    """What keeps a run there off the books ('': nothing; ``policy.exempt`` with the ``[ledger]`` lists)."""
    led = config.ledger
    return policy.exempt(partition, account, led.exempt_partitions, led.exempt_accounts)


def run_share(row: store.Row) -> Fraction:
    """A held run's GPU share as the exact rational it was held at (a row of the jobs table)."""
    return Fraction(row["gpus_num"], row["gpus_den"])


class Admission(NamedTuple):
    """``Ledger.admit``'s answer, with the numbers a refusal shows."""

    ok: bool
    balance: int
    committed_here: int  # the account's pending worst cases on the asking cluster, before this job
    committed_elsewhere: int  # and on the ledger's other clusters
    wait: float = 0.0  # not ok now, but the account's refill covers it in this many seconds: it waits


class Settlement(NamedTuple):
    """What an epilog did: charged, refunded, and whether the account crossed zero."""

    key: str
    account: str
    hold: int
    charge: int
    refund: int
    balance: int
    blocked: bool | None  # the account's new blocked state, when this settlement changed it


def _of(cluster: str | None, unknown: bool = False) -> tuple[str, tuple[str, ...]]:
    """The SQL that keeps the rows of one cluster (None: every cluster; ``unknown``: with the rows of
    no known cluster): several clusters' runs share one MariaDB ledger, and each cluster's settler,
    reconcile and audit ask its own Slurm about its own runs only."""
    if cluster is None:
        return "", ()
    return ("AND cluster IN (?, '')", (cluster,)) if unknown else ("AND cluster = ?", (cluster,))
