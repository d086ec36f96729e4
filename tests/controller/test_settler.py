"""The settler's pure parts (its cluster behaviour is in the money path's cluster tests)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_yolo.controller import settler
from slurm_yolo.core import config
from slurm_yolo.slurm.records import JobRecord
from slurm_yolo.state import ledger


@pytest.mark.parametrize(
    ("timeout", "grace"),
    [("30 sec", 120.0), ("120 sec", 300.0), ("", 300.0), ("(null)", 300.0)],
)
def test_a_swept_run_waits_out_a_controllers_takeover(timeout: str, grace: float) -> None:
    """A backup controller takes over within SlurmctldTimeout and may end the run again: twice that
    and a minute (Slurm's default 120 s when it does not say)."""
    assert settler.orphan_grace(timeout) == grace


def test_an_exempt_run_holds_nothing_and_settles_nothing(home: Path) -> None:
    """A run on an exempt partition or of an exempt account (any case) is no billable run: the prolog,
    the sweep and reconcile hold nothing for it, and its end settles nothing. The next partition's
    run holds its limit x GPUs x price."""
    cfg = config.load()
    cfg = replace(cfg, ledger=replace(cfg.ledger, exempt_partitions=("free",), exempt_accounts=("ops",)))
    base = JobRecord(
        job_id=1,
        submit=1_796_000_000,
        state="COMPLETED",
        partition="free",
        account="vision",
        qos="normal",
        user="alice",
        tres={"gres/gpu": "2"},
        time_limit=600,
        elapsed=100,
        start=1_796_000_005,
        cluster="yolo",
        end=1_796_000_105,
    )
    others = [base._replace(job_id=2, partition="t4", account="OPS"), base._replace(job_id=3, partition="t4")]
    with ledger.writer(cfg) as lg:
        assert settler.billable_run(lg, base, "yolo", cfg, base.start, 0) is None
        assert settler.billable_run(lg, others[0], "yolo", cfg, base.start, 0) is None
        assert settler.settle_runs(lg, [base], cfg, "test") == []
        assert settler.settle_runs(lg, [others[0]], cfg, "test") == []
        found = settler.billable_run(lg, others[1], "yolo", cfg, base.start, 0)
        assert found is not None and found[1] == 600 * 2 * cfg.ledger.default_price
        assert lg.runs(1, "yolo") == [] and lg.runs(2, "yolo") == []
