"""A run ultralytics' ``time=`` stopped: the feedback learns from the epochs it did, not those asked."""

from __future__ import annotations

from slurm_yolo.controller import feedback
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.parse.beacon import Beacon


def test_a_time_capped_run_is_read_at_its_epochs_done() -> None:
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    s = spec.parse(["train", "data=coco.yaml", "model=yolov8n.pt", "epochs=100", "time=1"])
    asked = estimate.workload(s, 118287, 5000, m)
    b = Beacon(at=0, epochs_done=7, train_seconds=3600.0, one_run=True, gpus=1, cpus=8, workload=asked)
    sample = feedback.sample_from_beacon(b, "k", elapsed=3700)
    assert sample is not None
    assert (sample.workload.epochs, sample.workload.val_passes) == (7, 7)  # validated after each epoch done
    assert sample.train_seconds == 3600.0
    # the hour measured is 7 epochs' worth: what the partition's k learns from
    assert sample.workload.train_pixels == asked.train_pixels * 7 / 100
