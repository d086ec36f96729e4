"""``slurm-yolo job``: one job as seff shows it, asserted against sacct and the ledger, on the bundled
22.05 cluster (the report's pandas is the host install's), for its owner and no one else under
PrivateData=jobs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import Slurm, fund, poll, report_private_data, skip_requeue_delay

pytestmark = pytest.mark.cluster


def test_a_finished_a_timed_out_and_a_requeued_job_are_what_sacct_and_the_ledger_say(cluster: Slurm) -> None:
    fund(cluster, ("vision",), 10**15)
    done = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "10", script="sleep 3", user="alice")
    late = cluster.sbatch(
        "-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "1", script="sleep 300", user="alice"
    )
    again = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 8", user="alice")

    def running(job: int) -> bool:
        return cluster.cmd("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip() == "RUNNING"

    poll(f"job {again} running", lambda: running(again), 120)
    cluster.cmd("scontrol", "requeue", str(again))
    skip_requeue_delay(again, cluster)
    runs = {done: 1, late: 1, again: 2}
    for job, count in runs.items():
        cluster.settled(job, count, timeout=240)

    def billed() -> dict | None:  # alice reads the published copy: it follows the books within a batch
        res = cluster.cli("job", f"{done},{late},{again}", "--json", user="alice")
        views = {s["job_id"]: s for s in json.loads(res.stdout)}
        return views if all(r["charge"] is not None for v in views.values() for r in v["runs"]) else None

    got = poll("the job views billed", billed, 60)
    for job, count in runs.items():
        sacct = cluster.ended(job, count)
        rows = cluster.settled(job, count)
        view = got[job]
        assert (view["user"], view["account"], len(view["runs"])) == ("alice", "vision", count)
        for r, rec, row in zip(view["runs"], sacct, rows, strict=True):
            assert (r["state"], r["elapsed_s"]) == (rec["State"].split(" ")[0], int(rec["ElapsedRaw"]))
            assert (r["hold"], r["charge"], r["refund"]) == (row["hold"], row["charge"], row["refund"])
        assert view["charge"] == sum(row["charge"] for row in rows)
    assert [r["state"] for r in got[again]["runs"]] == ["REQUEUED", "COMPLETED"]
    assert got[late]["state"] == "TIMEOUT" and any("hit its time limit" in a for a in got[late]["advice"])
    text = cluster.cli("job", str(done), user="alice").stdout
    assert text.startswith(f"Job {done}: COMPLETED\n  user alice, account vision, partition t4")


def test_under_private_data_a_job_is_its_owners_alone(cluster: Slurm) -> None:
    fund(cluster, ("vision",), 10**15)
    job = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 1", user="alice")
    cluster.ended(job)
    home = Path("/var/tmp/slurm-yolo-tests") / f"jobview-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    try:
        report_private_data(home, "jobs")
        env = {"SLURM_YOLO_CONFIG": str(home / "config.toml")}
        mine = cluster.cli("job", str(job), user="alice", extra_env=env)
        assert mine.stdout.startswith(f"Job {job}: COMPLETED\n")
        theirs = cluster.cli("job", str(job), user="bob", extra_env=env, check=False)
        assert (theirs.returncode, theirs.stdout) == (1, "")
        assert theirs.stderr == (
            f"Error: job {job} is not one you may see (bob: Slurm's PrivateData hides other users' jobs)\n"
        )
        assert cluster.cli("job", str(job), extra_env=env).returncode == 0  # root sees every job
    finally:
        shutil.rmtree(home, ignore_errors=True)
