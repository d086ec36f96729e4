"""The GPU corpus' tasks: segment rows as points of their task, and the loader factor each task gets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import gpu_corpus, gpu_priors
from slurm_yolo.core import gputypes
from slurm_yolo.core.config import Partition
from slurm_yolo.core.model import gpu_priors as runtime
from slurm_yolo.core.model.timemodel import TimeModel


def test_segment_rows_keep_their_task_and_rows_without_a_batch_stay_skipped() -> None:
    points, skipped = gpu_corpus.load()
    segment = [p for p in points if p.task == "segment"]
    assert segment and {p.task for p in points} == {"detect", "segment"}
    assert all(p.sample.workload.task == "segment" and p.sample.workload.model.endswith("-seg") for p in segment)
    assert all(p.sample.workload.gflops == gpu_corpus.YOLOV5_CLASSIC["yolov5s-seg"] for p in segment)
    unbatched = [(row, why) for row, why in skipped if row["task"] == "segment"]
    assert unbatched and all(why == "no batch" and not row["batch"].strip() for row, why in unbatched)


def test_a_task_gets_the_loader_factor_its_points_show() -> None:
    """fit_task finds the factor that makes a task's points what they were (here: made 1.5x slower
    than the detect fit predicts at factor 1.5), and 1 for a task whose loader never binds."""
    points, _ = gpu_corpus.load()
    detect = [p for p in points if p.task == gpu_corpus.DETECT]
    f = gpu_priors.fit_shared(detect)
    segment = [p for p in points if p.task == "segment"]
    made = []
    for p in segment:
        tm = replace(f.model(p.gpu), loader_task_factors={"segment": 1.5})
        made.append(replace(p, sample=p.sample._replace(train_seconds=gpu_priors.predict(p, tm, f.ddp_efficiency))))
    assert gpu_priors.fit_task(f, made) == pytest.approx(1.5, rel=1e-3)
    no_loader = [replace(p, sample=p.sample._replace(cpus=0)) for p in segment]
    assert gpu_priors.fit_task(f, no_loader) == 1.0


def test_the_shipped_priors_give_segment_its_loader_factor() -> None:
    priors = runtime.shipped()
    assert priors["loader_tasks"]["segment"] > 1
    base = TimeModel(k=1.0, overhead_seconds=5.0, val_weight=0.5, iteration_seconds=0.02, startup_seconds=20.0)
    tm, _ = runtime.model_for(base, gputypes.card(Partition("p", gpu_type="t4")), priors)
    assert tm.loader_task_factors == priors["loader_tasks"] and tm.loader_seconds == priors["terms"]["loader_seconds"]
    older = {key: value for key, value in priors.items() if key != "loader_tasks"}
    assert runtime.model_for(base, gputypes.card(Partition("p", gpu_type="t4")), older)[0].loader_task_factors == {}
