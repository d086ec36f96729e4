"""The GPU priors against their corpus, and the GPU bench's CPU form (what a lent GPU runs, in small)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from bench import gpu_accuracy, gpu_corpus


def test_the_shipped_gpu_priors_are_what_the_public_corpus_gives() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "bench", "gpu-priors", "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_corpus_row_names_its_source_and_its_printed_figure() -> None:
    for row in gpu_corpus.rows():
        assert row["source_url"].startswith("https://") and row["source"], row
        assert row["quote"].strip() and row["figure"].strip(), row


def test_the_priors_meet_their_targets_leave_one_source_out() -> None:
    """Day one within 1.5x (median), calibrated on one run of the type within 1.25x, the V100 YOLOv5
    n..x and the A100 DDP series within 20% each (calibrated on their first point): every prediction
    from priors fitted without the predicted point's source."""
    points = tuple(gpu_corpus.load()[0])
    assert gpu_accuracy.factor([x for _, x in gpu_accuracy.day_one(points)]) <= 1.5
    assert gpu_accuracy.factor(gpu_accuracy.one_run(points)) <= 1.25
    for name in ("v100-yolov5", "a100-ddp"):
        got = gpu_accuracy.series(points, name)
        assert len(got) >= 3 and all(abs(r - 1) <= 0.2 for _, r in got), [(p.sample.workload.model, r) for p, r in got]


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
    res = subprocess.run(
        [sys.executable, "-m", "bench", "gpu", "--cpu", "--out", str(tmp_path)],
        cwd=REPO,
        env=yolo_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (written,) = tmp_path.glob("cpu-*.json")
    data = json.loads(written.read_text())
    assert data["device"] == "cpu" and data["torch"] and data["ultralytics"]
    assert len(data["runs"]) == 2 and all(r["images_per_s"] > 0 and r["steps"] > 10 for r in data["runs"])
    assert data["loader"][0]["images_per_s"] > 0
