"""``slurm-yolo simulate`` on the bundled 22.05 cluster's own history: three GPU runs of this test's,
replayed on a replay cluster of the test's own brought up from ``simulate --spec``, with the limits
they asked for and with slurm-yolo's; every run of each arm reaches its end there, and the GPU-hours
each arm allocated are what sacct's records of the replay say. ``--on`` naming the site's own cluster
is refused, and so is a window with no GPU run."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import MARKERS, ReplayCluster, Slurm, _missing, between_ups, fund

pytestmark = pytest.mark.cluster

REPLAY = ReplayCluster(Path("/var/lib/slurm-yolo-cluster/replay-simtest"), 6887, 17131)  # no other test's ports


@pytest.fixture
def history(cluster: Slurm) -> Iterator[str]:
    """Three GPU runs of vision's on the bundled cluster, ended; the window's start, as --since takes it."""
    if not (MARKERS / "22.05.json").is_file():
        _missing("the bundled Slurm 22.05 cluster is not up (deploy/minicluster up 22.05)")
    fund(cluster, ("vision",), 10**15)
    since = datetime.now().replace(microsecond=0).isoformat()
    time.sleep(1)  # sacct's submit times are whole seconds: the runs come after the window's start
    jobs = [
        cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "10", script="sleep 4"),
        cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:2", "-t", "5", script="sleep 6"),
        cluster.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "3", script="sleep 2"),
    ]
    for job in jobs:
        cluster.ended(job)
    yield since


def test_the_clusters_own_history_replays_with_its_limits_and_with_slurm_yolos(
    cluster: Slurm, history: str, tmp_path: Path
) -> None:
    spec = json.loads(cluster.cli("simulate", "--since", history, "--spec").stdout)
    shapes = {p["name"]: (p["gpu_type"], p["gpus_per_node"], p["nodes"]) for p in spec["partitions"]}
    assert shapes["a100"] == ("a100", 2, 1) and shapes["t4"] == ("t4", 2, 1), shapes  # and debug, on t4's node
    assert spec["users"] == {"root": ["vision"]}
    spec["name"] = "simtest"
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    between_ups("22.05")  # its slurmdbd keeps the replay cluster's books
    try:
        REPLAY.run("up", str(tmp_path / "spec.json"))
        own = cluster.cli("simulate", "--since", history, "--on", str(cluster.bin_dir), check=False)
        assert own.returncode == 1 and own.stderr.startswith("Error: --on") and "this site's own" in own.stderr
        started = datetime.now().replace(microsecond=0).isoformat()
        res = cluster.cli("simulate", "--since", history, "--on", str(REPLAY.state / "bin"), "--json")
        arms = json.loads(res.stdout)["arms"]
        assert set(arms) == {"as submitted", "slurm-yolo"}
        for arm in arms.values():  # limits of minutes (theirs, or slurm-yolo's: at least one) for runs of seconds
            assert arm["jobs"] == 3 and arm["makespan_s"] > 0 and arm["mean_wait_s"] >= 0
            assert arm["killed"] == arm["requeued"] == 0 and arm["gpu_hours_lost"] == 0
        replayed = sacct_gpu_hours(REPLAY.state / "bin", started)
        total = arms["as submitted"]["gpu_hours_allocated"] + arms["slurm-yolo"]["gpu_hours_allocated"]
        assert abs(replayed - total) < 0.002, (replayed, arms)
        empty = cluster.cli("simulate", "--since", "now-1s", "--on", str(REPLAY.state / "bin"), check=False)
        assert empty.returncode == 1 and "no GPU run in that window" in empty.stderr
    finally:
        REPLAY.run("down")


def sacct_gpu_hours(bin_dir: Path, since: str) -> float:
    """GPU-hours of the simulate jobs the replay cluster ran since ``since`` (whole GPUs: none asked a shard)."""
    import subprocess

    out = subprocess.run(
        [str(bin_dir / "sacct"), "-X", "-n", "-P", "-a", "-S", since, "-o", "JobName,ElapsedRaw,AllocTRES"],
        capture_output=True,
        text=True,
        env=REPLAY.env(),
        check=True,
    ).stdout
    hours = 0.0
    for line in out.splitlines():
        name, elapsed, tres = line.split("|")
        gpus = dict(p.split("=", 1) for p in tres.split(",") if "=" in p).get("gres/gpu", "0")
        if name.startswith("sim-"):
            hours += int(elapsed) * int(gpus) / 3600
    return hours
