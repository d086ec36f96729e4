"""deploy/replaycluster: the cluster `bench site` replays workloads on, beside the bundled ones. From a
spec in a temporary folder it brings up a slurmctld and one slurmd per node whose shapes (GPUs, CPUs,
memory) are the spec's, not this host's, accounting through the bundled 22.05 cluster's slurmdbd under
a ClusterName of its own; a GPU job runs there to COMPLETED and ``sacct -M`` shows it; ``down`` stops it,
and the bundled 22.05 cluster answers as before.

It runs a replay cluster of its own (its own state folder and ports, ClusterName ``replaytest``), so a
replay cluster up at the default ports and folder (``replay``) is left alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import MARKERS, ReplayCluster, _missing, between_ups

pytestmark = pytest.mark.cluster

STATE = Path("/var/lib/slurm-yolo-cluster/replay-test")  # under the bundled clusters' state, never a site's
PORT_CTLD, PORT_NODE = 6877, 17111  # neither minicluster's nor the default replay cluster's
NAME = "replaytest"
SPEC = {
    "name": NAME,
    "partitions": [
        {"name": "a100", "gpu_type": "a100", "nodes": 1, "gpus_per_node": 2, "cpus_per_node": 32, "memory_mb": 256000},
        {"name": "t4", "gpu_type": "t4", "nodes": 1, "gpus_per_node": 2, "cpus_per_node": 16, "memory_mb": 64000},
    ],
    "slurm_conf": ["OverTimeLimit=1"],
}


REPLAY = ReplayCluster(STATE, PORT_CTLD, PORT_NODE)


def env() -> dict[str, str]:
    return REPLAY.env()


def replaycluster(*args: str) -> subprocess.CompletedProcess[str]:
    return REPLAY.run(*args)


def slurm(*argv: str, user: str | None = None) -> str:
    """A client command of the test's replay cluster, through the wrapper `up` wrote."""
    full = [str(STATE / "bin" / argv[0]), *argv[1:]]
    if user:
        full = ["/usr/sbin/runuser", "-u", user, "--", *full]
    res = subprocess.run(full, capture_output=True, text=True, env=env(), cwd="/tmp", timeout=60)
    assert res.returncode == 0, f"{argv}: {res.stderr}"
    return res.stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, object]]:
    if os.geteuid() != 0:
        pytest.skip("deploy/replaycluster runs as root")
    if not (MARKERS / "22.05.json").is_file():
        _missing(
            "the bundled Slurm 22.05 cluster is not up (deploy/minicluster up 22.05): its slurmdbd keeps the books"
        )
    between_ups("22.05")  # another test may be bringing it back
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    try:
        replaycluster("up", str(spec))
        yield json.loads((STATE / "cluster.json").read_text())
    finally:
        replaycluster("down")


def alive(pid: int) -> bool:
    """The process runs (a zombie waiting for init to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_gpu_job_runs_to_completed_and_slurmdbd_keeps_it(cluster: dict[str, object]) -> None:
    assert cluster["cluster"] == NAME and cluster["nodes"] == ["a100-1", "t4-1"]
    shapes = slurm("sinfo", "-h", "-N", "-o", "%R|%N|%c|%m|%G|%T").split()
    assert shapes == ["a100|a100-1|32|256000|gpu:a100:2,shard:a100:8|idle", "t4|t4-1|16|64000|gpu:t4:2,shard:t4:8|idle"]
    assert "OverTimeLimit           = 1 min" in slurm("scontrol", "show", "config")  # the spec's slurm_conf
    since = datetime.now().replace(microsecond=0)
    job = slurm(
        "sbatch", "--parsable", "-o", "/dev/null", "-A", "vision", "-p", "a100", "--gres=gpu:a100:2", "-c", "16",
        "--mem=100G", "-t", "2", "--wrap", "sleep 3", user="alice",
    ).strip()  # fmt: skip
    # more GPUs than a node has: refused at once
    refused = subprocess.run(
        [str(STATE / "bin" / "sbatch"), "-A", "vision", "-p", "t4", "--gres=gpu:t4:3", "--wrap", "true"],
        capture_output=True, text=True, env=env(), cwd="/tmp", timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    fields = "JobID,User,Account,Partition,State,Submit,Start,End,AllocTRES"
    deadline = time.monotonic() + 60
    while True:
        rows = [
            dict(zip(fields.split(","), line.split("|"), strict=True))
            for line in slurm("sacct", "-M", NAME, "-X", "-n", "-P", "-j", job, "-o", fields).splitlines()
        ]
        # job ids go on across ups, but a record of this number from before this test is not this job
        rows = [r for r in rows if r["Submit"] not in ("", "Unknown") and datetime.fromisoformat(r["Submit"]) >= since]
        if rows and rows[0]["State"] == "COMPLETED" and rows[0]["End"] not in ("", "Unknown"):
            break
        assert time.monotonic() < deadline, f"job {job} not COMPLETED in slurmdbd: {rows}"
        time.sleep(1)
    (row,) = rows
    assert (row["User"], row["Account"], row["Partition"]) == ("alice", "vision", "a100")
    assert since <= datetime.fromisoformat(row["Start"]) <= datetime.fromisoformat(row["End"])
    assert {"gres/gpu=2", "cpu=16", "mem=100G"} <= set(row["AllocTRES"].split(","))

    # down stops its daemons alone: the bundled 22.05 cluster (its own slurm.conf) answers as before
    pids = [int(p.read_text()) for p in (STATE / "run").glob("*.pid")]
    assert len(pids) == 3  # slurmctld, a slurmd per node
    replaycluster("down")
    assert not any(alive(pid) for pid in pids)
    assert not (STATE / "cluster.json").exists()
    bundled = subprocess.run(["/usr/bin/sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, env=env())
    assert bundled.returncode == 0 and {"gpu-a100-1", "gpu-t4-1"} <= set(bundled.stdout.split()), bundled.stderr
