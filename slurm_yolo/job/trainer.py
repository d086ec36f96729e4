"""The training process of a job: ultralytics, in-process, as the user asked (job side only).

``launcher.py`` starts this (``python -m slurm_yolo.job.trainer PLAN FD``) in a session of its own and
follows the run from outside, through the run folder ultralytics writes. Nothing here reports
progress: under several GPUs ultralytics trains in DDP workers it spawns itself (which get this
process's callbacks pickled, but report nowhere this process reads), and one GPU must go the same
way as eight.

It sizes threads from the allocation (ultralytics would take the whole node), picks the allocated
GPUs (or the CPU where there are none), caps a shard job's share of GPU memory, keeps ultralytics
offline, pins the run folder, lets a SIGTERM wait for a checkpoint's write, and tells the launcher
once, before training, where that folder is and how many GPUs train: one JSON line on the file
descriptor ``FD``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from slurm_yolo.core.resume import MAY_CHANGE


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


def share_gpus(torch: Any) -> None:
    """A shard job gets its share of each GPU's memory (SLURM_YOLO_GPU_SHARE, set by the plan)."""
    share = float(os.environ.get("SLURM_YOLO_GPU_SHARE", "0") or 0)
    if 0 < share < 1:
        for i in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(share, i)
    torch.backends.cudnn.benchmark = True


class WholeCheckpoints:
    """Slurm's SIGTERM (scancel, a grace's end) reaches this process itself (proctrack follows the
    launcher's children), and ultralytics writes last.pt in place: one that lands in the write leaves a
    torn checkpoint that no resume can load (CI, e8d1c84: the resumed job failed). The signal waits
    for the checkpoint's write (each epoch's save, and the final one that strips the optimizer), then
    ends the process as it would have; Slurm's SIGKILL still comes KillWait after it. ultralytics
    pickles the callbacks into its DDP workers (``generate_ddp_file``), so each worker guards its own
    saves too."""

    GUARDED = ("save_model", "final_eval")

    def __init__(self) -> None:
        self.saving = False
        self.pending = 0

    def __call__(self, trainer: Any) -> None:
        """ultralytics' on_pretrain_routine_start: guard this trainer's saves."""
        for name in self.GUARDED:
            setattr(trainer, name, self.guard(getattr(trainer, name)))
        signal.signal(signal.SIGTERM, self.on_signal)

    def guard(self, save: Any) -> Any:
        def saved() -> Any:
            self.saving = True
            try:
                return save()
            finally:
                self.saving = False
                if self.pending:
                    self.end(self.pending)

        return saved

    def on_signal(self, signum: int, _frame: Any) -> None:
        if self.saving:
            self.pending = signum
        else:
            self.end(signum)

    @staticmethod
    def end(signum: int) -> None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


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


def run_folder(model: Any, args: dict[str, Any]) -> Path:
    """Where ultralytics would save this run (its own rule: project, name, exist_ok, increments).
    The launcher is told this path and ultralytics is given it (``save_dir``), so both mean the same
    folder. A fresh run starts a new results.csv, as ultralytics' trainer would: the old one goes
    now, before the launcher reads the folder, so that no row of an earlier run counts as this one's."""
    from ultralytics.cfg import get_cfg, get_save_dir

    folder = get_save_dir(get_cfg(overrides={**model.overrides, **args, "mode": "train"}))  # as model.train merges
    (folder / "results.csv").unlink(missing_ok=True)
    return folder


def main(plan: dict[str, Any], report_fd: int) -> int:
    """Train ``plan`` (model, task, args, resume, cpus); the process exit code."""
    cpus = int(plan["cpus"])
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", str(cpus))
    _ensure_font()
    import torch
    from ultralytics import YOLO

    torch.set_num_threads(cpus)
    args: dict[str, Any] = dict(plan["args"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        share_gpus(torch)
        offline_amp_check()
        args["device"] = ",".join(str(i) for i in range(gpus))
    else:
        args["device"] = "cpu"
    if plan["resume"]:
        last = Path(plan["resume"])
        model = YOLO(str(last))
        folder = last.parent.parent
        # the checkpoint's arguments, but for what a resumed run may change (ultralytics' check_resume)
        args = {k: v for k, v in args.items() if k in MAY_CHANGE} | {"resume": True}
    else:
        model = YOLO(plan["model"], task=plan["task"])
        folder = run_folder(model, args)
    args["save_dir"] = str(folder)
    with os.fdopen(report_fd, "w") as report:
        report.write(json.dumps({"save_dir": str(folder), "gpus": gpus}) + "\n")
    model.add_callback("on_pretrain_routine_start", WholeCheckpoints())
    model.train(**args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(json.loads(sys.argv[1]), int(sys.argv[2])))
