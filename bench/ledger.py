"""Ledger throughput: hold + settle pairs per second with N concurrent processes, on real SQLite (WAL)
and, when the bundled cluster's MariaDB is up, on it too (a database and user of the bench's own,
dropped afterwards), in the same run.

Baseline in the same run: the same number of bare single-row INSERT transactions on a WAL database.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from multiprocessing import Pool
from pathlib import Path

from slurm_yolo.core import config
from slurm_yolo.state import ledger

OPS = 400
MARKER = Path("/var/lib/slurm-yolo-cluster/clusters/22.05.json")  # the bundled MariaDB, nobody else's


def _mysql(statement: str) -> None:
    subprocess.run(["mysql", "--protocol=socket", "-e", statement], check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def _mariadb(folder: str) -> Iterator[str]:
    """The config lines of a MariaDB ledger of the bench's own on the bundled server."""
    name, password = f"yolo_bench_{secrets.token_hex(4)}", secrets.token_hex(16)
    _mysql(
        f"CREATE DATABASE {name}; CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}';"
        f" GRANT ALL ON {name}.* TO '{name}'@'localhost'"
    )
    options = Path(folder) / "ledger.cnf"
    options.write_text(f"[client]\nuser={name}\npassword={password}\ndatabase={name}\nsocket=/run/mysqld/mysqld.sock\n")
    options.chmod(0o600)
    try:
        yield f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{options}"\n'
    finally:
        _mysql(f"DROP DATABASE {name}; DROP USER '{name}'@'localhost'")


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


def _rounds(tmp: str, backend: str, config_text: str, base: float, out: dict[str, float]) -> None:
    for procs in (1, 4, 16):
        home = tempfile.mkdtemp(dir=tmp)
        Path(home, "config.toml").write_text(config_text)
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
        out[f"{backend}_x{procs}"] = rate
        print(
            f"{backend:>7}, {procs:>2} processes: {rate:,.0f} hold+settle pairs/s ({2 * rate / (2 * OPS / base):.2f}x"
            f" the bare SQLite insert rate); books {'consistent' if not problems else problems[:2]}"
        )


def main() -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = _baseline(Path(tmp) / "base.db", 2 * OPS)
        print(f"baseline: {2 * OPS / base:,.0f} bare insert transactions/s")
        _rounds(tmp, "sqlite", "", base, out)
        if not MARKER.is_file():
            print("mariadb: skipped (no bundled cluster's MariaDB: deploy/minicluster up)")
            return out
        with _mariadb(tmp) as text:
            _rounds(tmp, "mariadb", text, base, out)
    for procs in (1, 4, 16):
        if f"mariadb_x{procs}" in out:
            print(f"MariaDB / SQLite, {procs:>2} processes: {out[f'mariadb_x{procs}'] / out[f'sqlite_x{procs}']:.2f}x")
    return out


if __name__ == "__main__":
    main()
