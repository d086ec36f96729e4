"""Prolog/epilog wall time per invocation (p50, p99), alone and 50 at once, replayed on real jobs.

Two ways a site can run the hooks, measured in the same run:
- ``hookd``: slurm.conf's ``slurm-yolo-hook`` client, served by a resident ``slurm-yolo hookd`` of the
  round's own (what deploy/minicluster wires, on the round's ledger: hookd reads its config once);
  the epilog answers once its event is in the inbox, so the time until the settler shows the run
  settled in the ledger is printed too;
- ``python``: the Python hooks alone (what the client falls back on when hookd is not running).
Baseline in the same run: the prolog's own Slurm query alone (``squeue -O`` of the job's record).
Each round replays onto a ledger of its own, so every hold and settlement is a first one.
Targets: p50 <= 80 ms, p99 <= 250 ms, zero errors.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from slurm_yolo.slurm import commands, queries

BIN = Path(sys.executable).parent
CLIENT = Path("/opt/slurm-yolo/bin/slurm-yolo-hook")


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall clock at start, seconds taken, exit status)."""
    at, start = time.time(), time.perf_counter()
    rc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return at, time.perf_counter() - start, rc


def _quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1000, xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1000


def _start_hookd(home: str) -> subprocess.Popen[bytes]:
    """The round's own hookd (as root: it becomes the SlurmUser), once its socket answers."""
    env = {"SLURM_YOLO_CONFIG": f"{home}/config.toml", "SLURM_YOLO_HOME": home, "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([str(BIN / "slurm-yolo"), "hookd"], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(f"{home}/hookd.sock")
                return proc
            except OSError:
                time.sleep(0.05)
    raise SystemExit(f"bench hooks: hookd did not start on {home}/hookd.sock")


def _settle_delays(home: str, starts: dict[int, float], timeout: float = 60) -> list[float]:
    """Seconds from each epilog's start until the ledger shows its run settled."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(f"file:{home}/private/ledger.db?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT job_id, settled_at FROM jobs WHERE settled_at IS NOT NULL").fetchall()
        done = {j: at for j, at in rows if j in starts}
        if len(done) == len(starts) or time.monotonic() > deadline:
            return [done[key] - starts[key] for key in done]
        time.sleep(0.1)


def _finished_jobs(partition: str, n: int) -> list[int]:
    """``n`` real one-shard jobs that ran and ended: the hooks replayed on them take the paths a real
    job end takes (slurmdbd has their final records)."""
    ids = [
        commands.submit(
            "#!/bin/bash\ntrue\n", ["-p", partition, "-A", "vision", "--gres=shard:1", "-t", "1", "-o", "/dev/null"]
        )
        for _ in range(n)
    ]
    for job in ids:
        commands.wait_for_end(job, poll=0.3, timeout=300)
    return ids


def _home(base: str, name: str, config_text: str) -> str:
    """A ledger of its own for one round, owned by the SlurmUser (hookd writes it)."""
    home = os.path.join(base, name)
    os.mkdir(home, 0o755)
    Path(home, "config.toml").write_text(config_text + f'\n[hookd]\nsocket = "{home}/hookd.sock"\n')
    shutil.chown(home, "slurm", "slurm")
    return home


def main(jobs: int = 50) -> dict[str, float]:
    marker = json.loads(Path("/var/lib/slurm-yolo-cluster/clusters/22.05.json").read_text())  # the bundled cluster
    config_text = (
        Path(marker["config"])
        .read_text()
        .replace("[ledger]\n", "[ledger]\nenforce = false\nadmin_comment = false\nfeedback = false\n")
    )
    with tempfile.TemporaryDirectory() as base:
        Path(base).chmod(0o755)
        parts = {j: p for p in ("a100", "t4") for j in _finished_jobs(p, jobs // 2)}
        variants = {"python": lambda hook: [str(BIN / f"slurm-yolo-{hook}")]}
        if CLIENT.exists():
            variants = {"hookd": lambda hook: [str(CLIENT), hook], **variants}
        else:
            print(f"hookd: no {CLIENT} (deploy/install builds it): only the Python hooks are measured")
        results: dict[str, list[tuple[float, float, int]]] = {}
        settle: dict[str, list[float]] = {}
        envs = [
            {
                "SLURM_JOB_ID": str(j),
                "SLURM_JOB_ACCOUNT": "vision",
                "SLURM_JOB_USER": "root",
                "SLURM_CLUSTER_NAME": "yolo",
                "SLURM_JOB_PARTITION": p,
            }
            for j, p in parts.items()
        ]
        query = {**os.environ, "SLURM_TIME_FORMAT": queries.TIME_FORMAT}
        base_times = [
            _timed(
                ["/usr/bin/" + a if i == 0 else a for i, a in enumerate(queries.squeue_argv([int(e["SLURM_JOB_ID"])]))],
                query,
            )[1]
            for e in envs
        ]
        alerts = 0
        for variant, argv in variants.items():
            for round_name in ("alone", f"x{jobs}"):
                home = _home(base, f"{variant}-{round_name}", config_text)
                round_envs = [
                    {**e, "SLURM_YOLO_HOME": home, "SLURM_YOLO_HOOKD_SOCKET": f"{home}/hookd.sock"} for e in envs
                ]
                server = _start_hookd(home) if variant == "hookd" else None
                for hook in ("prolog", "epilog"):
                    call = partial(_timed, argv(hook))
                    if round_name == "alone":
                        timed = [call(e) for e in round_envs]
                    else:
                        with ThreadPoolExecutor(max_workers=jobs) as pool:
                            timed = list(pool.map(call, round_envs))
                    results[f"{variant} {hook} {round_name}"] = timed
                if variant == "hookd":
                    starts = {int(e["SLURM_JOB_ID"]): at for e, (at, _, _) in zip(round_envs, timed, strict=True)}
                    settle[f"{variant} epilog {round_name}"] = _settle_delays(home, starts)
                if server is not None:
                    server.terminate()
                    server.wait(timeout=60)
                log = Path(home, "private", "hooks.log")
                alerts += log.read_text().count('"alert"') if log.exists() else 0
        errors = sum(rc != 0 for runs in results.values() for _, _, rc in runs)
    b50, b99 = _quantiles(base_times)
    print(f"baseline, the prolog's squeue query: p50 {b50:.0f} ms, p99 {b99:.0f} ms")
    out = {}
    for name, runs in results.items():
        p50, p99 = _quantiles([t for _, t, _ in runs])
        out[name] = p50
        ok = p50 <= 80 and p99 <= 250
        print(
            f"{name:<22} p50 {p50:.0f} ms, p99 {p99:.0f} ms ({p50 / b50:.1f}x the query) [{'met' if ok else 'MISSED'}]"
        )
    for name, delays in settle.items():
        p50, p99 = _quantiles(delays) if delays else (float("nan"), float("nan"))
        print(f"{name:<22} settled in the ledger after p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(delays)}/{jobs} runs)")
    print(f"errors: {errors} non-zero exits, {alerts} alerts logged")
    return out


if __name__ == "__main__":
    main()
