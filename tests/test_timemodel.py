"""The time model's predictions and its robust fit, on synthetic runs with known truth."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from slurm_yolo import estimate, spec
from slurm_yolo.timemodel import Sample, TimeModel, buffer_for, ddp_factor, fit, predict_seconds, predict_train_seconds

TRUTH = TimeModel(k=0.8, overhead_seconds=3.0, val_weight=0.4, iteration_seconds=0.05, startup_seconds=10.0,
                  family_factors={"yolov8": 1.0, "yolo11": 1.4})  # fmt: skip
PRIOR = TimeModel(k=1.0, overhead_seconds=5.0, val_weight=0.5, iteration_seconds=0.0, startup_seconds=10.0)


def workload(model: str, epochs: int, imgsz: int, batch: int, train: int = 64, val: int = 16) -> estimate.Workload:
    m = estimate.lookup_model(model)
    assert m is not None
    s = spec.parse(["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}", f"batch={batch}"])
    return estimate.workload(s, train, val, m)


def runs(n: int, noise: float = 0.02, seed: int = 1, models: tuple[str, ...] = ("yolov8n", "yolov8s")) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        w = workload(models[i % len(models)], rng.randint(1, 30), rng.choice([64, 128, 256, 320]), rng.choice([4, 8, 16]),
                     rng.randint(20, 400), rng.randint(5, 100))  # fmt: skip
        t = predict_train_seconds(w, TRUTH, 1, 0.9, 8.86) * (1 + rng.uniform(-noise, noise))
        out.append(Sample(w, 1, t, key=str(i)))
    return out


def test_predictions_add_up() -> None:
    w = workload("yolov8n", 2, 64, 8)
    train = predict_train_seconds(w, TRUTH, 1, 0.9, 8.86)
    tr, va = w.train_tokens / 1e6, w.val_tokens / 1e6
    assert train == pytest.approx(3.0 + 0.8 * (tr + 0.4 * va) + 0.05 * w.iterations)
    total = predict_seconds(w, TRUTH, 1, 0.9, 8.86)
    assert total == pytest.approx(10.0 + train + 0.8 * 0.4 * w.final_val_tokens / 1e6)


def test_ddp_factor() -> None:
    assert ddp_factor(1, 0.9) == 1.0
    assert ddp_factor(2, 0.9) == pytest.approx(1.8)
    assert ddp_factor(4, 0.9) == pytest.approx(4 * 0.81)


def test_full_form_recovered_from_many_runs() -> None:
    tm = fit(runs(30), PRIOR)
    assert tm.form == "a+k+w+c"
    assert tm.k == pytest.approx(0.8, rel=0.1)
    assert tm.overhead_seconds == pytest.approx(3.0, rel=0.35)
    assert tm.iteration_seconds == pytest.approx(0.05, rel=0.25)
    assert tm.loo_median is not None and tm.loo_median < 0.03
    assert tm.n == 30


def test_one_run_gives_k_only() -> None:
    tm = fit(runs(1), PRIOR)
    assert tm.form == "k" and tm.loo_median is None and tm.n == 1
    assert tm.val_weight == PRIOR.val_weight


def test_thin_data_falls_back_to_fewer_parameters() -> None:
    assert len(fit(runs(3), PRIOR).form.split("+")) <= 2


def test_outlier_does_not_move_k() -> None:
    clean = fit(runs(20), PRIOR)
    dirty = runs(20)
    dirty[3] = dirty[3]._replace(train_seconds=dirty[3].train_seconds * 6)  # a user's broken job
    assert fit(dirty, PRIOR).k == pytest.approx(clean.k, rel=0.1)


def test_family_factor_is_calibrated() -> None:
    tm = fit(runs(24, models=("yolov8n", "yolo11n", "yolov8s", "yolo11s")), replace(PRIOR, family_factors={}))
    assert tm.family_factor("yolov8") == 1.0
    assert tm.family_factor("yolo11") == pytest.approx(1.4, rel=0.1)


def test_buffer_never_below_configured_and_widens_with_few_runs() -> None:
    assert buffer_for(replace(PRIOR, n=0), 0.2).value == 1.0
    assert buffer_for(replace(PRIOR, n=2), 0.2).value == 0.5
    tight = replace(PRIOR, n=50, ratio_max=1.5, ratio_p95=1.05)
    assert buffer_for(tight, 0.2).value == 0.2
    loose = replace(PRIOR, n=50, ratio_max=1.6, ratio_p95=1.35)
    assert buffer_for(loose, 0.2).value == pytest.approx(0.35)
    few = replace(PRIOR, n=5, ratio_max=1.3, ratio_p95=1.3)
    b = buffer_for(few, 0.2)
    assert b.value > 0.3 and "small-sample" in b.reason
