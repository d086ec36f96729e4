"""The GPU priors against their corpus, and the GPU bench's CPU form (what a lent GPU runs, in small)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from bench import gpu_accuracy, gpu_corpus, gpu_priors


def test_the_shipped_gpu_priors_are_what_the_public_corpus_gives() -> None:
    res = subprocess.run([sys.executable, "-m", "bench", "gpu-priors", "--check"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_corpus_row_names_its_source_and_its_printed_figure() -> None:
    for row in gpu_corpus.rows():
        assert row["source_url"].startswith("https://") and row["source"], row
        assert row["quote"].strip() and row["figure"].strip(), row


def test_the_priors_meet_their_targets_leave_one_source_out() -> None:
    """Day one within 1.5x (median), calibrated on one run of the type within 1.25x, the A100 DDP
    series within 20% each: every prediction from priors fitted without the predicted point's source."""
    points = tuple(gpu_corpus.load()[0])
    assert gpu_accuracy.factor([x for _, x in gpu_accuracy.day_one(points)]) <= 1.5
    assert gpu_accuracy.factor(gpu_accuracy.one_run(points)) <= 1.25
    got = gpu_accuracy.series(points, "a100-ddp")
    assert len(got) == 3 and all(abs(r - 1) <= 0.2 for _, r in got), [(p.sample.gpus, r) for p, r in got]


def test_the_model_has_the_shape_of_the_v100_series() -> None:
    """YOLOv5 n..x on one V100 (46x the FLOPs, 8x the time): the fit on every source, calibrated on the
    nano's run, puts each bigger model within 25%. (Left out of the fit, the series is missed by up
    to 43%: the 2024 A100 logs of big models pull the compute exponent down; docs/benchmarks.md.)"""
    points = tuple(gpu_corpus.load()[0])
    fit = gpu_priors.fit(points)
    members = sorted((p for p in points if p.series == "v100-yolov5"), key=lambda p: p.sample.workload.gflops)
    tm = gpu_accuracy.calibrated(fit, members[0])
    errors = [gpu_accuracy.ratio(p, tm, fit.ddp_efficiency) - 1 for p in members[1:]]
    assert len(errors) == 4 and all(abs(e) <= 0.25 for e in errors), errors


def test_a_point_never_predicts_itself() -> None:
    """The leave-one-source-out fit of a point has none of its source's points."""
    points = tuple(gpu_corpus.load()[0])
    one = points[0]
    fit = gpu_accuracy._loso(points, one.source)
    assert all(p.source != one.source for p in fit.points) and len(fit.points) < len(points)
    assert math.isfinite(fit.k(one.gpu)) and fit.k(one.gpu) > 0


@pytest.mark.train
def test_the_gpu_bench_runs_in_its_cpu_form_and_writes_what_it_measured(
    tmp_path: Path, yolo_env: dict[str, str]
) -> None:
    res = subprocess.run([sys.executable, "-m", "bench", "gpu", "--cpu", "--out", str(tmp_path)], cwd=REPO,
                         env=yolo_env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (written,) = tmp_path.glob("cpu-*.json")
    data = json.loads(written.read_text())
    assert data["device"] == "cpu" and data["torch"] and data["ultralytics"]
    assert len(data["runs"]) == 2 and all(r["images_per_s"] > 0 and r["steps"] > 10 for r in data["runs"])
    assert data["loader"][0]["images_per_s"] > 0
