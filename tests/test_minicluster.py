"""Each bundled Slurm cluster (deploy/minicluster: 22.05 on the host, 24.11 and 26.05 in chroots) runs a GPU job.

A cluster is found by the marker only deploy/minicluster writes once it is up:
/var/lib/slurm-yolo-cluster/clusters/RELEASE.json, whose id is also in the cluster's slurm.conf.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RELEASES as SUPPORTED  # deploy/test brings them up

pytestmark = pytest.mark.cluster

MARKERS = Path("/var/lib/slurm-yolo-cluster/clusters")
IN_CI = os.environ.get("CI", "").lower() == "true"
ACCOUNT = "research"  # root's and bob's; the hooks charge it, so each test funds it first


def marker(release: str) -> dict[str, str]:
    path = MARKERS / f"{release}.json"
    if not path.exists():
        message = f"no Slurm {release} cluster is up (deploy/minicluster up {release})"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return json.loads(path.read_text())


def slurm(m: dict[str, str], *argv: str, stdin: str | None = None, user: str | None = None) -> str:
    """A client command of the marker's cluster, from its bin_dir."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "MINICLUSTER_USER")}
    if user:
        env["MINICLUSTER_USER"] = user
    res = subprocess.run(
        [str(Path(m["bin_dir"]) / argv[0]), *argv[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd="/tmp",
    )
    assert res.returncode == 0, f"{argv}: {res.stderr}"
    return res.stdout


def fund(m: dict[str, str]) -> None:
    """Tokens for a few small jobs, in the cluster's own ledger (its hooks' config and state)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_YOLO_HOME", "SLURM_CONF")}
    env["SLURM_YOLO_CONFIG"] = m["config"]
    res = subprocess.run(
        [sys.executable, "-m", "slurm_yolo", "ledger", "deposit", ACCOUNT, "1G", "--reason", "test_minicluster"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def run_gpu_job(m: dict[str, str], user: str | None = None) -> int:
    fund(m)
    out = slurm(
        m,
        "sbatch",
        "--parsable",
        "-p",
        "t4",
        "-A",
        ACCOUNT,
        "--gres=gpu:t4:1",
        "-t",
        "1",
        "-o",
        "/dev/null",
        stdin="#!/bin/bash\nsleep 1\n",
        user=user,
    )
    job_id = int(out.strip().split(";")[0])
    deadline = time.monotonic() + 90
    state = ""
    while time.monotonic() < deadline:
        state = slurm(m, "sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "State").strip()
        if state == "COMPLETED":
            return job_id
        if state in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
            break
        time.sleep(0.5)
    pytest.fail(f"Slurm {m['release']}: job {job_id} ended {state or 'nowhere'}, not COMPLETED")


@pytest.mark.parametrize("release", SUPPORTED)  # not another up meanwhile (CI tests 26.05 apart)
def test_cluster_runs_a_gpu_job(release: str) -> None:
    m = marker(release)
    assert m["release"] == release and m["slurm_version"].startswith(release)
    conf = (Path(m["conf_dir"]) / "slurm.conf").read_text()
    assert f"# slurm-yolo-minicluster-id: {m['id']}\n" in conf
    assert f"ClusterName={m['cluster']}\n" in conf
    assert Path(m["config"]).is_file() and Path(m["state_dir"]).is_dir()
    assert slurm(m, "sinfo", "--version").split()[-1].startswith(f"{release}.")
    run_gpu_job(m)


@pytest.mark.parametrize("release", [r for r in SUPPORTED if r != "22.05"])
def test_chrooted_cluster_submits_as_minicluster_user(release: str) -> None:
    m = marker(release)
    job_id = run_gpu_job(m, user="bob")
    assert slurm(m, "sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "User").strip() == "bob"
