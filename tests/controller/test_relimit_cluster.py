"""A run requeued for time comes back with the limit its progress asks for (``slurm_yolo.core.limits``),
on the real bundled clusters (Slurm 22.05 and 24.11), as a hostile user would try it.

alice's job has a 3-minute limit and a USR2 90 s before it. At its USR2 it posts the summary a
launcher posts (its workload and its progress: 10 of 100,000 epochs in 20 s of training, a lie that
asks for days) and requeues itself, as the launcher does; its second run ends at once. The settler
(as the SlurmUser) gives the requeued job a longer limit, but no longer than what admission would
admit for vision now: its balance after the first run's settlement less the worst cases of its other
pending GPU jobs (a co-member's, admitted on that balance, among them); the second run is held and
charged at that limit. Every number expected here comes from sacct's and squeue's records, the test's
price and the balance it set, never from slurm-yolo's code.
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

        # what admission would admit now, in whole minutes: vision's balance less the held early job
        # pending at the 3 minutes she set (1 GPU), far below the days the summary asked
        assert minutes_left(slurm, lowered) == 3  # hers, not raised
        minutes = (BALANCE - (ran + soon) * T4 - 3 * 60 * T4) // (60 * T4)
        assert minutes > LIMIT // 60
        got = poll("the requeued job's new limit", lambda: (n := minutes_left(slurm, job)) != LIMIT // 60 and n, 120)
        assert got == minutes and minutes_left(slurm, lowered) == 3
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


def limit_of(slurm: Slurm, job: int) -> int:
    """The job's TimeLimit in seconds, as ``scontrol show job`` prints it ([D-]HH:MM:SS)."""
    text = slurm.cmd("scontrol", "show", "job", "-o", str(job)).stdout
    field = next(w for w in text.split() if w.startswith("TimeLimit="))
    days, _, clock = field.removeprefix("TimeLimit=").rpartition("-")
    h, m, s = ([0, 0, 0] + [int(x) for x in clock.split(":")])[-3:]
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def test_a_forged_requeue_for_time_leaves_a_co_members_admitted_job_its_tokens(slurm: Slurm) -> None:
    """vision is funded with exactly 2,000,000 tokens. root, a member of vision, has a GPU job admitted
    on that balance and pending until its begin time (an hour away): 1 GPU for 20 minutes. alice's
    ``-t 3`` job posts a forged summary (a year of epochs left) and requeues itself 40 s in: a requeue
    for time. Its new limit is what admission would admit beside root's job, (balance - root's worst
    case) / a minute's price, in whole minutes, not what the balance alone would hold; its second run
    is held and charged exactly that (on a shared ledger, counted there for the other clusters'
    admissions), and root's job, started while it runs, is held in full and runs: not cancelled at
    its start as over budget."""
    balance = 2_000_000
    set_test_prices(slurm)
    nothing_pending(slurm, "vision")
    fund(slurm, ("vision",), balance)
    started = int(time.time()) - 1
    hostile = f"""if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then sleep 45; exit 0; fi
sleep 40
scontrol update JobId=$SLURM_JOB_ID Comment="{forged_comment()}"
scontrol requeue $SLURM_JOB_ID
sleep 600"""
    job = slurm.sbatch(
        "-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "3", "--requeue", script=hostile, user="alice"
    )
    # admitted after hers (admission counts a job of the last two seconds twice: hers first, both fit)
    theirs = slurm.sbatch(
        "-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "20", "--begin=now+1hour", script="sleep 600"
    )
    try:
        first = slurm.settled(job, 1, timeout=180)[0]
        ran = int(slurm.ended(job)[0]["ElapsedRaw"])
        assert first["submit_time"] >= started
        assert (first["end_state"], first["hold"], first["charge"]) == ("REQUEUED", LIMIT * T4, ran * T4)

        # root's job as slurmctld has it: pending, 1 GPU on t4, its limit: its worst case
        state, gres = slurm.cmd("squeue", "-h", "-j", str(theirs), "-o", "%T|%b").stdout.strip().split("|")
        assert state == "PENDING" and gres.endswith("gpu:t4:1")
        worst = limit_of(slurm, theirs) * 1 * T4
        assert worst == 20 * 60 * T4
        minutes = (balance - ran * T4 - worst) // (60 * T4)
        alone = (balance - ran * T4) // (60 * T4)  # what the balance alone would have given
        assert LIMIT // 60 < minutes < alone
        got = poll("the requeued job's new limit", lambda: (n := limit_of(slurm, job)) != LIMIT and n, 120)
        assert got == minutes * 60
        if slurm.config().ledger.backend == "mariadb":  # the other clusters' admissions count it from now on
            with slurm.ledger() as lg:
                counted = [r["tokens"] for r in lg.commitments(slurm.name) if r["account"] == "vision"]
            assert counted == [worst + minutes * 60 * T4]

        skip_requeue_delay(job, slurm)
        held = poll("the second run held", lambda: [r for r in slurm.runs(job) if r["state"] == "held"], 120)[0]
        assert held["hold"] == minutes * 60 * T4
        slurm.cmd("scontrol", "update", f"jobid={theirs}", "starttime=now")
        theirs_held = poll("root's run held", lambda: [r for r in slurm.runs(theirs) if r["state"] == "held"], 120)
        assert theirs_held[0]["hold"] == worst
        with slurm.ledger() as lg:
            left = lg.account("vision")["balance"]
        assert left == balance - ran * T4 - minutes * 60 * T4 - worst and left >= 0
        time.sleep(3)  # a prolog's over-budget cancel comes 2 s after its hold (hooks.CANCEL_AFTER): none came
        assert slurm.cmd("squeue", "-h", "-j", str(theirs), "-o", "%T").stdout.strip() == "RUNNING"

        second = slurm.settled(job, 2, timeout=180)[1]
        again = int(slurm.ended(job, 2)[1]["ElapsedRaw"])
        assert (second["end_state"], second["hold"], second["charge"]) == (
            "COMPLETED",
            minutes * 60 * T4,
            again * T4,
        )
        slurm.cmd("scancel", str(theirs))
        mine = slurm.settled(theirs, 1, timeout=120)[0]
        spent = int(slurm.ended(theirs)[0]["ElapsedRaw"])
        assert (mine["hold"], mine["charge"]) == (worst, spent * T4)
        with slurm.ledger() as lg:
            assert lg.account("vision")["balance"] == balance - (ran + again + spent) * T4
            assert lg.check() == []
    finally:
        slurm.cmd("scancel", str(job), str(theirs), check=False)
        fund(slurm, ("vision",), 10**15)
