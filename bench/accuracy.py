"""Prediction accuracy on real ultralytics CPU runs: calibrate on half, predict the other half.

Trains a grid of tiny runs (models, image sizes, batches, epochs, two generated datasets), then
for two folds fits the time model on one half and predicts the training time of the other half, and
prints each run's error, the error per model, and the seeds' pure ``T = k x tokens`` for comparison.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from slurm_yolo import calibration, config
from slurm_yolo.synthetic import make_dataset, train_run
from slurm_yolo.timemodel import fit, predict_train_seconds

# (model, dataset, epochs, imgsz, batch)
GRID = [
    ("yolov8n.yaml", 0, 2, 96, 8), ("yolov8n.yaml", 1, 3, 128, 16), ("yolov8n.yaml", 0, 4, 64, 4),
    ("yolov8n.yaml", 1, 1, 160, 8), ("yolov8n.yaml", 0, 3, 128, 8), ("yolov8n.yaml", 1, 2, 96, 16),
    ("yolo11n.yaml", 0, 2, 96, 8), ("yolo11n.yaml", 1, 3, 128, 16), ("yolo11n.yaml", 0, 4, 64, 4),
    ("yolo11n.yaml", 1, 1, 160, 8), ("yolo11n.yaml", 0, 3, 128, 8), ("yolo11n.yaml", 1, 2, 96, 16),
    ("yolov8s.yaml", 0, 2, 96, 8), ("yolov8s.yaml", 1, 2, 128, 16), ("yolov8s.yaml", 0, 3, 64, 8),
    ("yolov8s.yaml", 1, 1, 160, 8),
]  # fmt: skip


def main() -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="slurm-yolo-bench-"))
    try:
        os.environ.update({"YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False", "YOLO_CONFIG_DIR": str(tmp / "cfg"), "CUDA_VISIBLE_DEVICES": "",
                           "SLURM_YOLO_HOME": str(tmp / "home")})  # fmt: skip
        fonts = sorted(Path("/usr/share/fonts/truetype").rglob("*.ttf"))
        (tmp / "cfg" / "Ultralytics").mkdir(parents=True)
        if fonts:
            shutil.copyfile(fonts[0], tmp / "cfg" / "Ultralytics" / "Arial.ttf")
        data = [make_dataset(tmp / "ds0", 24, 8, 96, seed=0), make_dataset(tmp / "ds1", 48, 16, 160, seed=1)]
        cfg = config.load()
        samples = []
        for i, (model, ds, epochs, imgsz, batch) in enumerate(GRID):
            run = train_run(tmp / "runs", f"r{i}", model=model, data=str(data[ds]), epochs=epochs, imgsz=imgsz, batch=batch)
            samples.append(calibration.sample_from_run_dir(run, cfg))
        prior = calibration.prior(cfg)
        errors: dict[str, list[float]] = {"model": [], "seeds k-only": []}
        per_model: dict[str, list[float]] = {}
        print(f"{'run':>4} {'model':<8} {'ep':>2} {'imgsz':>5} {'batch':>5} {'actual s':>9} {'pred s':>8} {'error':>7}")
        for fold in (0, 1):
            train = [s for i, s in enumerate(samples) if i % 2 != fold]
            test = [(i, s) for i, s in enumerate(samples) if i % 2 == fold]
            for label, forms in (("model", None), ("seeds k-only", (("k",),))):
                tm = fit(train, prior, forms=forms) if forms else fit(train, prior)
                for i, s in test:
                    pred = predict_train_seconds(s.workload, tm, 1, 0.9, cfg["estimate"]["reference_gflops"])
                    err = (pred - s.train_seconds) / s.train_seconds
                    errors[label].append(abs(err))
                    if label == "model":
                        per_model.setdefault(s.workload.model, []).append(abs(err))
                        w = s.workload
                        print(f"{i:>4} {w.model:<8} {w.epochs:>2} {w.imgsz:>5} {w.batch:>5} {s.train_seconds:>9.2f} {pred:>8.2f} {err:>+7.1%}")
            print(f"fold {fold}: fitted form {fit(train, prior).form} on {len(train)} runs")
        for model, errs in sorted(per_model.items()):
            print(f"{model:<8} median |error| {statistics.median(errs):.1%}, max {max(errs):.1%} ({len(errs)} runs)")
        result = {label: statistics.median(errs) for label, errs in errors.items()}
        print(f"overall median |error|: time model {result['model']:.1%}, seeds' T = k x tokens {result['seeds k-only']:.1%}"
              f" (p90 {sorted(errors['model'])[int(0.9 * len(errors['model']))]:.1%} vs"
              f" {sorted(errors['seeds k-only'])[int(0.9 * len(errors['seeds k-only']))]:.1%})")  # fmt: skip
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
