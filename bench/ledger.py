"""Ledger throughput: hold + settle pairs per second with N concurrent processes, on real SQLite (WAL).

Baseline in the same run: the same number of bare single-row INSERT transactions on a WAL database.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from fractions import Fraction
from multiprocessing import Pool
from pathlib import Path

from slurm_yolo import config, ledger

OPS = 400


def _worker(args: tuple[str, int, int]) -> None:
    home, worker, n = args
    os.environ["SLURM_YOLO_HOME"] = home
    cfg = config.load()
    with ledger.writer(cfg) as lg:
        for i in range(n):
            key = ("bench", worker * 1_000_000 + i, 1, 0, f"acct{worker % 4}", "u", "p", "")
            run = ledger.Run(*key, Fraction(1), 60, 60, 10**6, 10**6)
            lg.hold(run, 1000, None, "bench")
            lg.settle(run.key, 400, "COMPLETED", 24, "bench")


def _baseline(path: Path, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (i,))
        conn.execute("COMMIT")
    return time.perf_counter() - start


def main() -> dict[str, float]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = _baseline(Path(tmp) / "base.db", 2 * OPS)
        print(f"baseline: {2 * OPS / base:,.0f} bare insert transactions/s")
        for procs in (1, 4, 16):
            home = tempfile.mkdtemp(dir=tmp)
            os.environ["SLURM_YOLO_HOME"] = home
            with ledger.writer(config.load()) as lg:
                lg.credit("acct0", 10**12, "bench")
            start = time.perf_counter()
            with Pool(procs) as pool:
                pool.map(_worker, [(home, w, OPS // procs) for w in range(procs)])
            seconds = time.perf_counter() - start
            with ledger.writer(config.load()) as lg:
                problems = lg.check()
            rate = (OPS // procs) * procs / seconds
            out[f"x{procs}"] = rate
            print(f"{procs:>2} processes: {rate:,.0f} hold+settle pairs/s ({2 * rate / (2 * OPS / base):.2f}x the bare insert rate);"
                  f" books {'consistent' if not problems else problems[:2]}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
