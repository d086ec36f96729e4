"""Resuming a training run as ultralytics resumes it: ``resume`` (or ``resume=True``) with
``model=path/to/last.pt``, or ``resume=path/to/last.pt``. ultralytics takes the checkpoint's own
training arguments (a few, such as ``imgsz`` and ``batch``, may be given again) and trains the epochs
it has left; the plan does the same from the run folder the checkpoint is in (``args.yaml`` and the
rows of ``results.csv``), without loading the checkpoint (that needs torch: never on a login node).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.spec import TrainSpec, check_value, ultralytics_cfg

# What ultralytics' trainer (check_resume) lets a resumed run change; the rest is the checkpoint's.
MAY_CHANGE = frozenset(
    {"imgsz", "batch", "device", "close_mosaic", "augmentations", "save_period", "workers", "cache", "patience"}
    | {"time", "freeze", "val", "plots", "channels_last", "distill_model", "save_dir", "data"}
)
MAX_ARGS_CHARS = 1 << 20  # an args.yaml is a few hundred keys: a bigger one is no run's


def checkpoint(s: TrainSpec) -> Path | None:
    """The checkpoint a command resumes (None: it resumes nothing)."""
    value = s.args.get("resume")
    if value is None or value is False:
        return None
    if value is not True:
        return _path(str(value))
    if not s.model.endswith(".pt") or "model" not in s.args:
        raise UsageError("resume needs the checkpoint to resume: model=path/to/last.pt (or resume=path/to/last.pt)")
    return _path(s.model)


def _path(text: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user that does not exist
        return Path(text)


def resumed(s: TrainSpec) -> TrainSpec:
    """The run ``s`` resumes, for the plan: the checkpoint's arguments (with what a resumed run may
    change taken from ``s``) and, as ``epochs``, the epochs it has left. ``tokens`` stay the user's."""
    run = checkpoint_run(s)
    if run is None:
        return s
    folder, whole, done = run
    if done >= whole.epochs:
        raise UsageError(f"resume: {folder} trained all its {whole.epochs} epochs: nothing is left to resume")
    return TrainSpec(
        task=whole.task, mode=whole.mode, args={**whole.args, "epochs": whole.epochs - done}, tokens=s.tokens
    )


def checkpoint_run(s: TrainSpec) -> tuple[Path, TrainSpec, int] | None:
    """The run folder ``s`` resumes, the whole run as its checkpoint's arguments say (``epochs``: all
    of them, as its results.csv numbers them; with what a resumed run may change taken from ``s``)
    and the epochs it finished; None when ``s`` resumes nothing. The job's usage records count
    progress against it (epoch 25/40, not /100) and its images from its own data."""
    last = checkpoint(s)
    if last is None:
        return None
    shown = str(last)[:200]
    try:
        if not last.is_file():
            raise UsageError(f"resume: checkpoint {shown} not found")
        folder = last.resolve().parent.parent  # ultralytics' RUN/weights/last.pt
        args_file = folder / "args.yaml"
        found = args_file.is_file()
    except OSError as e:  # a name too long, a loop
        raise UsageError(f"resume: checkpoint {shown}: {e.strerror}") from None
    if not found:
        raise UsageError(f"resume: {args_file} not found: {shown} is not in an ultralytics run folder (RUN/weights/)")
    done = _epochs_done(folder / "results.csv")
    import yaml  # the resume path only

    try:
        with args_file.open(encoding="utf-8") as f:
            text = f.read(MAX_ARGS_CHARS + 1)
        saved = yaml.safe_load(text) if len(text) <= MAX_ARGS_CHARS else None
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError):
        saved = None
    if not isinstance(saved, dict):
        raise UsageError(f"resume: {args_file} is not the training arguments ultralytics writes")
    known = ultralytics_cfg()["defaults"]
    args: dict[str, Any] = {}
    for key, value in saved.items():
        # device: where it ran before (cpu, on a test cluster's fake GPUs); the job trains on its own GPUs
        if key in known and key not in ("mode", "task", "resume", "model", "device") and value is not None:
            try:
                args[key] = check_value(key, value)
            except UsageError as e:
                raise UsageError(f"resume: {args_file}: {e}") from None
    args |= {k: v for k, v in s.args.items() if k in MAY_CHANGE}
    total = int(args.get("epochs", known["epochs"]))
    if "data" not in args:
        raise UsageError(f"resume: {args_file} names no data=: give data=")
    # the model it was started from (its FLOPs are the checkpoint's), else the checkpoint itself
    model = saved.get("model")
    args |= {"epochs": total, "model": model if isinstance(model, str) and model else str(last)}
    task = saved.get("task") if saved.get("task") in ultralytics_cfg()["tasks"] else s.task
    return folder, TrainSpec(task=task, mode=s.mode, args=args, tokens=s.tokens), done


def _epochs_done(results: Path) -> int:
    """The epochs the run finished: the rows of its results.csv (none yet: 0)."""
    try:
        with results.open(encoding="utf-8", newline="") as f:
            return max(0, sum(1 for row in csv.reader(f) if row) - 1)
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"resume: {results} is not readable: {e}") from None
