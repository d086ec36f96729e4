"""``python -m bench gpu [--cpu] [--out DIR]``: measure YOLO training on this machine's GPU, against the priors.

Made for a lent GPU machine (at most 8 minutes on one GPU): real ultralytics training on a synthetic
dataset made here (``synthetic``), one epoch of ``STEPS`` optimizer steps per configuration (models
n/s/m, imgsz 320 and 640, batch 16 and 64, workers 2 and 8, AMP on), the steady-state images/s from
the steps' own timestamps, peak reserved GPU memory (ultralytics' ``GPU_mem``), NVML utilisation and
temperature sampled meanwhile; the data loader timed alone (no model) at 2 and 8 workers; and two
runs sharing the card, each under half its memory (as shards do). What it measured goes, with the
GPU's name, driver, torch and ultralytics versions, to ``bench/corpus/gpu/NAME-DATE.json`` (commit
it: one real measurement beats any public figure for that type), and each run is compared with the
GPU-type priors' prediction for the card.

``--cpu`` is the tiny form CI runs (two configurations of a few steps on the CPU, same code path); its
figures are CPU figures and say so (``"device": "cpu"``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import gpu_corpus
from slurm_yolo.core import config, gputypes, synthetic
from slurm_yolo.core.model import gpu_priors
from slurm_yolo.core.model.estimate import Workload, lookup_model
from slurm_yolo.core.model.timemodel import predict_train_seconds
from slurm_yolo.state import calibration

STEPS = 100  # optimizer steps per configuration; the first WARM are start-up, not steady state
WARM = 10
UNIQUE_IMAGES = 64  # images generated; the training list repeats them (symlinks) up to STEPS x batch
GPU_RUNS = [  # (model, imgsz, batch, workers)
    ("yolov8n", 320, 16, 8),
    ("yolov8n", 640, 16, 8),
    ("yolov8n", 640, 64, 8),
    ("yolov8n", 640, 64, 2),
    ("yolov8s", 640, 16, 8),
    ("yolov8s", 640, 64, 8),
    ("yolov8s", 320, 64, 8),
    ("yolov8m", 640, 16, 8),
    ("yolov8m", 640, 64, 8),
    ("yolov8m", 320, 64, 2),
]
CPU_RUNS = [("yolov8n", 64, 4, 0), ("yolov8n", 96, 8, 2)]
SHARE = 0.45  # memory fraction of each of two runs sharing one card


def dataset(root: Path, imgsz: int, images: int) -> Path:
    """A data yaml whose training list holds ``images`` entries (symlinks to UNIQUE_IMAGES generated ones)."""
    base = root / f"src{imgsz}"
    if not (base / "data.yaml").exists():
        synthetic.make_dataset(base, train=UNIQUE_IMAGES, val=16, size=imgsz, seed=imgsz)
    farm = root / f"train{imgsz}x{images}"
    if not farm.exists():
        for kind, ext in (("images", "png"), ("labels", "txt")):
            (farm / kind).mkdir(parents=True)
            for i in range(images):
                (farm / kind / f"{i:06d}.{ext}").symlink_to(base / kind / "train" / f"{i % UNIQUE_IMAGES:05d}.{ext}")
    yaml = root / f"data{imgsz}x{images}.yaml"
    yaml.write_text(f"path: {root}\ntrain: {farm}/images\nval: {base}/images/val\nnames:\n  0: red\n  1: green\n")
    return yaml


class Sampler:
    """NVML utilisation, memory and temperature every 0.2 s while a run trains (nothing without NVML)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml: Any = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (a CPU machine): nothing sampled
            self._nvml = None

    def __enter__(self) -> Sampler:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        while not self._stop.wait(0.2):
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu
            mem = nv.nvmlDeviceGetMemoryInfo(h).used / 1e9
            temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            self.samples.append((float(util), mem, float(temp)))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"nvml_util_mean": None, "nvml_mem_max_gb": None, "nvml_temp_max_c": None}
        utils = [s[0] for s in self.samples]
        return {
            "nvml_util_mean": sum(utils) / len(utils),
            "nvml_mem_max_gb": max(s[1] for s in self.samples),
            "nvml_temp_max_c": max(s[2] for s in self.samples),
        }


def train(model: str, imgsz: int, batch: int, workers: int, root: Path, device: str, fraction: float = 0.0) -> dict:
    """One configuration: one epoch of STEPS steps; its steady images/s, memory and NVML figures."""
    import torch
    from ultralytics import YOLO

    yaml = dataset(root, imgsz, STEPS * batch)
    stamps: list[float] = []
    cuda = device != "cpu"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        if fraction:
            torch.cuda.set_per_process_memory_fraction(fraction)
    yolo = YOLO(f"{model}.yaml")
    yolo.add_callback("on_train_batch_end", lambda trainer: stamps.append(time.perf_counter()))
    with Sampler() as sampler:
        yolo.train(
            data=str(yaml),
            epochs=1,
            imgsz=imgsz,
            batch=batch,
            workers=workers,
            device=device,
            pretrained=False,
            amp=cuda,
            plots=False,
            val=False,
            verbose=False,
            exist_ok=True,
            project=str(root / "runs"),
            name=f"{model}-{imgsz}-{batch}-{workers}",
        )
    steady = stamps[WARM:]
    ips = (len(steady) - 1) * batch / (steady[-1] - steady[0]) if len(steady) > 1 else None
    return {
        "model": model,
        "imgsz": imgsz,
        "batch": batch,
        "workers": workers,
        "steps": len(stamps),
        "images_per_s": ips,
        "gpu_mem_gb": torch.cuda.max_memory_reserved() / 1e9 if cuda else None,
        "memory_fraction": fraction or None,
        **sampler.summary(),
    }


def loader(imgsz: int, batch: int, workers: int, root: Path) -> dict:
    """The training data loader alone (mosaic and every augmentation, no model): images/s."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    yaml = dataset(root, imgsz, STEPS * batch)
    cfg: Any = get_cfg(overrides={"imgsz": imgsz, "batch": batch, "workers": workers})  # ultralytics' namespace
    data = check_det_dataset(str(yaml))
    ds = build_yolo_dataset(cfg, data["train"], batch, data, mode="train")
    dl = build_dataloader(ds, batch, workers, shuffle=True)
    seen, start = 0, None
    for i, b in enumerate(dl):
        if i == WARM:
            start, seen = time.perf_counter(), 0
        seen += len(b["im_file"])
        if i >= WARM + 40:
            break
    assert start is not None
    return {"imgsz": imgsz, "batch": batch, "workers": workers, "images_per_s": seen / (time.perf_counter() - start)}


def predicted_ips(run: dict, card: gputypes.Card, cpus: int) -> float | None:
    """images/s the GPU-type priors predict for this run on this card (None: a card they do not know)."""
    if card.type is None:
        return None
    base = calibration.prior(config.load(Path("/nonexistent")))
    tm, _ = gpu_priors.model_for(base, card, gpu_priors.shipped())
    info = lookup_model(run["model"])
    assert info is not None
    images = gpu_corpus.STEADY_STEPS * run["batch"]
    w = Workload(images, 0, run["imgsz"], 1, run["batch"], 0, info.name, info.family, info.gflops)
    ref = float(config.DEFAULTS["estimate"]["reference_gflops"])
    return images / predict_train_seconds(w, tm, 1, 0.9, ref, min(cpus, max(1, run["workers"])))


def versions() -> dict[str, Any]:
    import torch
    import ultralytics

    out: dict[str, Any] = {
        "torch": torch.__version__,
        "ultralytics": ultralytics.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["gpu_memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 1e9
        try:
            import pynvml

            pynvml.nvmlInit()
            out["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 - NVML absent: the driver stays unknown
            out["driver"] = None
    return out


def shared(root: Path) -> list[dict]:
    """Two runs at once on the card, each under SHARE of its memory (as two shard jobs)."""
    code = (
        "import json, sys; from pathlib import Path; from bench import gpu;"
        " print(json.dumps(gpu.train('yolov8n', 640, 16, 4, Path(sys.argv[1]), '0', gpu.SHARE)))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(root / f"share{i}")], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=300)
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[2:] if argv is None else argv
    import torch

    cpu = "--cpu" in args or not torch.cuda.is_available()
    out_dir = Path(args[args.index("--out") + 1]) if "--out" in args else gpu_corpus.MEASURED
    os.environ.setdefault("YOLO_OFFLINE", "1")
    started = time.time()
    info = versions()
    name = "cpu" if cpu else info["gpu"]
    card = (
        gputypes.Card(None, 0.0, 1.0, True, "cpu") if cpu else gputypes.card(config.Partition("bench", gpu_type=name))
    )
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root = Path(tmp)
        runs = [train(m, s, b, w, root, "cpu" if cpu else "0") for m, s, b, w in (CPU_RUNS if cpu else GPU_RUNS)]
        loaders = (
            [loader(s, b, w, root) for s, b, w in ((64, 4, 0),)] if cpu else [loader(640, 64, w, root) for w in (2, 8)]
        )
        sharing = [] if cpu else shared(root)
    for r in runs:
        r["predicted_images_per_s"] = predicted_ips(r, card, info["cpus"] or 1)
    result = {
        "device": "cpu" if cpu else "cuda",
        **info,
        "steps": STEPS,
        "warm_steps": WARM,
        "runs": runs,
        "loader": loaders,
        "shared": sharing,
        "seconds": round(time.time() - started, 1),
        "date": time.strftime("%Y-%m-%d"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    path = out_dir / f"{slug}-{result['date']}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{name}: {len(runs)} runs in {result['seconds']} s -> {path}")
    for r in runs:
        pred = r["predicted_images_per_s"]
        vs = f", priors predict {pred:.0f} (x{r['images_per_s'] / pred:.2f})" if pred and r["images_per_s"] else ""
        mem = f", {r['gpu_mem_gb']:.2f} GB" if r["gpu_mem_gb"] else ""
        ips = r["images_per_s"] or 0.0
        print(
            f"  {r['model']} imgsz {r['imgsz']} batch {r['batch']} workers {r['workers']}: {ips:.1f} images/s{mem}{vs}"
        )
    for ld in loaders:
        print(f"  loader alone, imgsz {ld['imgsz']} workers {ld['workers']}: {ld['images_per_s']:.1f} images/s")
    for s in sharing:
        print(f"  sharing the card ({SHARE:.0%} of its memory each): {s['images_per_s']:.1f} images/s")
