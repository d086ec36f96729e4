"""A 1000-task GPU array through the hooks, against the same arrays with the hooks off.

On the bundled 22.05 cluster (its marker: never a site's), two rounds, each an array of ``TASKS``
one-shard tasks of 1 s (``-p t4,a100``: 16 shards at once), then, the moment it ends, the next array
of ``TASKS // 5`` tasks (what a user submits next runs while the first one's settlements, enforcement
and AdminComments are still being done):

- ``off``: the cluster brought up without PrologSlurmctld/EpilogSlurmctld (job_submit.lua stays);
- ``true-epilog``: EpilogSlurmctld=/bin/true alone (Slurm's own cost of having one);
- ``on``: brought up as deploy/minicluster wires it (the C client served by hookd).

Printed: each array's makespan (first submit to last end, from sacct) and the ``on``/``off`` ratio;
the hooks' own time per call (hookd's ``ms`` in hooks.log: p50, p99); then, for the hooked arrays,
what the issue asks of them: every run held and settled exactly once (the ledger's rows against
sacct's), every AdminComment in sacct and how long after the array's end the last one landed (target:
2 min), ``ledger audit`` findings on these jobs (target 0), ``ledger check`` clean, and the most
processes slurm-yolo had at any moment besides hookd itself (hookd's descendants: sacct, sacctmgr,
scancel; and any other ``slurm-yolo`` process), sampled every 0.2 s (target: a few).

Every round runs with ``SchedulerParameters=bf_interval=1``: with any EpilogSlurmctld at all (even
``/bin/true``), Slurm 22.05 starts what a job's end freed only at its next scheduling pass, not at
the end (40 one-second tasks: 12 s without an epilog, 41 s with ``/bin/true`` at the bundled
cluster's ``bf_interval=5``; 10 and 11 s at 1), so the ``true-epilog`` round shows what Slurm's own
epilog handling costs, apart from slurm-yolo's.

The runs are billed to an account of their own, ``bench`` (made here, with a deposit), so the
bundled cluster's test accounts keep their balances; at the end ``ledger reconcile`` bills the runs
of the rounds without hooks, as cron would (its time is printed), and the audit of every bench job
follows. ``BENCH_ARRAY_TASKS`` sets the size (default
1000: about 20 minutes in all on 2 cores). The cluster is brought up with its hooks again at the end,
its books where it found them (the shared MariaDB ledger, as ``bash deploy/demo`` leaves it, or its
own SQLite). On the shared ledger the rounds without hooks still have job_submit.lua asking hookd,
which deploy/minicluster starts for admission alone then.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

from slurm_yolo.core import config as config_mod
from slurm_yolo.state import ledger

REPO = Path(__file__).resolve().parent.parent
MARKER = Path("/var/lib/slurm-yolo-cluster/clusters/22.05.json")  # written by deploy/minicluster only
VENV_BIN = Path("/opt/slurm-yolo/venv/bin")
ACCOUNT = "bench"
COMMENT_TARGET_S = 120.0
# slurm-yolo's own processes outside hookd (the C client slurmctld starts per hook is Slurm's own).
ENTRY_POINTS = ("bin/slurm-yolo ", "bin/slurm-yolo-prolog", "bin/slurm-yolo-epilog", "-m slurm_yolo")


def _cmd(*argv: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if check and res.returncode != 0:
        raise SystemExit(f"bench array: {' '.join(argv)} failed: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


ROUNDS = {  # round: (PrologSlurmctld, EpilogSlurmctld); None: deploy/minicluster's own (the hooks)
    "off": ("", ""),  # set and empty: none
    "true-epilog": ("", "/bin/true"),  # what any EpilogSlurmctld costs in Slurm itself
    "on": (None, None),
}
SCHEDULER = "bf_interval=1"  # every round: see the module docstring


def _up(round_name: str | None, backend: str) -> None:
    """The 22.05 cluster as the round wants it (None: as deploy/minicluster brings it up by default),
    its books where they are (``backend``: the demo leaves them on the shared MariaDB ledger)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINICLUSTER_")}
    env["MINICLUSTER_LEDGER"] = f"22.05={backend}"
    if round_name is not None:
        env["MINICLUSTER_SCHEDULER_PARAMETERS"] = SCHEDULER
        for name, value in zip(
            ("MINICLUSTER_PROLOG_SLURMCTLD", "MINICLUSTER_EPILOG_SLURMCTLD"), ROUNDS[round_name], strict=True
        ):
            if value is not None:
                env[name] = value
    _cmd(str(REPO / "deploy" / "minicluster"), "up", "22.05", env=env)


def _cli(config: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_YOLO_HOME"} | {"SLURM_YOLO_CONFIG": str(config)}
    return _cmd(str(VENV_BIN / "slurm-yolo"), *args, env=env, check=check)


def _account(config: Path) -> None:
    """The bench's own Slurm account (root a member) and tokens for every run of both rounds."""
    if ACCOUNT not in _cmd("sacctmgr", "-n", "-P", "show", "account", ACCOUNT, "format=Account").split():
        _cmd("sacctmgr", "-i", "add", "account", ACCOUNT, "cluster=yolo")
        _cmd("sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNT}", "cluster=yolo")
    _cli(config, "ledger", "deposit", ACCOUNT, "100000G", "--reason", "bench array")


def _array(tasks: int) -> tuple[int, list[dict[str, str]]]:
    """Submit an array of ``tasks`` 1-second one-shard tasks and wait for all of them: its id and
    sacct's record of each task."""
    out = _cmd(
        "sbatch",
        "--parsable",
        f"--array=0-{tasks - 1}",
        "-p",
        "t4,a100",
        "-A",
        ACCOUNT,
        "--gres=shard:1",
        "-t",
        "1",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 1",
    )
    array = int(out.strip().split(";")[0])
    while _cmd("squeue", "-h", "-j", str(array), "-o", "%i").strip():
        time.sleep(1)
    fields = ["JobIDRaw", "Submit", "Start", "End", "State", "AdminComment"]
    while True:  # slurmdbd can lag the controller by a moment
        env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
        lines = _cmd("sacct", "-X", "-n", "-P", "-j", str(array), "-o", ",".join(fields), env=env).splitlines()
        rows = [dict(zip(fields, line.split("|", len(fields) - 1), strict=True)) for line in lines if line]
        if len(rows) == tasks and all(r["End"].isdigit() for r in rows):
            return array, rows
        time.sleep(1)


def _makespan(rows: list[dict[str, str]]) -> float:
    return max(int(r["End"]) for r in rows) - min(int(r["Submit"]) for r in rows)


class _Children(threading.Thread):
    """The most processes slurm-yolo ran at once besides hookd: hookd's descendants and any other
    ``slurm-yolo`` process (a Python hook of its own, a cron command), sampled every 0.2 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most = 0
        self.what = ""
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            procs = {}
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        stat = Path(entry.path, "stat").read_text()
                        cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
                    procs[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
            hookd = {pid for pid, (_, cmd) in procs.items() if "bin/slurm-yolo hookd" in cmd}  # 22.05's
            ours = set()
            for pid, (_, cmd) in procs.items():
                if pid in hookd or pid == os.getpid() or " hookd" in cmd:  # the 24.11 cluster's too
                    continue
                parent = procs[pid][0]
                while parent > 1 and parent not in hookd and parent in procs:
                    parent = procs[parent][0]
                if parent in hookd or any(entry in cmd for entry in ENTRY_POINTS):
                    ours.add(pid)
            if len(ours) > self.most:
                self.most, self.what = len(ours), "; ".join(sorted(procs[p][1][:60] for p in ours))

    def stop(self) -> None:
        self._done.set()
        self.join()


def _comments_landed(array: int, end: float, timeout: float) -> tuple[float, int]:
    """Seconds after ``end`` when sacct showed every task's AdminComment (or the timeout), and how
    many tasks were still without one."""
    fields = ["JobIDRaw", "AdminComment"]
    deadline = time.time() + timeout
    while True:
        lines = _cmd("sacct", "-X", "-n", "-P", "-j", str(array), "-o", ",".join(fields)).splitlines()
        missing = sum(1 for line in lines if line and not line.split("|", 1)[1].startswith("yolo:"))
        if not missing or time.time() > deadline:
            return time.time() - end, missing
        time.sleep(2)


def _hook_ms(config: config_mod.Config, since: float) -> list[float]:
    """hookd's time per hook call since ``since`` (hooks.log's ``ms``)."""
    log = config.state_dir / "private" / "hooks.log"
    out = []
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") in ("prolog", "epilog") and "ms" in rec and rec.get("at", 0) >= since:
            out.append(float(rec["ms"]))
    return out


def _keys(cluster: str, rows: list[dict[str, str]]) -> set[str]:
    """The ledger's keys of these sacct records: job ids come again on a cluster brought up afresh,
    and a shared ledger holds other clusters' jobs of the same ids (their submit times and cluster
    tell them apart)."""
    return {ledger.run_key(cluster, int(r["JobIDRaw"]), int(r["Submit"])) for r in rows}


def _ledger_rows(config: config_mod.Config, keys: set[str]) -> list[dict[str, object]]:
    lg = ledger.reader(config)
    assert lg is not None
    with lg:
        return [dict(row) for key in sorted(keys) if (row := lg.run(key)) is not None]


def main() -> dict[str, float]:
    tasks = int(os.environ.get("BENCH_ARRAY_TASKS", "1000"))
    marker = json.loads(MARKER.read_text())  # the bundled cluster: this changes its ledger, never a site's
    config_path = Path(marker["config"])
    config = config_mod.load(config_path, env={"SLURM_YOLO_CONFIG": str(config_path)})
    out: dict[str, float] = {}
    backend = config.ledger.backend
    try:
        _up(None, backend)
        _account(config_path)
        spans: dict[str, tuple[float, float]] = {}
        bench_keys: set[str] = set()
        for name in ROUNDS:
            _up(name, backend)
            since = time.time()
            watcher = _Children()
            watcher.start()
            first, rows = _array(tasks)
            nxt, next_rows = _array(max(1, tasks // 5))
            spans[name] = (_makespan(rows), _makespan(next_rows))
            keys = _keys(marker["cluster"], rows + next_rows)
            bench_keys |= keys
            if name != "on":
                watcher.stop()
                continue
            end = max(int(r["End"]) for r in rows)
            landed, missing = _comments_landed(first, end, timeout=600)
            _comments_landed(nxt, end, timeout=600)  # the audit below wants the next array's too
            watcher.stop()
            deadline = time.time() + 300  # the next array's last runs may still be settling
            held = _ledger_rows(config, keys)
            while sum(r["state"] == "settled" for r in held) < len(keys) and time.time() < deadline:
                time.sleep(1)
                held = _ledger_rows(config, keys)
            settled = [r for r in held if r["state"] == "settled"]
            ms = sorted(_hook_ms(config, since))
            audit = _cli(
                config_path, "ledger", "audit", "--window-days", "0.2", "--min-age", "0", "--json", check=False
            )
            ours = [f for f in json.loads(audit or "[]") if f["key"] in keys]
            check = _cli(config_path, "ledger", "check", check=False).strip()
            p50, p99 = statistics.median(ms), ms[min(len(ms) - 1, int(0.99 * len(ms)))]
            print(f"hooks: {len(ms)} calls in hookd, p50 {p50:.0f} ms, p99 {p99:.0f} ms")
            print(
                f"runs: {len(keys)} in sacct, {len(held)} held in the ledger, {len(settled)} settled"
                f" [{'met' if len(settled) == len(keys) == len(held) else 'MISSED'}]"
            )
            print(
                f"AdminComments: the last of {tasks} in sacct {landed:.0f} s after the array's end, {missing} missing"
                f" [{'met' if not missing and landed <= COMMENT_TARGET_S else 'MISSED'}]"
            )
            kinds = sorted({f["kind"] for f in ours})
            print(
                f"ledger audit: {len(ours)} finding(s) on these jobs {kinds or ''} [{'met' if not ours else 'MISSED'}]"
            )
            print(f"ledger check: {check or 'clean'}")
            print(f"most processes at once besides hookd: {watcher.most} ({watcher.what or 'none'})")
            out |= {"hook_p99_ms": p99, "comments_s": landed, "children": watcher.most}
        # What the rounds without hooks left (runs no prolog held) is cron's: reconcile holds and
        # settles them on `bench`, as on a site that ran without its hooks for a while.
        started = time.monotonic()
        _cli(config_path, "ledger", "reconcile", "--window-days", "0.2")
        audit = _cli(config_path, "ledger", "audit", "--window-days", "0.2", "--min-age", "0", "--json", check=False)
        ours = [f for f in json.loads(audit or "[]") if f["key"] in bench_keys]
        print(
            f"ledger reconcile of the rounds without hooks: {time.monotonic() - started:.0f} s;"
            f" then {len(ours)} audit finding(s) on the bench's jobs"
        )
        for i, what in enumerate((f"array of {tasks}", f"next array of {max(1, tasks // 5)}")):
            off, true, on = (spans[name][i] for name in ROUNDS)
            print(
                f"{what}: makespan {on:.0f} s with the hooks, {off:.0f} s without ({on / off:.2f}x);"
                f" {true:.0f} s with EpilogSlurmctld=/bin/true ({true / off:.2f}x)"
            )
            out[f"makespan_ratio_{i}"] = on / off
    finally:
        _up(None, backend)
    return out


if __name__ == "__main__":
    main()
