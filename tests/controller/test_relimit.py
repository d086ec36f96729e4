"""A run requeued for time gets a longer limit only within what admission would admit now: the
account's balance less its commitments (its other pending GPU jobs, from Slurm; what other clusters
sharing the ledger counted), over the job's cost per minute. Slurm's commands are stood in for;
every expected number is worked out here from the prices, GPUs and limits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_yolo.controller import relimit, settler
from slurm_yolo.core import config, spec
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError
from slurm_yolo.core.model import estimate
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import JobRecord
from slurm_yolo.state import ledger
from slurm_yolo.state.eventlog import log_path
from slurm_yolo.state.ledger import store

T4 = 1_000  # tokens per GPU-second
FUNDED = 10_000_000
LIMIT = 180  # -t 3
RAN = 150  # inside its USR2's lead: requeued for time
JOB = 41
CLUSTER = "yolo"
NOW = int(time.time())


def record(job_id: int, state: str, limit: int | None, gres: str = "gres/gpu=1", **kw: object) -> JobRecord:
    base = JobRecord(
        job_id=job_id,
        submit=NOW - 400,
        state=state,
        partition="t4",
        account="vision",
        qos="normal",
        user="root",
        tres={"cpu": "1", "node": "1", **dict([gres.split("=")])},
        time_limit=limit,
    )
    return base._replace(**kw)  # type: ignore[arg-type]


def summary() -> beacon.Beacon:
    """What a hostile user writes in her Comment: 10 of 100,000 epochs in 20 s (asks for a year)."""
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    w = estimate.workload(spec.parse(["train", "data=d.yaml", "epochs=100000", "imgsz=64"]), 16, 8, m)
    return beacon.Beacon(NOW, 10, 20.0, False, 1, 1, w)


@pytest.fixture
def cfg(site_config: Path) -> Config:
    return config.load()


@pytest.fixture
def requeued(cfg: Config) -> tuple[JobRecord, store.Row]:
    """alice's job: funded exactly, its 3-minute run held at t4's price and settled REQUEUED after 150 s."""
    rec = record(JOB, "REQUEUED", LIMIT, user="alice", elapsed=RAN, start=NOW - 300, end=NOW - 150, cluster=CLUSTER)
    with ledger.writer(cfg) as lg:
        lg.set_price("t4", T4, 0, "test")
        lg.credit("vision", FUNDED, "test")
        found = settler.billable_run(lg, rec, CLUSTER, cfg, time.time(), 0)  # at the price set now
        assert found is not None and found[1] == LIMIT * T4
        lg.hold(found[0], found[1], None, actor="test")
        assert lg.settle(found[0].key, RAN * T4, "REQUEUED", RAN, actor="test") is not None
        row = lg.run(found[0].key)
        assert row is not None
        assert lg.balance("vision") == FUNDED - RAN * T4
    return rec, row


class Slurm:
    """What the settler asks Slurm, stood in for: the account's jobs, MaxTime, and the limits set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, jobs: list[JobRecord] | Exception, maxtime: int | None) -> None:
        self.set: list[tuple[str, int, str]] = []

        def queued_jobs(bin_dir: Path | None = None) -> list[JobRecord]:
            if isinstance(jobs, Exception):
                raise jobs
            return jobs

        monkeypatch.setattr(commands, "queued_jobs", queued_jobs)
        monkeypatch.setattr(commands, "partition_time_limit", lambda partition, bin_dir=None: maxtime)
        monkeypatch.setattr(
            commands, "set_time_limit", lambda job, seconds, qos="", bin_dir=None: self.set.append((job, seconds, qos))
        )


def events(cfg: Config) -> list[dict]:
    path = log_path(cfg)
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("event") == "relimit"]


def test_the_new_limit_is_what_admission_would_admit_beside_a_co_members_pending_job(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice's account, funded 10,000,000, paid 150,000 for her first run and holds 3,600,000 for a
    running job of root's (its hold is out of the balance already: 6,250,000 left). Pending on that
    balance: root's admitted job (1 GPU, 60 min: 3,600,000), a 2-task array of 1 shard for 10 min (2 x
    600 s x 1/4 GPU: 300,000), and a running job not held yet (2 GPUs, 5 min: 600,000); another
    account's job and a CPU job count nothing, and another cluster of the ledger counted 1,000,000 for
    vision. The job itself, pending again at 3 minutes, is left out. Left: 6,250,000 - 4,500,000 -
    1,000,000 = 750,000; at 60,000 a minute, 12 minutes (the summary asked for a year)."""
    rec, row = requeued
    jobs = [
        record(JOB, "PENDING", LIMIT, user="alice"),  # itself
        record(50, "PENDING", 3600),
        record(51, "PENDING", 600, gres="gres/shard=1"),
        record(51, "PENDING", 600, gres="gres/shard=1"),
        record(52, "RUNNING", 300, gres="gres/gpu=2"),
        record(53, "RUNNING", 3600),
        record(54, "PENDING", 3600, account="research"),
        record(55, "PENDING", 3600, gres="gres/gpu=0"),  # a CPU job
    ]
    with ledger.writer(cfg) as lg:
        held = record(53, "RUNNING", 3600, start=NOW - 10)
        found = settler.billable_run(lg, held, CLUSTER, cfg, time.time(), 0)
        assert found is not None
        lg.hold(found[0], found[1], None, actor="test")
        assert lg.admit("other", "vision", 0, {"vision": 1_000_000}).ok
    slurm = Slurm(monkeypatch, jobs, maxtime=None)
    balance = FUNDED - RAN * T4 - 3600 * T4  # the held running job's hold is out of it
    committed = 3600 * T4 + 2 * 600 * T4 // 4 + 300 * 2 * T4
    minutes = (balance - committed - 1_000_000) // (60 * T4)
    assert (balance, committed, minutes) == (6_250_000, 4_500_000, 12)
    assert relimit.relimit(cfg, rec, row, summary()) == minutes * 60
    assert slurm.set == [(str(JOB), minutes * 60, "")]
    (event,) = events(cfg)
    assert event["cap"] == "the account's balance less its commitments"
    assert (event["balance"], event["committed"], event["elsewhere"], event["per_minute"]) == (
        balance,
        committed,
        1_000_000,
        60 * T4,
    )
    assert event["result"] == f"raised to {minutes} min (capped by the account's balance less its commitments)"


def test_a_job_pending_on_several_partitions_is_priced_at_the_dearest(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hostile review's case: a -p t4,a100 job ran on t4 (sacct's record of the run), then pends on
    both. Beside a co-member's 60-minute t4 job (3,600,000), its next limit is priced at a100's 3,000 a
    GPU-second: (9,850,000 - 3,600,000) // 180,000 = 34 minutes, so its next run, wherever it starts,
    and the co-member's job fit the balance together (t4's price would have given 104 minutes)."""
    rec, row = requeued
    with ledger.writer(cfg) as lg:
        lg.set_price("a100", 3 * T4, 0, "test")
    jobs = [record(JOB, "PENDING", LIMIT, user="alice", partition="t4,a100"), record(50, "PENDING", 3600)]
    Slurm(monkeypatch, jobs, maxtime=None)
    balance = FUNDED - RAN * T4
    minutes = (balance - 3600 * T4) // (60 * 3 * T4)
    assert minutes == 34
    assert relimit.relimit(cfg, rec, row, summary()) == minutes * 60
    assert minutes * 60 * 3 * T4 + 3600 * T4 <= balance
    assert events(cfg)[-1]["per_minute"] == 60 * 3 * T4


def test_without_commitments_the_balance_alone_caps_it_and_maxtime_below_that_wins(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing pending: 9,850,000 at 60,000 a minute is 164 minutes; a MaxTime of 2 hours is less."""
    rec, row = requeued
    assert (FUNDED - RAN * T4) // (60 * T4) == 164
    slurm = Slurm(monkeypatch, [record(JOB, "PENDING", LIMIT, user="alice")], maxtime=None)
    assert relimit.relimit(cfg, rec, row, summary()) == 164 * 60
    slurm = Slurm(monkeypatch, [], maxtime=7200)
    assert relimit.relimit(cfg, rec, row, summary()) == 7200 and slurm.set == [(str(JOB), 7200, "")]
    assert [e.get("cap") for e in events(cfg)] == [
        "the account's balance less its commitments",
        "the partition's MaxTime",
    ]


def test_commitments_the_balance_cannot_cover_keep_the_limit(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A co-member's pending job worth all but 100,000 of the balance: less than 2 minutes left, and the
    limit (3 minutes) stays; nothing is set."""
    rec, row = requeued
    pending = record(60, "PENDING", (FUNDED - RAN * T4 - 100_000) // T4)
    slurm = Slurm(monkeypatch, [pending], maxtime=None)
    assert relimit.relimit(cfg, rec, row, summary()) is None and slurm.set == []
    (event,) = events(cfg)
    assert event["result"] == "kept: the account's balance less its commitments" and event["committed"] == (
        FUNDED - RAN * T4 - 100_000
    )


def test_slurm_not_answering_keeps_the_limit(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: with no job list, the commitments are unknown, and so is what admission would admit."""
    rec, row = requeued
    slurm = Slurm(monkeypatch, SlurmError("squeue: slurm_load_jobs error: Unable to contact slurm controller"), None)
    assert relimit.relimit(cfg, rec, row, summary()) is None and slurm.set == []
    (event,) = events(cfg)
    assert event["result"].startswith("kept: the account's commitments could not be learned (squeue: slurm_load_jobs")


def test_a_requeue_not_for_time_asks_slurm_nothing(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 s into a 3-minute run is no requeue for time: no limit, and no squeue."""
    rec, row = requeued
    slurm = Slurm(monkeypatch, SlurmError("not to be asked"), None)
    assert relimit.relimit(cfg, rec._replace(elapsed=20), row, summary()) is None and slurm.set == []
    assert events(cfg) == []


def test_a_job_whose_limit_is_past_a_year_is_no_commitment_to_guess(cfg: Config) -> None:
    """squeue's INVALID (a limit past a year) has no worst case to read (the relimit keeps the limit);
    a job that may run on an exempt partition or another counts the other's worst case."""
    with ledger.writer(cfg) as lg:
        with pytest.raises(ValueError, match="past a year"):
            relimit.job_worst(lg, record(70, "PENDING", -1), cfg, CLUSTER, NOW)
        assert relimit.job_worst(lg, record(71, "PENDING", 60, partition="debug,t4"), cfg, CLUSTER, NOW) == 60 * (
            cfg.ledger.default_price
        )
        assert relimit.job_worst(lg, record(72, "PENDING", 60, partition="debug"), cfg, CLUSTER, NOW) == 0


SHARED_JOBS = [
    record(JOB, "PENDING", LIMIT, user="alice"),  # itself, at its present limit: 180,000
    record(50, "PENDING", 3600),  # root's: 3,600,000
    record(54, "PENDING", 600, account="research"),  # 600,000, another account's
]


def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite books as a ledger several clusters share (MariaDB's turn counter), same arithmetic."""
    monkeypatch.setattr(ledger.Ledger, "version", lambda self: 1)


def test_on_a_shared_ledger_the_longer_limit_is_counted_for_the_other_clusters(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """9,850,000 less root's 3,600,000 here and 1,000,000 another cluster counted: 5,250,000, 87
    minutes. The new limit is counted in the ledger, in one turn with the other clusters' admissions:
    this cluster's commitments are now root's job and the job at 87 minutes (3,600,000 + 5,220,000)
    for vision, research's as they were."""
    rec, row = requeued
    with ledger.writer(cfg) as lg:
        assert lg.admit("other", "vision", 0, {"vision": 1_000_000}).ok
    shared(monkeypatch)
    slurm = Slurm(monkeypatch, SHARED_JOBS, maxtime=None)
    minutes = (FUNDED - RAN * T4 - 3600 * T4 - 1_000_000) // (60 * T4)
    assert minutes == 87
    assert relimit.relimit(cfg, rec, row, summary()) == minutes * 60 and slurm.set == [(str(JOB), minutes * 60, "")]
    with ledger.writer(cfg) as lg:
        counted = {r["account"]: r["tokens"] for r in lg.commitments(CLUSTER)}
    assert counted == {"vision": 3600 * T4 + minutes * 60 * T4, "research": 600 * T4}


def test_on_a_shared_ledger_another_clusters_admission_meanwhile_keeps_the_limit(
    cfg: Config, requeued: tuple[JobRecord, store.Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the settler's look and its ledger turn, another cluster admits 2,000,000 more for vision:
    the 87 minutes no longer fit (5,220,000 + 3,600,000 + 2,000,000 > 9,850,000), the limit stays, and
    this cluster's commitments are what Slurm shows (the job at its present 3 minutes)."""
    rec, row = requeued
    with ledger.writer(cfg) as lg:
        assert lg.admit("other", "vision", 0, {"vision": 1_000_000}).ok
    shared(monkeypatch)
    slurm = Slurm(monkeypatch, SHARED_JOBS, maxtime=None)
    looked = relimit._room

    def racing(*args: object) -> relimit.Room:
        room = looked(*args)  # type: ignore[arg-type]
        with ledger.writer(cfg) as lg:
            assert lg.admit("other", "vision", 0, {"vision": 2_000_000}).ok
        return room

    monkeypatch.setattr(relimit, "_room", racing)
    assert relimit.relimit(cfg, rec, row, summary()) is None and slurm.set == []
    (event,) = events(cfg)
    assert event["result"] == (
        "kept: the account's balance less its commitments, in the shared ledger's turn: balance 9850000,"
        " 3780000 committed here and 2000000 elsewhere"
    )
    with ledger.writer(cfg) as lg:
        counted = {r["account"]: r["tokens"] for r in lg.commitments(CLUSTER)}
    assert counted == {"vision": 3600 * T4 + LIMIT * T4, "research": 600 * T4}
