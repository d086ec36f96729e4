"""Report over 100k generated sacct rows, and recalibration over 100k recorded jobs.

Baselines in the same run: pandas.read_csv of the same sacct text; one fit of the window's samples.
"""

from __future__ import annotations

import io
import os
import random
import tempfile
import time

import pandas as pd

from slurm_yolo.admin import recalibrate, report
from slurm_yolo.core import config, spec
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import Sample, TimeModel, predict_train_seconds
from slurm_yolo.state import calibration

ROWS = 100_000
DELIMITER = "<5e1f0c9a2b7d4e6f8a1c3b5d7e9f0a2c>"  # what a live report's sacct call draws at random


def sacct_text(n: int, seed: int = 0) -> str:
    """``sacct -p --delimiter`` output of ``n`` runs (report.FIELDS)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        part = rng.choice(["a100", "t4", "h100"])
        pred = rng.randint(60, 36000)
        elapsed = max(1, int(pred * rng.uniform(0.6, 1.4)))
        state = rng.choices(["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED by 1", "NODE_FAIL"], [85, 5, 4, 5, 1])[0]
        submit = 1_790_000_000 + i * 30
        start = submit + rng.randint(0, 7200)
        ts = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))  # noqa: E731
        gpus = rng.choice([1, 2, 4, 8])
        lines.append(
            "".join(
                f"{field}{DELIMITER}"
                for field in [
                    str(100000 + i),
                    rng.choice(["vision", "research", "robotics"]),
                    f"user{rng.randint(1, 300)}",
                    part,
                    rng.choice(["yolo-short", "yolo-prod", "yolo-dev"]),
                    state,
                    ts(submit),
                    ts(start),
                    ts(start + elapsed),
                    str(elapsed),
                    str(int(pred * 1.2 / 60) + 1),
                    f"billing=1,cpu=8,gres/gpu={gpus},mem=32G,node=1",
                    f"yolo:tok={pred * 1e6:.0f},eff={pred * 1e6:.0f},pred_s={pred},limit_s={int(pred * 1.2)},k=1,gpus={gpus}",
                    f"yolo:est=1,hold={pred * 2_000_000},charge={elapsed * 1_000_000},refund={pred * 1_000_000},k=1,state=x,elapsed={elapsed}",
                    f"/home/user/run{i}",
                ]
            )
        )
    return "\n".join(lines) + "\n"


def main() -> dict[str, float]:
    text = sacct_text(ROWS)
    with tempfile.TemporaryDirectory() as home:
        os.environ["SLURM_YOLO_HOME"] = home
        cfg = config.load()
        piped = text.replace(DELIMITER, "|")
        start = time.perf_counter()
        pd.read_csv(io.StringIO(piped), sep="|", header=None, dtype=str)
        base = time.perf_counter() - start
        start = time.perf_counter()
        rows = report.read_saved(text, DELIMITER)
        views = report.build(cfg, report.Filters(), ("usage", "accuracy", "waits", "failures", "budgets"), rows)
        took = time.perf_counter() - start
        print(
            f"report over {ROWS:,} sacct rows: {took:.2f} s ({took / base:.1f}x pandas.read_csv alone {base:.2f} s);"
            f" {len(views['usage'])} usage rows"
        )

        m = estimate.lookup_model("yolov8n")
        assert m is not None
        truth = TimeModel(k=0.8, overhead_seconds=3, val_weight=0.4, iteration_seconds=0.02, startup_seconds=10)
        rng = random.Random(1)
        with calibration.Store(cfg) as store:
            store.conn.execute("BEGIN")
            for i in range(ROWS):
                w = estimate.workload(
                    spec.parse(
                        ["train", "data=d.yaml", f"epochs={rng.randint(1, 50)}", f"imgsz={rng.choice([320, 640])}"]
                    ),
                    rng.randint(100, 5000),
                    rng.randint(10, 500),
                    m,
                )
                t = predict_train_seconds(w, truth, 1, 0.9, 8.86) * rng.uniform(0.9, 1.1)
                store.add_sample("bench", Sample(w, 1, t, key=str(i)), "bench")
            store.conn.execute("COMMIT")
        start = time.perf_counter()
        result = recalibrate.recalibrate(cfg, ["bench"], min_samples=5)[0]
        recal = time.perf_counter() - start
        print(
            f"recalibrate over {ROWS:,} recorded jobs (window {calibration.WINDOW} newest): {recal:.2f} s,"
            f" k {result.new.k:.3f} (truth 0.8), cross-validated median error {result.new.cv_median or 0:.1%}"
        )
    return {"report_s": took, "read_csv_s": base, "recalibrate_s": recal}


if __name__ == "__main__":
    main()
