"""k feedback, progress lines and output patterns (pure parts)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_yolo.controller import feedback
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import Sample, TimeModel, predict_train_seconds
from slurm_yolo.login import progress
from slurm_yolo.parse import beacon
from slurm_yolo.parse.records import parse_records

TM = TimeModel(k=2.0, overhead_seconds=1.0, val_weight=0.5, iteration_seconds=0.0, startup_seconds=5.0, n=10)


def sample(seconds: float) -> Sample:
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    w = estimate.workload(spec.parse(["train", "data=d.yaml", "epochs=5", "imgsz=320"]), 200, 50, m)
    return Sample(w, 1, seconds)


def test_nudge_moves_k_toward_the_measurement_bounded() -> None:
    pred = predict_train_seconds(sample(1).workload, TM, 1, 0.9, 8.86)
    tm, ratio, why = feedback.nudge(TM, sample(pred * 1.2), 0.9, 8.86)
    assert ratio == pytest.approx(1.2) and TM.k < tm.k <= TM.k * 1.25 and "->" in why
    same, ratio, why = feedback.nudge(TM, sample(pred * 5), 0.9, 8.86)
    assert same is TM and "outlier" in why


def test_few_runs_follow_the_measurements() -> None:
    young = replace(TM, n=0)
    pred = predict_train_seconds(sample(1).workload, young, 1, 0.9, 8.86)
    tm, _, _ = feedback.nudge(young, sample(pred * 5), 0.9, 8.86)  # a bad prior is corrected at once
    assert predict_train_seconds(sample(1).workload, tm, 1, 0.9, 8.86) == pytest.approx(pred * 5)


def from_usage(path: Path, key: str, elapsed: int | None = None) -> Sample | None:
    """What the controller makes of the summary the launcher posts for these records."""
    posted = beacon.from_records(path, 1_700_000_000)
    return feedback.sample_from_beacon(beacon.decode(beacon.encode(posted)) if posted else None, key, elapsed)


def test_sample_from_usage(tmp_path: Path) -> None:
    w = sample(1).workload
    f = tmp_path / "u.jsonl"
    recs = [{"kind": "start", "gpus": 1, "workload": w.to_dict()}] + [
        {"kind": "epoch", "epoch": e, "epochs": 5, "images": 200, "tokens": 200 * 320**2, "seconds": 3.0}
        for e in (1, 2, 3)
    ]
    f.write_text("\n".join(map(json.dumps, recs)))
    s = from_usage(f, "k1")
    assert s is not None and s.train_seconds == 9.0 and s.workload.epochs == 3 and s.workload.val_passes == 3
    assert s.total_seconds is None
    assert from_usage(tmp_path / "missing.jsonl", "k") is None
    job = from_usage(f, "k1", elapsed=20)
    assert job is not None and job.total_seconds == 20.0  # Slurm's elapsed: the whole job
    assert from_usage(f, "k1", elapsed=5).total_seconds is None  # type: ignore[union-attr]  # < training
    with f.open("a") as out:
        out.write("\n" + json.dumps({"kind": "resume", "from": "last.pt"}))
    assert from_usage(f, "k1", elapsed=20).total_seconds is None  # type: ignore[union-attr]  # requeued


def test_jobs_teach_the_startup_run_folders_cannot() -> None:
    s = sample(predict_train_seconds(sample(1).workload, TM, 1, 0.9, 8.86))
    final = 2.0 * 0.5 * 50 * 320**2 / 1e6  # k x val weight x the final validation's Mpx (yolov8n: factor 1)
    tm, _, why = feedback.nudge(TM, s._replace(total_seconds=s.train_seconds + final + 11.0), 0.9, 8.86)
    weight = max(feedback.ALPHA, 1 / (TM.startup_n + 1))  # the first job: its own gap
    assert tm.startup_seconds == pytest.approx((1 - weight) * 5.0 + weight * 11.0) and tm.startup_n == 1
    assert "start-up 5.0 -> 11.0 s" in why
    untouched, _, _ = feedback.nudge(TM, s, 0.9, 8.86)
    assert untouched.startup_seconds == 5.0 and untouched.startup_n == 0


def test_progress_line(tmp_path: Path) -> None:
    f = tmp_path / "u.jsonl"
    f.write_text(
        "\n".join(
            json.dumps({"kind": "epoch", "epoch": e, "epochs": 4, "images": 100, "tokens": 10**6, "seconds": 2.0})
            for e in (1, 2)
        )
    )
    p = progress.progress(parse_records(f))
    assert (p.epoch, p.epochs, p.pixels_done, p.pixels_total) == (2, 4, 2e6, 4e6)
    assert p.mpx_per_s == pytest.approx(0.5) and p.eta_seconds == pytest.approx(4.0)
    line = progress.render("RUNNING", p)
    assert "epoch 2/4" in line and "2.0/4.0 Mpx" in line and "0.50 Mpx/s" in line and "ETA 0:04" in line
    assert "waiting" in progress.render("PENDING", None)
    at = time.mktime((2026, 12, 3, 14, 32, 0, 0, 0, -1))  # a job that waits for credits: its begin time
    assert progress.render("PENDING", None, starts=at) == "PENDING: expected to start 2026-12-03T14:32:00"
    assert progress.render("FAILED", None) == "FAILED"


@pytest.mark.parametrize(
    ("pattern", "out"), [("yolo-%x-%j.out", "yolo-n-12.out"), ("/x/%u/%%j", "/x/bob/%j"), ("a%Zb", "a%Zb")]
)
def test_expand_pattern(pattern: str, out: str) -> None:
    assert progress.expand_pattern(pattern, 12, "n", "bob") == out


def test_a_usage_file_nested_past_pythons_recursion_is_no_sample(tmp_path: Path) -> None:
    f = tmp_path / "yolo-usage-1.jsonl"
    f.write_text("[" * 100_000 + "\n" + '{"kind": "start"}\n')
    assert from_usage(f, "deep") is None


def test_a_short_run_moves_the_whole_model() -> None:
    tiny = estimate.workload(
        spec.parse(["train", "data=d.yaml", "epochs=1", "imgsz=64"]), 8, 4, estimate.lookup_model("yolov8n")
    )  # type: ignore[arg-type]
    fixed_heavy = replace(TM, overhead_seconds=5.0, n=0)
    pred = predict_train_seconds(tiny, fixed_heavy, 1, 0.9, 8.86)
    tm, ratio, why = feedback.nudge(fixed_heavy, Sample(tiny, 1, pred / 2), 0.9, 8.86)
    assert ratio == pytest.approx(0.5) and "fixed costs dominate" in why
    assert tm.k == pytest.approx(fixed_heavy.k / 2) and tm.overhead_seconds == pytest.approx(
        2.5
    )  # the first run: all of it
    assert predict_train_seconds(tiny, tm, 1, 0.9, 8.86) == pytest.approx(pred / 2)
