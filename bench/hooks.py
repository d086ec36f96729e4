"""Prolog/epilog wall time per invocation (p50, p99), alone and 50 at once, against real held jobs.

Baseline in the same run: `scontrol show job` alone (the one Slurm call a prolog must make).
Targets: p50 <= 80 ms, p99 <= 250 ms, zero errors.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurm_yolo.slurm import commands

BIN = Path(sys.executable).parent


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    rc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, rc


def _quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1000, xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1000


def main(jobs: int = 50) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        Path(home, "config.toml").write_text(
            Path("/etc/slurm-yolo/config.toml").read_text().replace("[ledger]\n", "[ledger]\nenforce = false\nadmin_comment = false\nfeedback = false\n")
        )  # fmt: skip
        ids = [commands.submit("#!/bin/bash\ntrue\n", ["-p", "a100", "--gres=gpu:a100:1", "--hold", "-o", "/dev/null"]) for _ in range(jobs)]
        try:
            envs = [{"SLURM_JOB_ID": str(j), "SLURM_JOB_ACCOUNT": "vision", "SLURM_JOB_USER": "root", "SLURM_CLUSTER_NAME": "yolo",
                     "SLURM_JOB_PARTITION": "a100", "SLURM_JOB_RESTART_COUNT": "0", "SLURM_YOLO_HOME": home,
                     "PYTHONDONTWRITEBYTECODE": ""} for j in ids]  # fmt: skip
            for e in envs:
                e.pop("PYTHONDONTWRITEBYTECODE")
            base = [_timed(["/usr/bin/scontrol", "show", "job", "-o", e["SLURM_JOB_ID"]], e)[0] for e in envs]
            results = {}
            for hook in ("prolog", "epilog"):
                alone = [_timed([str(BIN / f"slurm-yolo-{hook}")], e) for e in envs]
                results[f"{hook}_alone"] = alone
            for e in envs:  # fresh runs for the concurrent round
                e["SLURM_JOB_RESTART_COUNT"] = "1"
            for hook in ("prolog", "epilog"):
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    results[f"{hook}_x{jobs}"] = list(pool.map(lambda e: _timed([str(BIN / f"slurm-yolo-{hook}")], e), envs))
        finally:
            subprocess.run(["/usr/bin/scancel", *map(str, ids)], check=False)
        errors = sum(rc != 0 for runs in results.values() for _, rc in runs)
        log = Path(home, "hooks.log").read_text() if Path(home, "hooks.log").exists() else ""
        alerts = log.count('"alert"')
    b50, b99 = _quantiles(base)
    print(f"baseline scontrol show job: p50 {b50:.0f} ms, p99 {b99:.0f} ms")
    out = {}
    for name, runs in results.items():
        p50, p99 = _quantiles([t for t, _ in runs])
        out[name] = p50
        ok = p50 <= 80 and p99 <= 250
        print(f"{name:<14} p50 {p50:.0f} ms, p99 {p99:.0f} ms ({p50 / b50:.1f}x scontrol) [{'met' if ok else 'MISSED'}]")
    print(f"errors: {errors} non-zero exits, {alerts} alerts logged")
    return out


if __name__ == "__main__":
    main()
