"""The time model's predictions and its fit, on synthetic runs with a known truth (the corpus tests, in
test_fitting.py, check it on real runs)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, replace

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate, fitting
from slurm_yolo.core.model.fitting import conformal_quantile, fit, noise_scale
from slurm_yolo.core.model.timemodel import (
    Sample,
    TimeModel,
    buffer_for,
    components,
    ddp_factor,
    describe,
    final_val_seconds,
    predict_seconds,
    predict_train_seconds,
)

TRUTH = TimeModel(
    k=0.8,
    overhead_seconds=3.0,
    val_weight=0.4,
    iteration_seconds=0.05,
    startup_seconds=10.0,
    epoch_seconds=0.7,
    val_pass_seconds=0.3,
    imgsz_exponent=0.35,
    iteration_exponent=0.2,
    family_factors={"yolov8": 1.0, "yolo11": 1.4},
)
PRIOR = TimeModel(
    k=1.0,
    overhead_seconds=5.0,
    val_weight=0.5,
    iteration_seconds=0.02,
    startup_seconds=20.0,
    epoch_seconds=0.5,
    val_pass_seconds=0.5,
    imgsz_exponent=0.3,
    iteration_exponent=0.3,
)


def workload(model: str, epochs: int, imgsz: int, batch: int, train: int = 64, val: int = 16) -> estimate.Workload:
    m = estimate.lookup_model(model)
    assert m is not None
    s = spec.parse(["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}", f"batch={batch}"])
    return estimate.workload(s, train, val, m)


def runs(n: int, noise: float = 0.02, seed: int = 1, models: tuple[str, ...] = ("yolov8n", "yolov8s")) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        w = workload(
            models[i % len(models)],
            rng.randint(1, 30),
            rng.choice([64, 128, 256, 320, 640]),
            rng.choice([4, 8, 16]),
            rng.randint(20, 400),
            rng.randint(5, 100),
        )
        t = predict_train_seconds(w, TRUTH, 1, 0.9, 8.86) * (1 + rng.uniform(-noise, noise))
        total = t + TRUTH.startup_seconds + final_val_seconds(w, TRUTH, 8.86)
        out.append(Sample(w, 1, t, key=str(i), total_seconds=total))
    return out


def test_the_fit_and_the_prediction_are_one_formula() -> None:
    """fitting._predict (vectorised, what the fit minimises) and timemodel's predict_* agree term by
    term, with every term and factor set and batches larger than their splits."""
    tm = replace(
        TRUTH,
        batch_exponent=0.2,
        image_seconds=0.002,
        val_image_seconds=0.003,
        model_factors={"yolo11n": 1.1},
        step_factors={"yolo11": 1.3},
        startup_factors={"yolo11": 1.2},
    )
    ws = [
        workload("yolo11n", 3, 320, 32, train=16, val=8),
        workload("yolov8s", 2, 160, 8, train=100, val=40),
        workload("yolo11n", 1, 640, 4, train=9, val=3),
    ]
    samples = [Sample(w, 1, 1.0) for w in ws]
    p = fitting._Params(tm, ["yolo11"], ["yolo11n", "yolov8s"], startup=False)
    train, final = fitting._predict(p.mu, p, fitting._design(samples, p, 0.9, 8.86))
    assert list(train) == pytest.approx([predict_train_seconds(w, tm, 1, 0.9, 8.86) for w in ws])
    assert list(final) == pytest.approx([final_val_seconds(w, tm, 8.86) for w in ws])


def test_predictions_add_up_term_by_term() -> None:
    w = workload("yolov8s", 2, 320, 8)
    mf = 28.81 / 8.86
    cost = 0.8 * mf * (320 / 640) ** -0.35 / 1e6
    expected = (
        3.0
        + 0.7 * 2
        + 0.3 * w.val_passes
        + 0.05 * w.iterations * mf**0.2
        + cost * (w.train_pixels + 0.4 * w.val_pixels)
    )
    assert predict_train_seconds(w, TRUTH, 1, 0.9, 8.86) == pytest.approx(expected)
    final = 0.3 + cost * 0.4 * w.final_val_pixels
    assert predict_seconds(w, TRUTH, 1, 0.9, 8.86) == pytest.approx(10.0 + expected + final)


def test_small_images_cost_more_per_pixel() -> None:
    big, small = workload("yolov8n", 1, 640, 8), workload("yolov8n", 1, 96, 8)
    compute_only = replace(TRUTH, overhead_seconds=0, epoch_seconds=0, val_pass_seconds=0, iteration_seconds=0)
    per_pixel = [predict_train_seconds(w, compute_only, 1, 0.9, 8.86) / w.train_pixels for w in (big, small)]
    assert per_pixel[1] / per_pixel[0] == pytest.approx((96 / 640) ** -0.35, rel=0.05)


def test_a_data_loader_bound_bounds_the_epoch() -> None:
    w = workload("yolov8n", 4, 64, 32, train=1000)
    loader = replace(TRUTH, loader_seconds=0.05)
    assert predict_train_seconds(w, loader, 1, 0.9, 8.86, cpus=0) == predict_train_seconds(w, TRUTH, 1, 0.9, 8.86)
    bound = predict_train_seconds(w, loader, 1, 0.9, 8.86, cpus=2)
    assert bound > predict_train_seconds(w, TRUTH, 1, 0.9, 8.86)
    assert bound == pytest.approx(predict_train_seconds(w, replace(TRUTH, k=0), 1, 0.9, 8.86) + 0.05 * 4 * 1000 / 2)


def test_a_tasks_loader_factor_scales_only_that_tasks_loader() -> None:
    """loader_task_factors multiplies the loader's cost per image of its task's runs, nothing else;
    a model stored before the field existed loads with none (1 for every task)."""
    tm = replace(TRUTH, loader_seconds=0.05, loader_task_factors={"segment": 2.0})
    plain = replace(tm, loader_task_factors={})
    seg, det = workload("yolov8n-seg", 4, 64, 32, train=1000), workload("yolov8n", 4, 64, 32, train=1000)
    pose = workload("yolov8n-pose", 4, 64, 32, train=1000)
    assert (seg.task, det.task, pose.task) == ("segment", "detect", "pose")
    for w, times in ((seg, 2.0), (det, 1.0), (pose, 1.0)):
        a, b = components(w, plain, 1, 0.9, 8.86, cpus=2), components(w, tm, 1, 0.9, 8.86, cpus=2)
        assert (b.fixed, b.compute) == (a.fixed, a.compute)
        assert b.loader == pytest.approx(a.loader * times) and a.loader > 0
    custom = replace(det, model="runs/best.pt", family="custom")
    assert custom.task == "" and components(custom, tm, 1, 0.9, 8.86, 2) == components(custom, plain, 1, 0.9, 8.86, 2)
    stored = asdict(tm)
    assert TimeModel.from_dict(json.loads(json.dumps(stored))) == tm
    del stored["loader_task_factors"]
    assert TimeModel.from_dict(stored).loader_task_factors == {}
    assert estimate.Workload(**json.loads(json.dumps(seg.to_dict()))) == seg  # the task is not stored


def test_ddp_factor() -> None:
    assert ddp_factor(1, 0.9) == 1.0
    assert ddp_factor(2, 0.9) == pytest.approx(1.8)
    assert ddp_factor(4, 0.9) == pytest.approx(4 * 0.81)


def test_many_runs_recover_the_terms_and_the_startup() -> None:
    tm = fit(runs(60), PRIOR)
    assert tm.n == 60 and tm.startup_n == 60
    assert tm.k == pytest.approx(0.8, rel=0.15)
    assert tm.imgsz_exponent == pytest.approx(0.35, abs=0.08)
    assert tm.startup_seconds == pytest.approx(10.0, rel=0.1)
    assert tm.family_factor("yolov8") == 1.0  # the anchor: k carries the scale
    assert tm.cv_median is not None and tm.cv_median < 0.03
    assert tm.cv_bias is not None and abs(tm.cv_bias) < 0.02


def test_no_term_is_dropped_and_thin_data_keeps_the_prior_shape() -> None:
    one = fit(runs(1), PRIOR)
    assert one.n == 1 and one.cv_median is None and one.coverage is None
    # The prior carries what one run cannot see: the shape terms barely move, the scale does.
    assert one.imgsz_exponent == pytest.approx(PRIOR.imgsz_exponent, abs=0.05)
    assert one.val_weight == pytest.approx(PRIOR.val_weight, rel=0.2)
    s = runs(1)[0]
    assert predict_train_seconds(s.workload, one, 1, 0.9, 8.86) == pytest.approx(s.train_seconds, rel=0.1)


def test_run_folders_keep_the_learned_startup() -> None:
    folders = [s._replace(total_seconds=None) for s in runs(12)]
    learned = replace(PRIOR, startup_seconds=7.5, startup_n=40)
    tm = fit(folders, learned)
    assert tm.startup_seconds == 7.5 and tm.startup_n == 40


def test_outlier_does_not_move_k() -> None:
    clean = fit(runs(20), PRIOR)
    dirty = runs(20)
    dirty[3] = dirty[3]._replace(train_seconds=dirty[3].train_seconds * 6)  # a user's broken job
    assert fit(dirty, PRIOR).k == pytest.approx(clean.k, rel=0.1)


def test_family_factor_is_calibrated() -> None:
    tm = fit(runs(40, models=("yolov8n", "yolo11n", "yolov8s", "yolo11s")), replace(PRIOR, family_factors={}))
    assert tm.family_factor("yolov8") == 1.0
    assert tm.family_factor("yolo11") == pytest.approx(1.4, rel=0.1)


def test_conformal_rank_and_what_few_runs_can_promise() -> None:
    scores = [i / 100 for i in range(199)]
    assert conformal_quantile(scores, 0.99) == (scores[math.ceil(200 * 0.99) - 1], 0.99)
    assert conformal_quantile([0.1, -0.1, 0.3], 0.99) == (0.3, 0.75)  # the max covers n/(n+1)


def unit_scale(ratio: float, n: int, coverage: float) -> TimeModel:
    """A cross-validated model whose limit allows ``ratio`` at every run length."""
    return replace(PRIOR, n=n, coverage=coverage, coverage_z=math.log(ratio), noise_relative=1.0, noise_seconds=0.0)


def test_buffer_comes_from_the_coverage_never_below_configured() -> None:
    assert buffer_for(replace(PRIOR, n=0), 0.2, 600).value == 1.0
    assert buffer_for(replace(PRIOR, n=1), 0.2, 600).value == 0.5
    tight = unit_scale(1.08, n=150, coverage=0.99)
    assert buffer_for(tight, 0.2, 600).value == 0.2 and buffer_for(tight, 0.2, 600).coverage == 0.99
    b = buffer_for(unit_scale(1.35, n=150, coverage=0.99), 0.2, 600)
    assert b.value == pytest.approx(0.35) and "99%" in b.reason
    few = unit_scale(1.1, n=3, coverage=0.75)
    assert buffer_for(few, 0.2, 600).value == 0.5 and "fewer than 5" in buffer_for(few, 0.2, 600).reason
    nine = buffer_for(unit_scale(1.3, n=9, coverage=0.9), 0.2, 600).reason  # estimate.coverage 0.99 asked
    assert "covers 90% of 9" in nine and "9 runs can promise no more than 90%" in nine
    assert "can promise" not in b.reason


def test_seconds_of_jitter_pad_short_runs_not_long_ones() -> None:
    rng = random.Random(3)
    predicted = [math.exp(rng.uniform(math.log(10), math.log(3000))) for _ in range(4000)]
    errors = [rng.gauss(0, math.sqrt(0.05**2 + (3.0 / p) ** 2)) for p in predicted]  # 5% and 3 s of jitter
    relative, seconds = noise_scale(predicted, errors)
    assert relative == pytest.approx(0.05, rel=0.15) and seconds == pytest.approx(3.0, rel=0.25)
    tm = replace(PRIOR, n=100, coverage=0.99, coverage_z=2.6, noise_relative=relative, noise_seconds=seconds)
    short, long = buffer_for(tm, 0.0, 20), buffer_for(tm, 0.0, 3600)
    # z x sqrt(0.05^2 + (3/T)^2): 0.13 of log at one hour, 0.43 for a 20-second run
    assert long.value == pytest.approx(math.exp(2.6 * 0.05) - 1, rel=0.2)
    assert short.value == pytest.approx(math.exp(2.6 * math.hypot(0.05, 3 / 20)) - 1, rel=0.2)
    assert noise_scale([10, 100, 1000], [0.1, -0.1, 0.1]) == pytest.approx((0.1, 0.0), abs=1e-6)  # relative only


def test_models_stored_by_older_versions_still_load() -> None:
    old = {
        "k": 2.0,
        "overhead_seconds": 5.0,
        "val_weight": 0.5,
        "iteration_seconds": 0.0,
        "startup_seconds": 20.0,
        "family_factors": {},
        "form": "a+k",
        "n": 7,
        "loo_median": 0.1,
        "loo_p90": 0.2,
        "ratio_max": 1.3,
        "ratio_p95": 1.2,
    }
    tm = TimeModel.from_dict(json.loads(json.dumps(old)))
    assert tm.k == 2.0 and tm.n == 7 and tm.coverage is None
    assert buffer_for(tm, 0.2, 600).value == 0.5  # no cross-validation stored: the cautious buffer
    one_ratio = TimeModel.from_dict({**old, "coverage": 0.99, "coverage_ratio": 1.3, "n": 150})
    assert buffer_for(one_ratio, 0.2, 60).value == buffer_for(one_ratio, 0.2, 36000).value == pytest.approx(0.3)
    assert TimeModel.from_dict(asdict(fit(runs(10), PRIOR))).coverage is not None
    assert len(describe(tm)) == 2
