"""The controller reads nothing of the users', on the real bundled clusters (Slurm 22.05 and 24.11).

The jobs work on deploy/minicluster's users' file system, which this host and the 24.11 root see
(login and compute nodes) and slurmctld and hookd do not (each runs in a mount namespace where it is
an empty tmpfs). A job's launcher tells the controller what it did through its own Comment
(``beacon``), and the epilog's feedback reads it there: a completed run becomes a calibration sample,
its training seconds capped at Slurm's elapsed. The job here is the launcher's own reporter
(``launcher.CommentReporter``) on usage records written as the launcher writes them, so that it runs
on 24.11 too, whose root has no torch; test_jobside trains for real on 22.05.

Expected values come from the records the test wrote and sacct's ElapsedRaw, not from the code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Slurm, poll, run_reporting, sample_of

from slurm_yolo.parse import beacon

pytestmark = pytest.mark.cluster


def controller_sees(slurm: Slurm, path: Path) -> bool:
    """Whether ``path`` is there for the cluster's slurmctld or its hookd, each in its own view."""
    run = slurm.state_dir.parent.parent / "run"
    return any(
        Path(f"/proc/{(run / f'{d}.pid').read_text().strip()}/root{path}").exists() for d in ("slurmctld", "hookd")
    )


def test_completed_runs_feedback_reaches_a_controller_that_cannot_see_their_work_dirs(slurm: Slurm, work: Path) -> None:
    """An honest run's summary becomes its sample; alice's other job claims 100,000 s of training in
    a job Slurm saw run for seconds, and its sample is capped at Slurm's elapsed. (The two jobs run
    at once: their waits overlap.)"""
    honest = run_reporting(slurm, work, [1.5, 2.25, 3.0], sleep=2)
    forged = run_reporting(slurm, work, [50_000.0, 50_000.0], sleep=1)
    row = slurm.ended(honest)[0]
    assert row["State"] == "COMPLETED"
    usage = work / f"yolo-usage-{honest}.jsonl"
    assert usage.is_file() and not controller_sees(slurm, usage)
    comment = slurm.cmd("sacct", "-X", "-n", "-P", "-j", str(honest), "-o", "Comment").stdout.strip()
    assert comment.startswith("yolo:eff=1,pred_s=9;run:at="), comment  # the estimate kept, the summary after it
    got = poll(f"job {honest}'s sample", lambda: sample_of(slurm, honest))
    elapsed = int(row["ElapsedRaw"])
    assert got.train_seconds == pytest.approx(min(6.75, elapsed))  # 1.5 + 2.25 + 3.0, within Slurm's elapsed
    assert got.workload.epochs == 3 and got.workload.train_images == 40 and got.workload.imgsz == 320
    assert got.total_seconds == (float(elapsed) if elapsed >= 6.75 else None)  # one run: the job's whole time
    assert got.gpus == 1

    row = slurm.ended(forged)[0]
    assert row["State"] == "COMPLETED"
    got = poll(f"job {forged}'s sample", lambda: sample_of(slurm, forged))
    assert got.train_seconds == float(row["ElapsedRaw"]) and got.total_seconds is None
    text = slurm.cmd("sacct", "-X", "-n", "-P", "-j", str(forged), "-o", "Comment").stdout.strip()
    summary = beacon.decode(beacon.summary_text(text))
    assert summary is not None and summary.train_seconds == 100_000.0  # what she claimed, kept as she wrote it


def test_the_watchdog_on_the_controller_judges_a_job_by_its_comment_alone(slurm: Slurm, work: Path) -> None:
    """alice's job whose launcher last saw progress an hour ago, working where the controller cannot
    look: `slurm-yolo watchdog` as the cluster's admins run it finds it, and cancels it alone."""
    stale = (
        "T=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID}\n"
        'scontrol update JobId=${T:-$SLURM_JOB_ID} Comment="yolo:eff=1;run:at=$(($(date +%s) - 3600)),ep=1,s=1,'
        'one=1,g=1,c=1" || exit 3\nsleep 300\n'
    )
    job = slurm.sbatch("-p", "t4", "--gres=shard:t4:1", "-t", "10", "-D", str(work), script=stale, user="alice")
    try:
        poll("its summary", lambda: ";run:" in slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%k").stdout)
        assert not controller_sees(slurm, work)
        poll(
            "4 s of running",
            lambda: (
                slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%M").stdout.strip()
                not in ("", "0:00", "0:01", "0:02", "0:03", "0:04")
            ),
        )
        dry = slurm.cli("watchdog", "--stall-minutes", "0.05", "--dry-run", "--json")
        mine = [z for z in json.loads(dry.stdout) if z["job_id"] == job]
        assert len(mine) == 1 and mine[0]["evidence"][0].endswith("(its Comment)"), dry.stdout
        cancelled = slurm.cli("watchdog", "--stall-minutes", "0.05", "--action", "cancel")
        assert f"job {job}: silent" in cancelled.stdout
        assert slurm.ended(job)[0]["State"].startswith("CANCELLED")
    finally:
        slurm.cmd("scancel", str(job), check=False)
