"""ultralytics' ``time=``: the run trains that many hours whatever ``epochs=`` says, and the plan holds that."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_yolo.core import config as config_mod
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import TimeModel
from slurm_yolo.login import plan

TM = TimeModel(k=2.0, overhead_seconds=5.0, val_weight=0.5, iteration_seconds=0.01, startup_seconds=20.0)


@pytest.fixture
def cfg(site_config: Path) -> config_mod.Config:
    return config_mod.load()


def coco_run() -> estimate.Workload:
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    s = spec.parse(["detect", "train", "data=coco.yaml", "model=yolov8n.pt", "epochs=100", "time=1"])
    return estimate.workload(s, 118287, 5000, m)


def test_time_caps_the_prediction_and_the_limit_at_about_its_hours(cfg: config_mod.Config) -> None:
    w = coco_run()
    part = cfg.partition("t4")
    free = plan.plan_partition(w, TM, "test", part, plan.Request("t4"), cfg)
    timed = plan.plan_partition(w, TM, "test", part, plan.Request("t4", train_hours=1.0), cfg)
    assert free.predicted_seconds > 20 * 3600  # 100 COCO epochs
    outside = free.predicted_seconds - free.predicted_train_seconds  # start-up, final validation
    closing = timed.predicted_train_seconds - 3600  # the validation of the epoch time= stops
    assert 0 < closing < outside
    assert timed.predicted_seconds == pytest.approx(3600 + closing + outside)
    rest = timed.predicted_seconds - 3600  # start-up and validation: the buffer's part
    assert timed.time_limit_seconds <= math.ceil((3600 + rest * (1 + free.buffer)) / 60) * 60
    assert timed.time_limit_seconds < free.time_limit_seconds / 10
    line = next(x for x in timed.explain if x.startswith("time=1: "))
    assert "ultralytics trains 60.0 min and stops" in line and "epochs=100 would take" in line
    assert "on all but the 60.0 min time= trains" in timed.buffer_reason


def test_a_short_run_with_time_trains_the_whole_time(cfg: config_mod.Config) -> None:
    """ultralytics re-plans its epochs up as well: epochs=3 with time=0.5 trains half an hour."""
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    s = spec.parse(["train", "data=coco8.yaml", "epochs=3", "time=0.5"])
    w = estimate.workload(s, 4, 4, m)
    p = plan.plan_partition(w, TM, "test", cfg.partition("t4"), plan.Request("t4", train_hours=0.5), cfg)
    assert p.predicted_train_seconds >= 1800
    assert any("about" in x and "epochs at the predicted" in x for x in p.explain)


def test_no_time_no_cap(cfg: config_mod.Config) -> None:
    w = coco_run()
    a = plan.plan_partition(w, TM, "test", cfg.partition("t4"), plan.Request("t4"), cfg)
    b = plan.plan_partition(w, TM, "test", cfg.partition("t4"), plan.Request("t4", train_hours=0.0), cfg)
    assert a.time_limit_seconds == b.time_limit_seconds
