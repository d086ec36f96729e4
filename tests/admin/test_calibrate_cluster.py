"""``slurm-yolo calibrate`` on the bundled 22.05 cluster (issue 47): a fit that would make t4's
cross-validated error worse is refused without --force, --dry-run saves nothing, and two jobs that
shared t4's node are flagged from Slurm's own records. In the test's own calibration state: the
cluster's t4 model is never touched."""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import VENV_BIN, Slurm, calibration_rows, own_ledger_config

from slurm_yolo.core import config as config_mod
from slurm_yolo.core.model.timemodel import Sample, predict_seconds, predict_train_seconds
from slurm_yolo.core.synthetic import make_dataset
from slurm_yolo.state import calibration

pytestmark = pytest.mark.cluster

# (model, epochs, imgsz, batch) of each run folder: different sizes, so the fit has terms to move
RUNS = [("yolov8n", 3, 320, 8), ("yolov8s", 5, 640, 16), ("yolov8m", 2, 480, 4), ("yolov8n", 8, 640, 16)] * 2


def run_folder(where: Path, data: Path, model: str, epochs: int, imgsz: int, batch: int) -> Path:
    """An ultralytics run folder as calibrate reads it (args.yaml, results.csv), its times set later."""
    where.mkdir(parents=True)
    (where / "args.yaml").write_text(
        f"task: detect\nmode: train\nmodel: {model}.pt\ndata: {data}\nepochs: {epochs}\nimgsz: {imgsz}\n"
        f"batch: {batch}\n"
    )
    timed(where, epochs, 1.0)
    return where


def timed(where: Path, epochs: int, seconds: float) -> None:
    rows = "".join(f"{e + 1},{seconds * (e + 1) / epochs:.3f},1.0\n" for e in range(epochs))
    (where / "results.csv").write_text("epoch,time,train/box_loss\n" + rows)


def test_a_worse_fit_of_t4_is_refused_and_a_dry_run_saves_nothing(cluster: Slurm, tmp_path: Path) -> None:
    before = calibration.load(cluster.config(), "t4").source
    # two jobs of alice's on t4's one node at once (it has two GPUs): each shared it with the other
    jobs = [
        cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 4", user="alice")
        for _ in range(2)
    ]
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(own_ledger_config(cluster))
    own = config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)})
    truth = replace(calibration.prior(own, "t4"), k=0.8, n=20)
    data = make_dataset(tmp_path / "ds", train=4, val=2, size=32)
    folders = [run_folder(tmp_path / "runs" / f"train{i}", data, *run) for i, run in enumerate(RUNS)]
    rng = random.Random(3)
    part, e = own.partition("t4"), own.estimate
    samples: list[Sample] = []
    for folder, (_, epochs, _, _) in zip(folders, RUNS, strict=True):  # timed by the truth, +-30%
        s = calibration.sample_from_run_dir(folder, own)
        seconds = predict_train_seconds(s.workload, truth, 1, part.ddp_efficiency, e.reference_gflops)
        timed(folder, epochs, seconds * rng.uniform(0.7, 1.3))
        samples.append(s)
    for job in jobs:
        cluster.ended(job)
    alice = int(subprocess.run(["id", "-u", "alice"], capture_output=True, text=True, check=True).stdout)
    with calibration.Store(own) as store:
        store.save("t4", truth, "calibrate by root: 20 runs")  # the current model: the runs' own truth
        for job, s in zip(jobs, samples, strict=False):  # the jobs' feedback, exactly as the truth says
            total = predict_seconds(s.workload, truth, 1, part.ddp_efficiency, e.reference_gflops)
            store.add_sample("t4", s._replace(key=f"job:{cluster.name}:{job}", total_seconds=total), "job", alice)
    saved = calibration_rows(own)
    env = {**cluster.env(), "SLURM_YOLO_HOME": str(home), "SLURM_YOLO_CONFIG": str(home / "config.toml")}

    def calibrate(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(VENV_BIN / "slurm-yolo"), "calibrate", "-p", "t4", *args, *map(str, folders)]
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    dry = calibrate("--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    got = json.loads(dry.stdout)
    assert calibration_rows(own) == saved and not got["saved"]  # nothing saved: history, model, samples
    assert got["comparison"]["worse"].startswith("partition t4: the new fit's cross-validated error (median ")
    shared = {s["job"]: s["shared_with"] for s in got["samples"] if s["job"]}
    assert set(shared) == set(jobs) and all(set(jobs) - {j} <= set(shared[j]) for j in jobs), shared
    assert {s["user"] for s in got["samples"] if s["job"]} == {"alice"}
    assert all(s["weight"] <= 0.5 for s in got["samples"] if s["job"])

    res = calibrate()
    assert res.returncode == 1, res.stdout + res.stderr
    assert (
        res.stderr.strip().splitlines()[-1].endswith(f"on the same {len(RUNS) + 2} runs: not saved (--force saves it)")
    )
    assert "compared on the 10 runs recorded since t4's model was last fitted" in res.stdout
    assert calibration_rows(own) == saved
    assert calibration.load(cluster.config(), "t4").source == before  # the cluster's own model: untouched
