"""``python -m slurm_yolo.job.probe_job FOLDER DEVICE``: the probe job's body (``slurm-yolo calibrate --probe``).

Inside one short job on the partition being calibrated: a synthetic dataset made on the node
(``synthetic``), then a few real ultralytics runs that differ in model size, image size and batch,
each a run folder under ``FOLDER/runs`` that ``calibrate`` reads as it reads users' run folders. Needs
the ``[train]`` extra (the job's Python).
"""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_yolo.core import synthetic

# (model, imgsz, batch, epochs): sizes and batches apart, so the fit sees more than k; each takes
# seconds on a GPU and under a minute on the bundled clusters' CPUs
RUNS = (("yolov8n", 160, 8, 2), ("yolov8n", 320, 16, 1), ("yolov8s", 160, 8, 1))
TRAIN_IMAGES, VAL_IMAGES, SOURCE_PX = 48, 8, 320


def main(argv: list[str]) -> int:
    folder, device = Path(argv[0]), argv[1]
    data = synthetic.make_dataset(folder / "ds", train=TRAIN_IMAGES, val=VAL_IMAGES, size=SOURCE_PX, seed=1)
    workers = 0 if device == "cpu" else 2
    for model, imgsz, batch, epochs in RUNS:
        name = f"{model}-{imgsz}-{batch}"
        synthetic.train_run(
            folder / "runs",
            name,
            model=f"{model}.yaml",
            data=str(data),
            imgsz=imgsz,
            batch=batch,
            epochs=epochs,
            device=device,
            workers=workers,
        )
        print(f"probe: {name} trained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
