"""Native admission's cost per submission: ``sbatch --hold`` of a GPU job on the bundled 22.05
cluster through slurm-yolo's job_submit.lua, as a ratio to the same sbatch through a job_submit.lua
that admits everything (plain sbatch: the plugin's own call costs microseconds), in the same run.

On a ledger several clusters share (the bundled clusters' default: one MariaDB ledger), each GPU
submission that passes the script's own check also asks the ledger, through the hook client and
hookd (``slurm_yolo.controller.shared_admission``): that round trip is in the figure, and the line says which
ledger the cluster is on.

Measured with the account's queue empty and with 500 of its GPU jobs pending (the script walks
slurmctld's job list). Batches of submissions alternate between the two scripts so drift in the
machine's load falls on both; slurmctld reloads job_submit.lua when its file changes. The bundled cluster only (its
marker), and the real script is put back however the run ends. Target: ratio <= 1.5.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from slurm_yolo.core import config

MARKER = Path("/var/lib/slurm-yolo-cluster/clusters/22.05.json")
SCRIPT = Path("/etc/slurm/job_submit.lua")
ADMIT_ALL = """function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
"""
ROUNDS = 20  # submissions per batch
BATCHES = 3


def _sbatch() -> int:
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--hold",
            "-A",
            "vision",
            "-p",
            "a100",
            "--gres=gpu:a100:1",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().split(";")[0])


def _timed_submit(jobs: list[int]) -> float:
    start = time.perf_counter()
    jobs.append(_sbatch())
    return time.perf_counter() - start


def _use(text: str, jobs: list[int]) -> None:
    """Put ``text`` in place and wait until slurmctld runs it: it looks at the file's mtime when a
    submission comes, not at once (submissions right after a swap ran the old script: the first
    version of this bench, alternating one submission each, measured the same script twice)."""
    SCRIPT.write_text(text)
    os.utime(SCRIPT, (time.time() + 1, time.time() + 1))  # a new mtime, so slurmctld reloads it
    time.sleep(1.5)
    for _ in range(3):
        _timed_submit(jobs)  # the reload's own cost falls on these


def _measure(real: str, jobs: list[int]) -> tuple[float, float]:
    """Median submit time through the admit-all script and through the real one, in batches that
    alternate (drift in the machine's load falls on both)."""
    plain, admitted = [], []
    for _ in range(BATCHES):
        _use(ADMIT_ALL, jobs)
        plain += [_timed_submit(jobs) for _ in range(ROUNDS)]
        _use(real, jobs)
        admitted += [_timed_submit(jobs) for _ in range(ROUNDS)]
    return statistics.median(plain) * 1000, statistics.median(admitted) * 1000


def main() -> None:
    if not MARKER.exists():
        print("admission: skipped (no bundled 22.05 cluster: deploy/minicluster up)")
        return
    assert json.loads(MARKER.read_text())["conf_dir"] == "/etc/slurm"
    marker = json.loads(MARKER.read_text())
    backend = config.load(Path(marker["config"]), env={"SLURM_YOLO_CONFIG": marker["config"]}).ledger.backend
    ledger_kind = "shared MariaDB ledger" if backend == "mariadb" else "its own SQLite ledger"
    real = SCRIPT.read_text()
    jobs: list[int] = []
    try:
        for label, backlog in (("empty queue", 0), ("500 pending GPU jobs", 500)):
            for _ in range(backlog - len(jobs)):
                jobs.append(_sbatch())
            plain, admitted = _measure(real, jobs)
            print(
                f"admission ({label}, {ledger_kind}): plain sbatch {plain:.1f} ms, with admission {admitted:.1f} ms, "
                f"ratio {admitted / plain:.2f} (target <= 1.5)"
            )
    finally:
        SCRIPT.write_text(real)
        for i in range(0, len(jobs), 200):
            subprocess.run(["scancel", *map(str, jobs[i : i + 200])], check=False)
