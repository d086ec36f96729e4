"""The measured corpus: real ultralytics CPU runs from a seeded random design, kept in the repository.

``python -m bench corpus [--out FILE] [--seed N] [--only K]`` trains every run of the design, one at a
time, each as a job would (``slurm-yolo run`` in a fresh process, 2 CPUs), and appends one JSON line per
run to ``bench/corpus/runs.jsonl``: the design, the run's ``args.yaml`` (keys that differ from
ultralytics' defaults), its ``results.csv``, the usage records the launcher wrote, the process's wall
time, the CPUs it had, and how much CPU the rest of the machine used meanwhile (a run that shared the
machine is measured again). An interrupted generation resumes where it stopped (runs are keyed by
index).
``bench accuracy`` refits from this file in seconds, without training.

The design: 3 families (yolov8, yolo11, yolo26), sizes n and s (and m for yolov8 and yolo11), imgsz
64-640, batch 2-32, epochs 1-10, 16-1024 images from five generated datasets that differ in source
resolution and objects per image, ``fraction``, ``val=False``, ``rect`` and ``cache``. Calibration
runs are drawn to take roughly 3-40 s of training on 2 CPUs; each held-back ("extrapolation") run
scales one of them 3-10x in tokens (more epochs and images, same model, imgsz and batch). The long
runs (2.5-6 minutes, drawn from a random stream of their own) are what a time limit in whole minutes
is judged on: on a 1-minute run, rounding up to the minute alone can double the limit, and on these
a perfect prediction with the 20% buffer already gives a median limit / actual of 1.4.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import Sample

CORPUS = Path(__file__).parent / "corpus" / "runs.jsonl"
SEED = 13
CALIBRATION_RUNS = 120
EXTRAPOLATION_RUNS = 30
LONG_RUNS = 14
# Training seconds the rough cost aims at: calibration runs, and the long runs (it overestimates a
# big run about 2x, so 330-800 rough seconds is roughly 2.5-6 minutes of wall time).
CALIBRATION_TARGET = (3.0, 40.0)
LONG_TARGET = (330.0, 800.0)
CPUS = 2
# A run during which the rest of the machine used more than this many CPUs on average (measured from
# /proc/stat, less the run's own CPU time) is measured again, up to ATTEMPTS times: a quiet machine
# shows ~0.01. The first generation had stretches 5-45% slow from work that shared the machine.
QUIET_CPUS = 0.1
ATTEMPTS = 3
# (name, train images, val images, source px, objects per image (min, max))
DATASETS = (
    ("tiny160", 16, 8, 160, (1, 3)),
    ("small96", 1024, 64, 96, (1, 3)),
    ("mid224", 512, 48, 224, (4, 10)),
    ("wide320", 256, 32, 320, (1, 5)),
    ("big640", 128, 32, 640, (1, 3)),
)
MODELS = (
    ("yolov8n", 0.22),
    ("yolo11n", 0.2),
    ("yolo26n", 0.18),
    ("yolov8s", 0.12),
    ("yolo11s", 0.1),
    ("yolo26s", 0.08),
    ("yolov8m", 0.05),
    ("yolo11m", 0.05),
)
GFLOPS = {
    "yolov8n": 8.9,
    "yolo11n": 6.7,
    "yolo26n": 6.2,
    "yolov8s": 28.8,
    "yolo11s": 21.8,
    "yolo26s": 23.1,
    "yolov8m": 79.3,
    "yolo11m": 68.6,
}
# A rough cost on 2 CPUs, only to keep the design inside its time budget (the corpus measures the truth).
SECONDS_PER_GFLOP_TOKEN = 0.055 / (8.9 * 160 * 160)
SECONDS_PER_ITERATION = 0.08


def rough_train_seconds(d: dict[str, Any]) -> float:
    """What the design expects a run to take; decides which draws fit the budget."""
    images = _images(d)
    per_token = SECONDS_PER_GFLOP_TOKEN * GFLOPS[d["model"]]
    val = (d["epochs"] if d["val"] else 1) * DATASETS_BY_NAME[d["dataset"]][2] * d["imgsz"] ** 2 * per_token * 0.6
    return (
        d["epochs"]
        * (images * d["imgsz"] ** 2 * per_token + math.ceil(images / d["batch"]) * SECONDS_PER_ITERATION + 0.8)
        + val
    )


DATASETS_BY_NAME = {d[0]: d for d in DATASETS}


def _images(d: dict[str, Any]) -> int:
    """Images per epoch, as ultralytics' ``fraction`` gives them (a share, or a count above 1)."""
    total = DATASETS_BY_NAME[d["dataset"]][1]
    if d["fraction"] > 1:
        return min(total, int(d["fraction"]))
    return max(1, round(total * d["fraction"]))


def draw(rng: random.Random, dataset: str, target_range: tuple[float, float] = CALIBRATION_TARGET) -> dict[str, Any]:
    """One random run on ``dataset``: model, imgsz, batch and epochs drawn freely, then the share of the
    dataset (``fraction``) chosen so the run lands near a random training time in ``target_range``, so
    large images and large models stay in the design instead of being rejected by the budget."""
    model = rng.choices([m for m, _ in MODELS], weights=[w for _, w in MODELS])[0]
    imgsz = 32 * round(math.exp(rng.uniform(math.log(64), math.log(640))) / 32)
    d: dict[str, Any] = {
        "model": model,
        "dataset": dataset,
        "imgsz": max(64, imgsz),
        "batch": rng.choice((2, 4, 8, 16, 32)),
        "epochs": rng.randint(1, 10),
        "fraction": 1.0,
        "val": rng.random() >= 0.2,
        "rect": rng.random() < 0.15,
        "cache": rng.choices((False, "ram", "disk"), weights=(0.7, 0.2, 0.1))[0],
    }
    target = math.exp(rng.uniform(*(math.log(t) for t in target_range)))
    total = DATASETS_BY_NAME[dataset][1]
    while d["epochs"] > 1 and rough_train_seconds({**d, "fraction": 16 / total}) > target:
        d["epochs"] -= 1
    lo, hi = 16 / total, 1.0
    for _ in range(30):  # bisect the share of the dataset that meets the target
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rough_train_seconds({**d, "fraction": mid}) < target else (lo, mid)
    if hi < 0.95:
        d["fraction"] = round(hi, 3) if rng.random() < 0.7 else max(16, round(hi * total))  # a share or a count
    return d


def scale_up(rng: random.Random, d: dict[str, Any]) -> dict[str, Any] | None:
    """A held-back run 3-10x a calibration run's tokens: more epochs, then more images."""
    target = rng.uniform(3, 10)
    base_images = _images(d)
    total = DATASETS_BY_NAME[d["dataset"]][1]
    for epochs in range(d["epochs"], 11):
        for fraction in sorted({d["fraction"] if d["fraction"] <= 1 else d["fraction"] / total, 1.0, 0.5, 0.25, 0.75}):
            images = max(1, round(total * fraction))
            ratio = epochs * images / (d["epochs"] * base_images)
            if abs(math.log(ratio / target)) < math.log(1.25) and 3 <= ratio <= 10:
                return {**d, "epochs": epochs, "fraction": fraction, "scaled_from_tokens": ratio}
    return None


def design(seed: int = SEED) -> list[dict[str, Any]]:
    """The whole design, deterministic in ``seed``: calibration runs, the held-back runs, then the long
    runs (a random stream of their own, so adding them left the first 150 runs as they were)."""
    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    while len(runs) < CALIBRATION_RUNS:  # datasets in turn, so big ones are not starved by the budget
        d = draw(rng, DATASETS[len(runs) % len(DATASETS)][0])
        if 3 <= rough_train_seconds(d) <= 40:
            runs.append({**d, "split": "calibration"})
    parents = [i for i, d in enumerate(runs) if 6 <= rough_train_seconds(d) <= 30]
    held: list[dict[str, Any]] = []
    while len(held) < EXTRAPOLATION_RUNS:
        i = rng.choice(parents)
        up = scale_up(rng, runs[i])
        if up and rough_train_seconds(up) <= 260:
            held.append({**up, "split": "extrapolation", "parent": i})
    rng = random.Random(seed * 1000 + 1)
    long: list[dict[str, Any]] = []
    while len(long) < LONG_RUNS:
        d = draw(rng, DATASETS[1 + len(long) % (len(DATASETS) - 1)][0], LONG_TARGET)
        if LONG_TARGET[0] <= rough_train_seconds(d) <= LONG_TARGET[1]:
            long.append({**d, "split": "long"})
    return [{**d, "index": i} for i, d in enumerate(runs + held + long)]


def _args(d: dict[str, Any], data: Path, project: Path) -> list[str]:
    return [
        "train",
        f"model={d['model']}.yaml",
        f"data={data}",
        f"epochs={d['epochs']}",
        f"imgsz={d['imgsz']}",
        f"batch={d['batch']}",
        f"fraction={d['fraction']}",
        f"val={d['val']}",
        f"rect={d['rect']}",
        f"cache={d['cache']}",
        f"project={project}",
        f"name=r{d['index']}",
        "plots=False",
        "exist_ok=True",
        "seed=0",
        "deterministic=False",
    ]


def _non_default_args(args_yaml: Path) -> dict[str, Any]:
    import yaml  # ultralytics' dependency: the generator runs in the training venv
    from ultralytics.cfg import DEFAULT_CFG_DICT

    args = yaml.safe_load(args_yaml.read_text())
    return {k: v for k, v in args.items() if DEFAULT_CFG_DICT.get(k, object()) != v}


def _busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (``/proc/stat``: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children (a run and the loader workers it reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def generate(out: Path = CORPUS, seed: int = SEED, only: int | None = None) -> None:
    """Train every run of the design not yet in ``out`` and append its record."""
    from slurm_yolo.core.synthetic import make_dataset

    done = set()
    if out.exists():
        done = {json.loads(line)["design"]["index"] for line in out.read_text().splitlines() if line.strip()}
    todo = [d for d in design(seed) if d["index"] not in done][:only]
    print(f"{len(done)} runs recorded, {len(todo)} to train", flush=True)
    if not todo:
        return
    tmp = Path(tempfile.mkdtemp(prefix="slurm-yolo-corpus-"))
    try:
        env = {
            **os.environ,
            "YOLO_OFFLINE": "1",
            "YOLO_VERBOSE": "False",
            "YOLO_CONFIG_DIR": str(tmp / "cfg"),
            "CUDA_VISIBLE_DEVICES": "",
            "SLURM_YOLO_HOME": str(tmp / "home"),
            "SLURM_CPUS_PER_TASK": str(CPUS),
            "OMP_NUM_THREADS": str(CPUS),
        }
        fonts = sorted(Path("/usr/share/fonts/truetype").rglob("*.ttf"))
        (tmp / "cfg" / "Ultralytics").mkdir(parents=True)
        if fonts:
            shutil.copyfile(fonts[0], tmp / "cfg" / "Ultralytics" / "Arial.ttf")
        data = {
            name: make_dataset(tmp / name, n, v, px, seed=i, objects=obj)
            for i, (name, n, v, px, obj) in enumerate(DATASETS)
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        for d in todo:
            job = tmp / f"job{d['index']}"
            job.mkdir()
            env_job = {**env, "SLURM_JOB_ID": str(900000 + d["index"])}  # records land in cwd: the job's folder
            cmd = [sys.executable, "-m", "slurm_yolo", "run", *_args(d, data[d["dataset"]], tmp / "runs")]
            for attempt in range(1, ATTEMPTS + 1):  # measured again while other work shared the machine
                load = os.getloadavg()[0]
                busy, own = _busy_seconds(), _children_cpu_seconds()
                started = time.monotonic()
                proc = subprocess.run(cmd, env=env_job, cwd=job, capture_output=True, text=True, check=False)
                wall = time.monotonic() - started
                others = (_busy_seconds() - busy) - (_children_cpu_seconds() - own)
                if proc.returncode != 0 or others <= QUIET_CPUS * wall:
                    break
                print(
                    f"run {d['index']}, attempt {attempt}: other work used {others / wall:.2f} CPUs, measuring again",
                    flush=True,
                )
            run_dir = tmp / "runs" / f"r{d['index']}"
            if proc.returncode != 0 or not (run_dir / "results.csv").exists():
                print(f"run {d['index']} failed (rc {proc.returncode}): {proc.stderr[-2000:]}", flush=True)
                continue
            usage = sorted(job.glob("yolo-usage-*.jsonl"))
            record = {
                "design": d,
                "wall_seconds": round(wall, 3),
                "cpus": CPUS,
                "gpus": 0,
                "host": os.uname().nodename,
                "load_before": round(load, 2),
                "others_cpu_seconds": round(others, 2),
                "attempts": attempt,
                "args": _non_default_args(run_dir / "args.yaml"),
                "results_csv": (run_dir / "results.csv").read_text(),
                "usage": [json.loads(line) for line in usage[0].read_text().splitlines()] if usage else [],
            }
            with out.open("a") as f:
                f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            print(
                f"run {d['index']} ({d['split']}, {d['model']} {d['dataset']} imgsz {d['imgsz']} batch {d['batch']}"
                f" epochs {d['epochs']}): wall {wall:.1f} s, rough {rough_train_seconds(d):.1f} s train",
                flush=True,
            )
            shutil.rmtree(run_dir, ignore_errors=True)
            shutil.rmtree(job, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench corpus [--out FILE] [--seed N] [--only K] [--plan]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench corpus")
    p.add_argument("--out", type=Path, default=CORPUS)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--only", type=int, default=None, help="train at most this many runs now")
    p.add_argument("--plan", action="store_true", help="print the design and its rough cost, train nothing")
    a = p.parse_args(argv if argv is not None else [])
    if a.plan:
        runs = design(a.seed)
        for d in runs:
            print(json.dumps(d, sort_keys=True))
        total = sum(rough_train_seconds(d) + 8 for d in runs)
        print(f"{len(runs)} runs, rough total {total / 60:.0f} min", file=sys.stderr)
        return
    generate(a.out, a.seed, a.only)


def load(path: Path = CORPUS) -> list[tuple[dict[str, Any], Sample]]:
    """Every recorded run as (its record, its calibration sample): the workload the launcher wrote in
    its start record (dataset counted, model resolved, as in a job), the epochs results.csv finished,
    results.csv's training time, and the process's wall time as the job's elapsed; in design order
    (a resumed generation may have appended runs out of order)."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        start = next(r for r in rec["usage"] if r.get("kind") == "start")
        rows = [r.split(",") for r in rec["results_csv"].strip().splitlines()]
        col = [c.strip() for c in rows[0]].index("time")
        w = Workload(**start["workload"])
        done = len(rows) - 1
        w = replace(w, epochs=done, val_passes=done if rec["design"]["val"] else 1 if done >= w.epochs else 0)
        out.append(
            (
                rec,
                Sample(
                    w,
                    max(1, rec["gpus"]),
                    float(rows[-1][col]),
                    key=f"corpus:{rec['design']['index']}",
                    total_seconds=rec["wall_seconds"],
                    cpus=rec["cpus"],
                ),
            )
        )
    return sorted(out, key=lambda r: r[0]["design"]["index"])  # CV folds are round-robin in this order
