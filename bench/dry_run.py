"""``yolo-sbatch`` wall time, interleaved with its baselines so machine noise hits both alike:
``--dry-run`` vs the floor ``python3 -c "import click"``, and a real submission vs plain ``sbatch`` of
the very script it submits (both held back with ``--begin``, then cancelled; needs the cluster up)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_yolo.core.synthetic import make_dataset

TARGET_MS = 150
TARGET_RATIO = 3.0


def wall(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def submit(cmd: list[str], env: dict[str, str], cwd: str, script: str | None = None) -> tuple[float, int]:
    """(seconds, job id) of one real submission."""
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True, input=script).stdout
    took = time.perf_counter() - start
    return took, int(json.loads(out)["job_id"]) if script is None else int(out.strip().split(";")[0])


def _submissions(dry: list[str], env: dict[str, str], cwd: str, rounds: int) -> None:
    """Real ``yolo-sbatch`` vs plain ``sbatch`` of the same script, interleaved."""
    if subprocess.run(["/usr/bin/scontrol", "ping"], capture_output=True).returncode != 0:
        print("real submit: skipped (the cluster is not up: deploy/minicluster up)")
        return
    later = ["--begin", "now+1hour"]
    script = json.loads(subprocess.run(dry, env=env, cwd=cwd, check=True, capture_output=True, text=True).stdout)[
        "script"
    ]
    real = [a for a in dry if a != "--dry-run"][:1] + later + [a for a in dry if a != "--dry-run"][1:]
    plain = ["/usr/bin/sbatch", "--parsable", *later]
    y: list[float] = []
    p: list[float] = []
    jobs: list[int] = []
    try:
        for _ in range(rounds):
            for cmd, stdin, times in ((real, None, y), (plain, script, p)):
                took, job = submit(cmd, env, cwd, stdin)
                times.append(took)
                jobs.append(job)
    finally:
        subprocess.run(["/usr/bin/scancel", *map(str, jobs)], check=False)
    med_y, med_p = statistics.median(y) * 1000, statistics.median(p) * 1000
    print(
        f"yolo-sbatch (real submit): median {med_y:.0f} ms, plain sbatch of the same script: median {med_p:.0f} ms, "
        f"ratio {med_y / med_p:.2f}x"
    )


def main(rounds: int = 21) -> dict[str, float]:
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "ds", train=200, val=50, size=32)
        env = {**os.environ, "SLURM_YOLO_HOME": str(Path(tmp) / "home")}
        # pip compiles installed packages to bytecode; a source checkout must be allowed to as well.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        dry = [
            str(bindir / "yolo-sbatch"),
            "--dry-run",
            "--json",
            "-p",
            "a100",
            "train",
            "model=yolo11s.yaml",
            f"data={data}",
            "epochs=100",
            "imgsz=640",
        ]
        floor = [sys.executable, "-c", "import click"]
        wall(dry, env, tmp)  # warm the dataset cache and the page cache
        d, f = [], []
        for _ in range(rounds):  # interleaved, so machine noise hits both alike
            d.append(wall(dry, env, tmp))
            f.append(wall(floor, env, tmp))
        _submissions(dry, env, tmp, rounds=7)
    med_d, med_f = statistics.median(d) * 1000, statistics.median(f) * 1000
    ratio = med_d / med_f
    print(
        f"yolo-sbatch --dry-run: median {med_d:.0f} ms (p90 {sorted(d)[int(0.9 * rounds)] * 1000:.0f} ms), "
        f"import click: median {med_f:.0f} ms, ratio {ratio:.2f}x "
        f"[targets <= {TARGET_MS} ms, <= {TARGET_RATIO:.0f}x: {'met' if med_d <= TARGET_MS and ratio <= TARGET_RATIO else 'MISSED'}]"
    )
    return {"dry_run_ms": med_d, "click_ms": med_f, "ratio": ratio}


if __name__ == "__main__":
    main()
