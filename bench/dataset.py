"""Dataset counting: a 120k-image folder cold and cached, against `find -type f | wc -l` in the same run."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from slurm_yolo.core import dataset

N = 120_000


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for split, n in (("train", N - 10_000), ("val", 10_000)):
            d = root / "images" / split
            for shard in range(n // 10_000):
                sub = d / f"{shard:02d}"
                sub.mkdir(parents=True)
                for i in range(10_000):
                    (sub / f"{i:05d}.jpg").touch()
        (root / "data.yaml").write_text(f"path: {root}\ntrain: images/train\nval: images/val\n")
        subprocess.run(["sync"], check=False)
        start = time.perf_counter()
        subprocess.run(f"find {root}/images -type f | wc -l", shell=True, check=True, stdout=subprocess.DEVNULL)
        find = time.perf_counter() - start
        cache = root / "cache.json"
        start = time.perf_counter()
        counts = dataset.count(root / "data.yaml", cache)
        cold = time.perf_counter() - start
        warm = min(_time(lambda: dataset.count(root / "data.yaml", cache)) for _ in range(5))
    assert counts.train + counts.val == N
    print(
        f"{N:,} images: cold {cold:.2f} s ({cold / find:.2f}x `find | wc -l` {find:.2f} s), cached {warm * 1000:.1f} ms"
    )
    return {"cold_s": cold, "cached_ms": warm * 1000, "find_s": find}


def _time(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
