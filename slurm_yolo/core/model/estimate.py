"""Work: the compute a training run needs, as pixels pushed through the network (pure math).

Shown in pixels (``Mpx``: ``fmt_pixels``), never in the budget's tokens (``Tok``, what the ledger
charges: ``billing.policy.fmt_tokens``). One image at training size s is s^2 pixels. A run is
``epochs x train_images x s^2`` training pixels
plus its validation passes over the val images (each epoch when ``val=True``, else the last one, plus
the final validation), weighted by the calibrated cost of a validation pixel. Effective pixels (work) scale
that by the model's FLOPs relative to yolov8n, so one ``k`` per partition serves every model size.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.spec import TrainSpec
from slurm_yolo.core.units import scaled

# GFLOPs at imgsz 640, nc=80, measured with ultralytics 8.4.190 (utils.torch_utils.get_flops on the
# model built from its yaml). A test re-measures a few when the [train] extra is installed.
GFLOPS: dict[str, float] = {
    "yolov8n": 8.86,
    "yolov8s": 28.81,
    "yolov8m": 79.31,
    "yolov8l": 165.73,
    "yolov8x": 258.54,
    "yolo11n": 6.67,
    "yolo11s": 21.84,
    "yolo11m": 68.64,
    "yolo11l": 87.85,
    "yolo11x": 196.32,
    "yolo12n": 7.63,
    "yolo12s": 23.65,
    "yolo12m": 71.35,
    "yolo12l": 96.29,
    "yolo12x": 210.15,
    "yolo26n": 6.24,
    "yolo26s": 23.08,
    "yolo26m": 75.64,
    "yolo26l": 94.16,
    "yolo26x": 210.07,
    "yolov5nu": 7.84,
    "yolov5su": 24.21,
    "yolov5mu": 64.6,
    "yolov5lu": 135.62,
    "yolov5xu": 247.31,
    "yolov9t": 8.48,
    "yolov9s": 27.55,
    "yolov9m": 77.86,
    "yolov9c": 104.01,
    "yolov9e": 193.01,
    "yolov10n": 8.8,
    "yolov10s": 25.23,
    "yolov10m": 64.61,
    "yolov10b": 99.47,
    "yolov10l": 127.99,
    "yolov10x": 171.99,
}

# The segment, pose, OBB and classify variants, measured the same way on their yamls' own defaults (seg
# nc=80, pose nc=1 with 17 keypoints, obb nc=15, cls nc=1000): ultralytics picks the ``-seg``/``-pose``/``-obb`` model
# for those tasks (``segment train`` without model= trains yolo26n-seg.pt).
TASK_GFLOPS: dict[str, float] = {
    "yolov8n-seg": 12.14,
    "yolov8s-seg": 40.34,
    "yolov8m-seg": 104.98,
    "yolov8l-seg": 211.06,
    "yolov8x-seg": 329.19,
    "yolov8n-pose": 9.29,
    "yolov8s-pose": 30.4,
    "yolov8m-pose": 81.41,
    "yolov8l-pose": 169.14,
    "yolov8x-pose": 263.95,
    "yolov8n-obb": 9.1,
    "yolov8s-obb": 29.8,
    "yolov8m-obb": 81.46,
    "yolov8l-obb": 169.43,
    "yolov8x-obb": 264.31,
    "yolo11n-seg": 9.96,
    "yolo11s-seg": 33.36,
    "yolo11m-seg": 113.97,
    "yolo11l-seg": 133.18,
    "yolo11x-seg": 297.89,
    "yolo11n-pose": 7.78,
    "yolo11s-pose": 23.6,
    "yolo11m-pose": 72.39,
    "yolo11l-pose": 91.6,
    "yolo11x-pose": 204.7,
    "yolo11n-obb": 6.92,
    "yolo11s-obb": 22.82,
    "yolo11m-obb": 72.34,
    "yolo11l-obb": 91.55,
    "yolo11x-obb": 204.62,
    "yolo26n-seg": 10.63,
    "yolo26s-seg": 37.66,
    "yolo26m-seg": 132.78,
    "yolo26l-seg": 151.3,
    "yolo26x-seg": 338.2,
    "yolo26n-pose": 10.79,
    "yolo26s-pose": 29.82,
    "yolo26m-pose": 86.14,
    "yolo26l-pose": 104.66,
    "yolo26x-pose": 226.85,
    "yolo26n-obb": 6.73,
    "yolo26s-obb": 25.05,
    "yolo26m-obb": 83.03,
    "yolo26l-obb": 101.55,
    "yolo26x-obb": 226.69,
    "yolo12n-seg": 10.92,
    "yolo12s-seg": 35.18,
    "yolo12m-seg": 116.67,
    "yolo12l-seg": 141.62,
    "yolo12x-seg": 311.72,
    "yolo12n-pose": 8.74,
    "yolo12s-pose": 25.41,
    "yolo12m-pose": 75.1,
    "yolo12l-pose": 100.04,
    "yolo12x-pose": 218.54,
    "yolo12n-obb": 7.88,
    "yolo12s-obb": 24.64,
    "yolo12m-obb": 75.04,
    "yolo12l-obb": 99.99,
    "yolo12x-obb": 218.45,
    "yolov9c-seg": 149.34,
    "yolov9e-seg": 238.33,
    # classify (cls nc=1000, its yaml's default), at 640 like every row: the pixels scale it to the run's imgsz
    "yolov8n-cls": 3.36,
    "yolov8s-cls": 12.59,
    "yolov8m-cls": 41.89,
    "yolov8l-cls": 99.12,
    "yolov8x-cls": 154.31,
    "yolo11n-cls": 3.32,
    "yolo11s-cls": 12.26,
    "yolo11m-cls": 39.73,
    "yolo11l-cls": 50.02,
    "yolo11x-cls": 111.36,
    "yolo12n-cls": 4.63,
    "yolo12s-cls": 15.48,
    "yolo12m-cls": 47.38,
    "yolo12l-cls": 63.41,
    "yolo12x-cls": 136.3,
    "yolo26n-cls": 3.32,
    "yolo26s-cls": 12.26,
    "yolo26m-cls": 39.73,
    "yolo26l-cls": 50.02,
    "yolo26x-cls": 111.36,
}

# Cost per FLOP relative to yolov8 before any calibration: newer families' attention and
# depthwise blocks run slower per FLOP (30-55% measured on CPU). Calibration replaces these.
FAMILY_PRIOR: dict[str, float] = {
    "yolov8": 1.0,
    "yolov5": 1.0,
    "yolov9": 1.2,
    "yolov10": 1.1,
    "yolo11": 1.35,
    "yolo12": 1.55,
    "yolo26": 1.45,
    "custom": 1.0,
}

_NAME = re.compile(r"^(yolov8|yolo11|yolo12|yolo26|yolov5|yolov9|yolov10)([nsmblxtce])(u?)(-seg|-pose|-obb|-cls)?$")
MPX = 1e6


class ModelInfo(NamedTuple):
    """What the estimate needs of a model."""

    name: str
    family: str
    gflops: float
    source: str  # "table", "measured", "--flops-factor"


TASKS = {"": "detect", "-seg": "segment", "-pose": "pose", "-obb": "obb", "-cls": "classify"}


def task_of(model: str) -> str:
    """The task a standard model trains (its name's suffix); '' for a custom model."""
    m = _NAME.match(Path(model).stem.lower())
    return TASKS[m.group(4) or ""] if m else ""


def family_of(model: str) -> str:
    """The ultralytics family of a model name or path (``custom`` for anything else)."""
    stem = Path(model).stem.lower()
    m = _NAME.match(stem)
    return m.group(1) if m else "custom"


_V5U = re.compile(r"^(yolov5[nsmlx])$")


def lookup_model(model: str) -> ModelInfo | None:
    """A standard model from the tables, by name or path (``yolov8n.pt``, ``cfg/yolo11s.yaml``,
    ``yolo26n-seg.pt``)."""
    stem = Path(model).stem.lower()
    stem = _V5U.sub(r"\1u", stem)  # ultralytics trains yolov5n.yaml/.pt as yolov5nu (the same GFLOPs, measured)
    gflops = GFLOPS.get(stem) or TASK_GFLOPS.get(stem)
    if gflops and _NAME.match(stem):
        return ModelInfo(name=stem, family=family_of(stem), gflops=gflops, source="table")
    return None


def measure_gflops(model: str, python: str, cache_dir: Path | None, timeout: float = 300.0) -> float:
    """GFLOPs of a custom model, measured with ultralytics in a child process (never imported here), cached."""
    try:
        path = Path(model).expanduser().resolve()
        found = path.is_file()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long, ~user unknown
        found = False
    if not found:
        raise UsageError(f"model {model} not found: give --flops-factor or a standard model name")
    key = f"{path}:{path.stat().st_mtime}"
    cache_file = cache_dir / "gflops.json" if cache_dir else None
    cached: dict[str, float] = {}
    if cache_file and cache_file.exists():
        try:
            cached = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cached = {}
    if key in cached:
        return float(cached[key])
    import subprocess  # custom models only

    code = (
        "import sys; from ultralytics import YOLO; from ultralytics.utils.torch_utils import get_flops;"
        "print(get_flops(YOLO(sys.argv[1]).model, 640))"
    )
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    child = _as_owner_of(path, env)
    try:
        out = subprocess.run(
            [python, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            **child,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"model {model}: cannot measure its FLOPs ({e}); give --flops-factor") from None
    finally:
        if "user" in child:
            shutil.rmtree(env["YOLO_CONFIG_DIR"], ignore_errors=True)
    if out.returncode != 0:
        if "No module named 'ultralytics'" in out.stderr or "No module named 'torch'" in out.stderr:
            raise UsageError(
                f"model {model} is not a standard model and ultralytics is not installed to measure it: "
                "give --flops-factor (its GFLOPs / yolov8n's)"
            )
        last = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UsageError(f"model {model}: cannot measure its FLOPs ({last}); give --flops-factor")
    try:
        gflops = float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UsageError(f"model {model}: ultralytics printed no FLOPs; give --flops-factor") from None
    if gflops <= 0:
        raise UsageError(f"model {model}: measured {gflops} GFLOPs; give --flops-factor")
    if cache_file:
        cached[key] = gflops
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            cache_file.write_text(json.dumps(cached))
        except OSError:
            pass
    return gflops


def _as_owner_of(path: Path, env: dict[str, str]) -> dict[str, Any]:
    """How to run the child that loads ``path``: a ``.pt`` is a pickle, and unpickling runs whatever
    code its author put in it. Root (``slurm-yolo calibrate`` on users' run folders) never does that
    as itself: the child runs as the file's owner, real and effective uid alike, or as nobody when
    root owns it. A ``.yaml`` only describes layers (ultralytics reads it with a safe loader), and
    anyone else loads a model as themselves, as ``yolo train`` would."""
    if (os.getuid() != 0 and os.geteuid() != 0) or path.suffix.lower() in (".yaml", ".yml"):
        return {}
    import pwd

    st = path.stat()
    owner = st.st_uid if st.st_uid != 0 else pwd.getpwnam("nobody").pw_uid
    try:
        pw = pwd.getpwuid(owner)
        home, gid = pw.pw_dir, pw.pw_gid
    except KeyError:
        home, gid = "/nonexistent", st.st_gid
    config_dir = tempfile.mkdtemp(prefix="slurm-yolo-flops-")
    os.chown(config_dir, owner, gid)
    env.update(HOME=home, YOLO_CONFIG_DIR=config_dir)
    return {"user": owner, "group": gid, "extra_groups": [], "cwd": "/"}


@dataclass(frozen=True)
class Workload:
    """The countable facts of one run: everything the time model reads."""

    train_images: int  # after ``fraction``
    val_images: int
    imgsz: int  # rounded up to the stride
    epochs: int
    batch: int
    val_passes: int  # validation passes inside training (results.csv time includes them)
    model: str
    family: str
    gflops: float
    model_source: str = "table"

    @property
    def task(self) -> str:
        """The task its model trains (``task_of``: "segment" for a -seg model); '' for a custom model.
        Derived, not stored: the job's Comment beacon (``parse.beacon``) carries every field."""
        return task_of(self.model)

    @property
    def iterations(self) -> int:
        return self.epochs * math.ceil(self.train_images / max(1, self.batch))

    @property
    def train_pixels(self) -> float:
        return float(self.epochs) * self.train_images * self.imgsz**2

    @property
    def val_pixels(self) -> float:
        """Validation pixels inside training (not counting the final validation)."""
        return float(self.val_passes) * self.val_images * self.imgsz**2

    @property
    def final_val_pixels(self) -> float:
        return float(self.val_images) * self.imgsz**2

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def train_images(total: int, fraction: float) -> int:
    """Images per epoch after ultralytics' ``fraction`` (a share in (0, 1] or a count)."""
    if not math.isfinite(fraction) or fraction <= 0:
        raise UsageError(f"fraction={fraction}: a share in (0, 1] or a number of images")
    if fraction > 1:
        return min(total, int(fraction))
    return max(1, round(total * fraction))


def workload(
    spec: TrainSpec, counts_train: int, counts_val: int, model: ModelInfo, epochs_done: int | None = None
) -> Workload:
    """The workload of a spec, given its dataset's image counts and its model.

    ``epochs_done`` describes a run that stopped early (patience, time limit): it validated after
    each finished epoch when ``val=True``, else only if it reached its last epoch.
    """
    epochs = spec.epochs if epochs_done is None else epochs_done
    val_passes = epochs if spec.get("val") is not False else (1 if epochs >= spec.epochs else 0)
    return Workload(
        train_images=train_images(counts_train, float(spec.get("fraction") or 1.0)),
        val_images=counts_val,
        imgsz=spec.imgsz,
        epochs=epochs,
        batch=spec.batch,
        val_passes=val_passes,
        model=model.name,
        family=model.family,
        gflops=model.gflops,
        model_source=model.source,
    )


def model_factor(gflops: float, reference_gflops: float) -> float:
    """How much more a pixel costs on this model than on the reference (yolov8n)."""
    return gflops / reference_gflops


def pixels(w: Workload, val_weight: float) -> float:
    """Pixels of the whole run: training pixels plus weighted validation pixels (final pass included)."""
    return w.train_pixels + val_weight * (w.val_pixels + w.final_val_pixels)


def fmt_pixels(n: float) -> str:
    """Work in pixels (``Mpx``): never ``Tok``, which is the budget's unit, so a screen that shows both
    keeps them apart."""
    return scaled(n, "px")


def images_640(n: float) -> str:
    """Pixels as 640-equivalent images, so runs at different sizes compare at a glance: whole images
    from 100 on, three figures below (a tiny run at imgsz 64 is 0.25 of one, not "0")."""
    images = n / 640**2
    return f"{images:,.0f}" if images >= 100 else f"{images:.3g}"


def resolve_model(
    model: str, reference_gflops: float, python: str, cache_dir: Path | None, flops_factor: float | None = None
) -> ModelInfo:
    """The model's FLOPs: the user's factor, else the table, else measured with ultralytics."""
    if flops_factor is not None:
        if not (math.isfinite(flops_factor) and 0 < flops_factor <= 1000):
            raise UsageError(f"--flops-factor {flops_factor} must be a positive number (GFLOPs / yolov8n's)")
        name = Path(model).stem.lower()
        return ModelInfo(
            name=name, family=family_of(model), gflops=flops_factor * reference_gflops, source="--flops-factor"
        )
    known = lookup_model(model)
    if known:
        return known
    gflops = measure_gflops(model, python, cache_dir)
    return ModelInfo(name=Path(model).stem.lower(), family="custom", gflops=gflops, source="measured")
