"""``yolo-sbatch --dry-run`` wall time vs the floor ``python3 -c "import click"``, interleaved runs."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_yolo.synthetic import make_dataset

TARGET_MS = 150
TARGET_RATIO = 3.0


def wall(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(rounds: int = 21) -> dict[str, float]:
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "ds", train=200, val=50, size=32)
        env = {**os.environ, "SLURM_YOLO_HOME": str(Path(tmp) / "home")}
        # pip compiles installed packages to bytecode; a source checkout must be allowed to as well.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        dry = [str(bindir / "yolo-sbatch"), "--dry-run", "--json", "-p", "a100", "train", "model=yolo11s.pt",
               f"data={data}", "epochs=100", "imgsz=640"]  # fmt: skip
        floor = [sys.executable, "-c", "import click"]
        wall(dry, env, tmp)  # warm the dataset cache and the page cache
        d, f = [], []
        for _ in range(rounds):  # interleaved, so machine noise hits both alike
            d.append(wall(dry, env, tmp))
            f.append(wall(floor, env, tmp))
    med_d, med_f = statistics.median(d) * 1000, statistics.median(f) * 1000
    ratio = med_d / med_f
    print(f"yolo-sbatch --dry-run: median {med_d:.0f} ms (p90 {sorted(d)[int(0.9 * rounds)] * 1000:.0f} ms), "
          f"import click: median {med_f:.0f} ms, ratio {ratio:.2f}x "
          f"[targets <= {TARGET_MS} ms, <= {TARGET_RATIO:.0f}x: {'met' if med_d <= TARGET_MS and ratio <= TARGET_RATIO else 'MISSED'}]")  # fmt: skip
    return {"dry_run_ms": med_d, "click_ms": med_f, "ratio": ratio}


if __name__ == "__main__":
    main()
