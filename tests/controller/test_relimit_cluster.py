"""A run requeued for time comes back with the limit its progress asks for (``slurm_yolo.core.limits``),
on the real bundled clusters (Slurm 22.05 and 24.11), as a hostile user would try it.

alice's job has a 3-minute limit and a USR2 90 s before it. At its USR2 it posts the summary a
launcher posts (its workload and its progress: 10 of 100,000 epochs in 20 s of training, a lie that
asks for days) and requeues itself, as the launcher does; its second run ends at once. The settler
(as the SlurmUser) gives the requeued job a longer limit, but no longer than what vision's balance can
hold after the first run's settlement; the second run is held and charged at that limit. Every
number expected here comes from sacct's records, the test's price and the balance it set, never from
slurm-yolo's code.
"""

from __future__ import annotations

import time

import pytest
from conftest import PRICE, Slurm, fund, nothing_pending, poll, set_test_prices, skip_requeue_delay

from slurm_yolo.admin import report
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.parse import beacon

pytestmark = pytest.mark.cluster
T4 = PRICE["t4"]  # tokens per GPU-second, QOS normal (rate 1)
LIMIT = 180  # -t 3
BALANCE = 2_000_000  # covers the first run's 3-minute hold (180,000) and about 31 minutes more
PREDICTED = 60  # what yolo-sbatch would have written in its Comment: the accuracy view's prediction


def forged_comment() -> str:
    """The Comment a launcher would write after 10 epochs, with a workload of 100,000 epochs."""
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    w = estimate.workload(spec.parse(["train", "data=d.yaml", "epochs=100000", "imgsz=64"]), 16, 8, m)
    return beacon.with_beacon(
        f"yolo:eff=1,pred_s={PREDICTED}", beacon.Beacon(int(time.time()), 10, 20.0, False, 1, 1, w)
    )


def minutes_left(slurm: Slurm, job: int) -> int:
    """The job's TimeLimit in minutes, as squeue prints it ([D-][H:]M:SS)."""
    text = slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%l").stdout.strip()
    days, _, clock = text.rpartition("-")
    h, m, s = ([0, 0, 0] + [int(x) for x in clock.split(":")])[-3:]
    return (int(days or 0) * 86400 + h * 3600 + m * 60 + s) // 60


def test_a_run_requeued_for_time_comes_back_with_the_longest_limit_its_account_can_hold(slurm: Slurm) -> None:
    """Beside it, a hostile helper's way around "for time": a 10-minute job that lowers its own limit
    to 3 minutes (a user may) and requeues itself 35 s in, with the same summary: inside the lead of
    the limit she set, not of the 10 minutes its run started under, so it was no requeue for time,
    and its limit stays the 3 minutes she set. (The
    settler does its followups in turn, so once the first job's limit is raised, the second's
    settlement has long been followed up.)"""
    set_test_prices(slurm)
    nothing_pending(slurm, "vision")
    fund(slurm, ("vision",), BALANCE)
    started = int(time.time()) - 1
    script = f"""#SBATCH --signal=B:USR2@90
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then exit 0; fi
trap 'scontrol update JobId=$SLURM_JOB_ID Comment="{forged_comment()}"; scontrol requeue $SLURM_JOB_ID; exit 0' USR2
sleep 600 & wait"""
    early = f"""sleep 35
scontrol update JobId=$SLURM_JOB_ID TimeLimit=3 Comment="{forged_comment()}"
scontrol requeue $SLURM_JOB_ID"""
    job = slurm.sbatch(
        "-A",
        "vision",
        "-p",
        "t4",
        "--gres=gpu:t4:1",
        "-t",
        "3",
        "--requeue",
        f"--comment=yolo:eff=1,pred_s={PREDICTED}",
        script=script,
        user="alice",
    )
    lowered = slurm.sbatch(
        "-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "10", "--requeue", script=early, user="alice"
    )

    def settled(job: int) -> list[dict]:
        return [r for r in slurm.runs(job) if r["state"] == "settled" and r["submit_time"] >= started]

    try:
        cut = poll("the early requeue settled", lambda: settled(lowered), timeout=120)[0]
        slurm.cmd("scontrol", "hold", str(lowered))  # no second run: it would hold what the first job's limit counts
        soon = int(slurm.ended(lowered)[0]["ElapsedRaw"])
        assert (cut["end_state"], cut["hold"], cut["charge"]) == ("REQUEUED", 600 * T4, soon * T4)
        first = poll("the first run settled", lambda: settled(job), timeout=300)[0]
        ran = int(slurm.ended(job)[0]["ElapsedRaw"])
        assert (first["end_state"], first["hold"], first["charge"]) == ("REQUEUED", LIMIT * T4, ran * T4)
        assert ran >= LIMIT - 90 - 60  # inside its USR2's lead, which Slurm may send 60 s early: for time

        # what vision can hold now, in whole minutes: the new limit, far below the days the summary asked
        minutes = (BALANCE - (ran + soon) * T4) // (60 * T4)
        assert minutes > LIMIT // 60
        got = poll("the requeued job's new limit", lambda: (n := minutes_left(slurm, job)) != LIMIT // 60 and n, 120)
        assert got == minutes and minutes_left(slurm, lowered) == 3  # hers, not raised
        skip_requeue_delay(job, slurm)
        second = slurm.settled(job, 2, timeout=300)[1]
        again = int(slurm.ended(job, 2)[1]["ElapsedRaw"])
        assert (second["end_state"], second["hold"], second["charge"]) == ("COMPLETED", minutes * 60 * T4, again * T4)
        with slurm.ledger() as lg:
            assert lg.account("vision")["balance"] == BALANCE - (ran + soon + again) * T4
            assert lg.check() == []
        # the accuracy view judges the job, both runs: its time is theirs, and the requeue for time a miss
        totals = report.job_totals(report.jobs(slurm.config(), report.Filters(user="alice")))
        (row,) = totals[totals["job_id"] == job].to_dict("records")
        assert (row["state"], row["elapsed"], row["pred_s"], row["missed"]) == (
            "COMPLETED",
            ran + again,
            PREDICTED,
            True,
        )
    finally:
        slurm.cmd("scancel", str(job), str(lowered), check=False)
        fund(slurm, ("vision",), 10**15)
