"""The in-job runner: real ultralytics training with usage records (job side only: imports ultralytics).

It sizes threads and workers from the Slurm allocation (ultralytics would take the whole node), picks
the allocated GPUs (or the CPU where there are none), caps a shard job's share of GPU memory, keeps
ultralytics offline, and appends JSON lines to ``yolo-usage-JOBID.jsonl`` beside the job's output: a
``start`` record with the workload (what the k feedback needs), one per epoch (images, tokens,
seconds, GPU memory and utilisation), checkpoints, requeues, and one at the end.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import config as config_mod
from . import dataset, estimate
from . import spec as spec_mod
from .errors import SlurmYoloError
from .parse.records import iter_records


def _ensure_font() -> None:
    """ultralytics downloads Arial.ttf when it is missing; offline, give it any TTF on the machine."""
    base = Path(os.environ.get("YOLO_CONFIG_DIR") or Path.home() / ".config") / "Ultralytics"
    target = base / "Arial.ttf"
    if target.exists():
        return
    fonts = sorted(glob.glob("/usr/share/fonts/truetype/**/*.ttf", recursive=True))
    if fonts:
        base.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fonts[0], target)


def _cpus() -> int:
    try:
        return max(1, int(os.environ.get("SLURM_CPUS_PER_TASK", "")))
    except ValueError:
        return max(1, len(os.sched_getaffinity(0)))


def usage_path() -> Path:
    job = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
    return Path(os.environ.get("SLURM_SUBMIT_DIR", ".")) / f"yolo-usage-{job}.jsonl"


class UsageRecorder:
    """ultralytics callbacks that append usage records."""

    def __init__(self, path: Path, imgsz: int) -> None:
        self.path = path
        self.imgsz = imgsz
        self.started = time.monotonic()
        self.epoch_started = self.started
        self.last_epoch = 0

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": time.time(), "job_id": os.environ.get("SLURM_JOB_ID"),
                  "restart": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0), **record}  # fmt: skip
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=float) + "\n")

    def on_train_epoch_start(self, trainer: Any) -> None:
        self.epoch_started = time.monotonic()

    def on_fit_epoch_end(self, trainer: Any) -> None:
        if trainer.epoch >= trainer.epochs or trainer.epoch + 1 <= self.last_epoch:
            return  # ultralytics fires this again for the final validation
        self.last_epoch = trainer.epoch + 1
        images = len(trainer.train_loader.dataset)
        seconds = time.monotonic() - self.epoch_started
        self.write({
            "kind": "epoch", "epoch": trainer.epoch + 1, "epochs": trainer.epochs, "images": images,
            "tokens": images * self.imgsz**2, "seconds": seconds,
            "images_per_s": images / seconds if seconds > 0 else None,
            "metrics": {k: float(v) for k, v in (trainer.metrics or {}).items()},
            **gpu_telemetry(),
        })  # fmt: skip

    def on_train_end(self, trainer: Any) -> None:
        self.write({
            "kind": "end", "epochs_completed": trainer.epoch + 1, "seconds": time.monotonic() - self.started,
            "metrics": {k: float(v) for k, v in (trainer.metrics or {}).items()},
        })  # fmt: skip


class Requeue:
    """USR2 (time limit near, or preemption): at the next epoch end, once last.pt is saved, requeue.

    The handler only sets a flag: checkpointing inside a signal handler could tear a write. Slurm
    then ends this run; the next one (SLURM_RESTART_COUNT + 1) resumes from the recorded checkpoint.
    """

    def __init__(self, recorder: UsageRecorder, scontrol: str = "/usr/bin/scontrol") -> None:
        self.requested = False
        self.recorder = recorder
        self.scontrol = scontrol
        signal.signal(signal.SIGUSR2, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def on_fit_epoch_end(self, trainer: Any) -> None:
        if trainer.epoch >= trainer.epochs:
            return  # the final validation, not an epoch
        last = Path(trainer.save_dir) / "weights" / "last.pt"
        if last.exists():
            self.recorder.write({"kind": "checkpoint", "epoch": trainer.epoch + 1, "last": str(last)})
        if self.requested and os.environ.get("SLURM_JOB_ID"):
            self.recorder.write({"kind": "requeue", "epoch": trainer.epoch + 1})
            subprocess.run([self.scontrol, "requeue", os.environ["SLURM_JOB_ID"]], check=False)
            trainer.stop = True


def gpu_telemetry() -> dict[str, float]:
    """Peak GPU memory (torch) and utilisation (NVML) when there is a GPU; nothing otherwise."""
    import torch

    if not torch.cuda.is_available():
        return {}
    out = {"gpu_mem_gb": max(torch.cuda.max_memory_reserved(i) for i in range(torch.cuda.device_count())) / 1e9}
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        out["gpu_util_pct"] = sum(pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles) / max(1, len(handles))
    except Exception:  # noqa: BLE001, S110 - no driver or NVML: memory alone is still worth recording
        pass
    return out


def start_record(s: spec_mod.TrainSpec, gpus: int, cpus: int) -> dict[str, Any]:
    """The workload this job trains (dataset counted, model resolved as yolo-sbatch did), and the
    CPUs it has (a GPU site's data-loader term reads them)."""
    record: dict[str, Any] = {"kind": "start", "imgsz": s.imgsz, "epochs": s.epochs, "gpus": max(1, gpus), "cpus": cpus,
                              "partition": os.environ.get("SLURM_JOB_PARTITION")}  # fmt: skip
    try:
        cfg = config_mod.load()
        counts = dataset.count(str(s.get("data")), cfg.cache_dir / "datasets.json")
        model = estimate.resolve_model(s.model, cfg["estimate"]["reference_gflops"], sys.executable, cfg.cache_dir)
        record["workload"] = estimate.workload(s, counts.train, counts.val, model).to_dict()
    except SlurmYoloError as e:
        record["warning"] = f"workload unknown: {e}"
    return record


def share_gpus(torch: Any) -> None:
    """A shard job gets its share of each GPU's memory (SLURM_YOLO_GPU_SHARE, set by the plan)."""
    share = float(os.environ.get("SLURM_YOLO_GPU_SHARE", "0") or 0)
    if 0 < share < 1:
        for i in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(share, i)
    torch.backends.cudnn.benchmark = True


def offline_amp_check() -> None:
    """ultralytics' AMP check on CUDA downloads yolo26n.pt when it is not cached, which an offline
    compute node cannot: keep AMP as the user asked instead of failing the job on the download."""
    import ultralytics.engine.trainer as trainer_mod
    from ultralytics.utils import LOGGER, WEIGHTS_DIR

    if (WEIGHTS_DIR / "yolo26n.pt").is_file():
        return

    def no_download(model: Any) -> bool:
        LOGGER.warning("AMP checks skipped: offline and no cached yolo26n.pt (slurm-yolo); AMP stays on")
        return True

    trainer_mod.check_amp = no_download


def last_checkpoint(path: Path) -> str | None:
    """The newest checkpoint an earlier run of this job recorded, if it still exists."""
    last = None
    for rec in iter_records(path):
        if rec.get("kind") == "checkpoint":
            last = rec.get("last")
    return last if last and Path(last).exists() else None


def run(words: list[str]) -> int:
    """Train as the user asked, inside the allocation; the process exit code."""
    s = spec_mod.parse(words)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    _ensure_font()
    cpus = _cpus()
    os.environ.setdefault("OMP_NUM_THREADS", str(cpus))
    import torch
    from ultralytics import YOLO

    torch.set_num_threads(cpus)
    args = dict(s.args)
    args.pop("model", None)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        share_gpus(torch)
        offline_amp_check()
        args["device"] = ",".join(str(i) for i in range(gpus))
    else:
        args["device"] = "cpu"
    args["workers"] = min(int(args.get("workers", 8)), max(0, cpus - 1))
    if s.model.endswith(".yaml"):
        args.setdefault("pretrained", False)
    recorder = UsageRecorder(usage_path(), s.imgsz)
    recorder.write(start_record(s, gpus, cpus))
    requeue = Requeue(recorder)
    resume_from = last_checkpoint(recorder.path) if int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) else None
    if resume_from:
        recorder.write({"kind": "resume", "from": resume_from})
        model = YOLO(resume_from)
        args = {"resume": True, "device": args["device"], "workers": args["workers"]}
    else:
        model = YOLO(s.model, task=s.task)
    for event in ("on_train_epoch_start", "on_fit_epoch_end", "on_train_end"):
        model.add_callback(event, getattr(recorder, event))
    model.add_callback("on_fit_epoch_end", requeue.on_fit_epoch_end)
    model.train(**args)
    return 0
