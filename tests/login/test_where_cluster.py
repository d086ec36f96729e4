"""Where a job runs, on the real bundled clusters (Slurm 22.05 and 24.11): Slurm's default partition
when none is given or configured, and ``--partition auto`` by the start Slurm's own scheduler expects
(``sbatch --test-only`` of each partition's job script) plus the predicted run time.

yolo-sbatch runs here in-process as a login node would, on the test's own config (its SLURM_YOLO_HOME)
and the cluster's commands (``[slurm] bin_dir``). The facts it is checked against come from Slurm
itself, read here without slurm-yolo's parsers.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import Slurm, poll

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch

pytestmark = pytest.mark.cluster


def on(slurm: Slurm, config: Path, text: str = "") -> None:
    """The test's config file (``text``, else what it holds) on ``slurm``'s commands."""
    body = text or (config.read_text() if config.exists() else "")
    slurm_table = f'[slurm]\nbin_dir = "{slurm.bin_dir}"\n'
    config.write_text(body.replace("[slurm]\n", slurm_table) if "[slurm]\n" in body else body + slurm_table)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(yolo_sbatch, list(args))


def queue(slurm: Slurm) -> str:
    return slurm.cmd("squeue", "-h", "-o", "%i").stdout


@pytest.fixture
def a100_busy(slurm: Slurm) -> Iterator[float]:
    """Both a100 GPUs taken for 10 minutes by a running job; when it was seen running (epoch seconds)."""
    job = slurm.sbatch("-p", "a100", "--gres=gpu:a100:2", "-t", "10", script="sleep 600")
    try:
        poll(
            "blocker running", lambda: slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip() == "RUNNING"
        )
        yield time.time()
    finally:
        slurm.cmd("scancel", str(job), check=False)


def test_no_partition_is_slurms_default(slurm: Slurm, home: Path, dataset: Path) -> None:
    """With no --partition and none configured, the job goes where sbatch would put it."""
    on(slurm, home / "config.toml")
    told = slurm.cmd("sbatch", "--test-only", input="#!/bin/bash\ntrue\n").stderr
    where = re.search(r" in partition (\S+)", told)
    assert where, told
    res = invoke("--dry-run", "--json", "train", f"data={dataset}", "model=yolov8n.yaml", "epochs=1")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["partition"] == where.group(1) and f"#SBATCH --partition={where.group(1)}\n" in d["script"]
    assert d["expected_start"] is None  # a partition Slurm named: planned offline, as a named one is


def test_auto_goes_where_slurm_expects_the_earliest_finish(
    slurm: Slurm, site_config: Path, dataset: Path, a100_busy: float
) -> None:
    """a100 is busy for 10 more minutes: Slurm expects the job to start there only then, at once on t4."""
    on(slurm, site_config)
    asked = time.time()
    words = ["train", "model=yolov8l.yaml", f"data={dataset}", "epochs=2"]
    res = invoke("--dry-run", "--json", "--explain", "-p", "auto", *words)
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["partition"] == "t4" and "#SBATCH --partition=t4\n" in d["script"]
    assert asked - 2 <= d["expected_start"] <= asked + 60
    a100 = next(line for line in d["explain"] if line.startswith("partition auto: a100 would start "))
    a100_start = time.mktime(time.strptime(a100.split()[5], "%Y-%m-%dT%H:%M:%S"))
    assert a100_start >= a100_busy + 9 * 60, a100  # once the blocker's 10 minutes are up
    assert d["explain"][-2] == "partition auto: t4 finishes first"
    assert d["explain"][-1].startswith("expected start: ") and d["explain"][-1].endswith("(Slurm's scheduler)")

    res = invoke("-p", "auto", "--sbatch-arg=--hold", "-J", "where-check", *words)  # submitted: start beside prediction
    job = re.match(
        r"Submitted batch job (\d+) \(t4, gpu:t4:1, .*, predicted [\d.]+ min, work .* EUR, expected start (\S+)\)\n$",
        res.output,
    )
    assert res.exit_code == 0 and job, res.output
    try:
        assert slurm.cmd("squeue", "-h", "-j", job.group(1), "-o", "%P").stdout.strip() == "t4"
    finally:
        slurm.cmd("scancel", job.group(1), check=False)


def test_auto_skips_a_partition_slurm_refuses(slurm: Slurm, site_config: Path, dataset: Path) -> None:
    """The job may only run on gpu-t4-1: Slurm refuses it on a100, and --explain says why."""
    on(slurm, site_config)
    res = invoke(
        "--dry-run",
        "--json",
        "-p",
        "auto",
        "--sbatch-arg=--nodelist=gpu-t4-1",
        "train",
        f"data={dataset}",
        "model=yolov8l.yaml",
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["partition"] == "t4" and d["expected_start"] is not None
    refused = [
        line for line in d["explain"] if line.startswith("partition auto: a100 refused by Slurm: sbatch failed: ")
    ]
    assert len(refused) == 1, d["explain"]


def test_auto_refused_everywhere_is_one_error(slurm: Slurm, site_config: Path, dataset: Path) -> None:
    """No node has the feature asked for: one Error line naming each partition's refusal, nothing submitted."""
    on(slurm, site_config)
    before = queue(slurm)
    res = invoke("-p", "auto", "-C", "no-such-feature", "train", f"data={dataset}", "model=yolov8l.yaml")
    assert res.exit_code == 1
    assert re.fullmatch(
        r"Error: --partition auto: Slurm refuses the job on every partition \(a100: sbatch failed: "
        r"[^\n]+; t4: sbatch failed: [^\n]+\)\n",
        res.output,
    ), res.output
    assert set(queue(slurm).split()) <= set(before.split())  # nothing new (others' jobs may have ended)
