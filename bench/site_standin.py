"""The site replay's stand-in for training: it sleeps a job's TRUE run time and writes what ultralytics
writes (a results.csv row and a whole ``weights/last.pt`` per epoch), so the product's launcher, its
usage records, USR2 checkpoints and requeues run as in production; the replay's GPUs never train.

Two ways in:
- as the launcher's trainer (``SLURM_YOLO_TRAINER=bench.site_standin``: ``python -m bench.site_standin
  PLAN_JSON REPORT_FD``), for the arms that submit through ``yolo-sbatch``;
- ``python -m bench.site_standin --plain``: a job of the habits arm, started by a plain sbatch script
  (no checkpoint: a job killed at its limit loses its work).

What it is told (``SLURM_YOLO_STANDIN``, JSON the replay sets per job, never read by any plan): the
workload, its error ratio against the GPU-type priors (``ratio``: drawn from the product's measured
leave-one-source-out errors), the replay's time scale (simulated seconds per real second) and the
folder its clock is logged to. Its true time on this job's card and CPUs is the GPU-type prior's
prediction times the ratio, over the scale. Each finished epoch appends ``{job, run, t0, t1, gpus,
epoch, epochs}`` (real epoch seconds) to its log: the GPU time it trained, checkpoints included.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurm_yolo.core import gputypes
from slurm_yolo.core.config import EstimateSettings, Partition
from slurm_yolo.core.model import gpu_priors
from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import TimeModel, predict_seconds
from slurm_yolo.state.calibration import PRIOR_KEYS

REF = 8.86  # yolov8n's GFLOPs: the reference the priors are fitted at
STARTUP_SHARE = 0.03  # of the true time before the first epoch (model build, data loaders)


def true_seconds(
    workload: dict[str, Any], gpu_type: str, gpus: int, cores: int, ratio: float, share: float = 0.0
) -> float:
    """The run's true simulated seconds on ``gpus`` cards of ``gpu_type`` fed by ``cores`` cores: the
    GPU-type prior's prediction times the drawn error; a shard computes at its share of the card."""
    w = Workload(**workload)
    card = gputypes.card(Partition("replay", gpu_type=gpu_type))
    defaults = EstimateSettings()  # the start-up and the rest a site's config starts from, as plans do
    base = TimeModel(**{key: getattr(defaults, key) for key in PRIOR_KEYS})
    tm, _ = gpu_priors.model_for(base, card, gpu_priors.shipped())
    if share:  # a shard time-slices its card with the others: it computes at its share (its loader does not)
        tm = replace(tm, k=tm.k / share)
    return predict_seconds(w, tm, max(1, gpus), 0.9, REF, max(1, cores)) * ratio


def _job_facts() -> tuple[str, int, float, int]:
    """(partition, GPUs, shard share, cores) as Slurm gave them to this job."""
    partition = os.environ.get("SLURM_JOB_PARTITION", "")
    share = float(os.environ.get("SLURM_YOLO_GPU_SHARE", "0") or 0)
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    gpus = int(os.environ.get("SLURM_GPUS_ON_NODE", "0") or 0) or len(visible) or 1
    cores = int(os.environ.get("SLURM_CPUS_PER_TASK", "0") or 0) or 1
    return partition, gpus, share, cores


def _checkpoint(path: Path, epoch: int) -> None:
    """A whole last.pt: a zip (as torch saves one) holding the epoch, written aside and moved in."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        z.writestr("standin.json", json.dumps({"epoch": epoch}))
    os.replace(tmp, path)


def _epoch_of(last: Path) -> int:
    try:
        with zipfile.ZipFile(last) as z:
            return int(json.loads(z.read("standin.json"))["epoch"])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return 0


def train(folder: Path, told: dict[str, Any], start_epoch: int, checkpoints: bool) -> None:
    """Sleep the run's true time epoch by epoch from ``start_epoch``, writing its rows (and
    checkpoints) and its clock."""
    partition, gpus, share, cores = _job_facts()
    gpu_type = told["gpu_types"].get(partition, partition)
    total = true_seconds(told["workload"], gpu_type, gpus, cores, float(told["ratio"]), share) / float(told["scale"])
    epochs = int(told["workload"]["epochs"])
    per_epoch = total * (1 - STARTUP_SHARE) / max(1, epochs)
    log = Path(told["log_dir"]) / f"{os.environ.get('SLURM_JOB_ID', os.getpid())}.jsonl"
    run = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    time.sleep(total * STARTUP_SHARE)
    results = folder / "results.csv"
    if not results.exists():
        results.write_text("epoch,time\n")
    for epoch in range(start_epoch + 1, epochs + 1):
        t0 = time.time()
        time.sleep(per_epoch)
        with results.open("a") as f:
            f.write(f"{epoch},{(epoch - start_epoch) * per_epoch * float(told['scale']):.1f}\n")
        if checkpoints:
            _checkpoint(folder / "weights" / "last.pt", epoch)
        with log.open("a") as f:
            f.write(
                json.dumps(
                    {
                        "job": os.environ.get("SLURM_JOB_ID"),
                        "run": run,
                        "t0": t0,
                        "t1": time.time(),
                        "gpus": share or gpus,
                        "epoch": epoch,
                        "epochs": epochs,
                    }
                )
                + "\n"
            )


def main(plan: dict[str, Any], report_fd: int) -> int:
    """The launcher's trainer: report the run folder, then train (resuming from a checkpoint)."""
    told = json.loads(os.environ["SLURM_YOLO_STANDIN"])
    if plan.get("resume"):
        last = Path(plan["resume"])
        folder, start = last.parent.parent, _epoch_of(last)
    else:
        folder, start = Path.cwd() / f"run-{os.environ.get('SLURM_JOB_ID', os.getpid())}", 0
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.csv").unlink(missing_ok=True)
    _, gpus, _, _ = _job_facts()
    with os.fdopen(report_fd, "w") as report:
        report.write(json.dumps({"save_dir": str(folder), "gpus": gpus}) + "\n")
    train(folder, told, start, checkpoints=True)
    return 0


def plain() -> int:
    """A habits-arm job: no launcher, no checkpoint."""
    told = json.loads(os.environ["SLURM_YOLO_STANDIN"])
    folder = Path.cwd() / f"run-{os.environ.get('SLURM_JOB_ID', os.getpid())}"
    folder.mkdir(parents=True, exist_ok=True)
    train(folder, told, 0, checkpoints=False)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--plain"]:
        raise SystemExit(plain())
    raise SystemExit(main(json.loads(sys.argv[1]), int(sys.argv[2])))
