"""The ledger driven by the real slurmctld prolog/epilog on the local cluster.

These tests use the system config and state (/etc/slurm-yolo, /var/lib/slurm-yolo) because that is
what slurmctld's hooks use; each test measures its own job's movements and deltas.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import poll, skip_requeue_delay
from slurm_yolo import config as config_mod
from slurm_yolo import ledger
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.ledger import bucket
from slurm_yolo.slurm import commands

pytestmark = pytest.mark.cluster
VENV_BIN = Path("/opt/slurm-yolo/venv/bin")


@pytest.fixture
def system(cluster: None, monkeypatch: pytest.MonkeyPatch) -> config_mod.Config:
    """The config and state the slurmctld hooks use."""
    monkeypatch.delenv("SLURM_YOLO_HOME", raising=False)
    cfg = config_mod.load()
    if "PrologSlurmctld" not in Path("/etc/slurm/slurm.conf").read_text():
        pytest.fail("the cluster runs without the slurm-yolo hooks (deploy/install, then deploy/minicluster up)")
    return cfg


def sbatch(*args: str, script: str = "sleep 1") -> int:
    return commands.submit(f"#!/bin/bash\n{script}\n", ["-o", "/dev/null", *args])


def read(cfg: config_mod.Config) -> ledger.Ledger:
    lg = ledger.reader(cfg)
    assert lg is not None
    return lg



def settled(cfg: config_mod.Config, job_id: int, restart: int = 0, timeout: float = 90) -> dict:
    def find() -> dict | None:
        lg = read(cfg)
        try:
            rows = [dict(r) for r in lg.runs(job_id) if r["restart"] == restart and r["state"] == "settled"]
        finally:
            lg.close()
        return rows[0] if rows else None

    return poll(f"job {job_id} run {restart} settled", find, timeout)  # type: ignore[return-value]


def balance(cfg: config_mod.Config, account: str) -> int:
    lg = read(cfg)
    try:
        row = lg.account(account)
        return row["balance"] if row else 0
    finally:
        lg.close()


def set_balance(cfg: config_mod.Config, account: str, target: int) -> None:
    with ledger.writer(cfg) as lg:
        row = lg.account(account)
        lg.credit(account, target - (row["balance"] if row else 0), "test", "test setup", kind="adjustment")
    subprocess.run([str(VENV_BIN / "slurm-yolo"), "ledger", "enforce", "--account", account], check=True,
                   env={k: v for k, v in os.environ.items() if k != "SLURM_YOLO_HOME"})  # fmt: skip


@pytest.fixture
def funded(system: config_mod.Config) -> Iterator[config_mod.Config]:
    set_balance(system, "vision", 10**13)
    yield system
    lg = read(system)
    try:
        assert lg.check() == []
    finally:
        lg.close()


def k_of(cfg: config_mod.Config, partition: str) -> float:
    from slurm_yolo import calibration

    return calibration.load(cfg, partition).model.k


def test_complete_job_holds_charges_and_refunds_to_the_token(funded: config_mod.Config) -> None:
    before = balance(funded, "vision")
    job = sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", "-A", "vision", script="sleep 2")
    row = settled(funded, job)
    k = k_of(funded, "t4")
    assert row["hold"] == bucket.gpu_tokens(120, 1, k)
    elapsed = int(commands.sacct_jobs([job])[0]["ElapsedRaw"])
    assert row["end_state"] == "COMPLETED" and row["elapsed"] == elapsed
    assert row["charge"] == bucket.gpu_tokens(elapsed, 1, k) and row["refund"] == row["hold"] - row["charge"]
    assert balance(funded, "vision") == before - row["charge"]
    comment = poll("AdminComment", lambda: commands.sacct_jobs([job])[0]["AdminComment"])
    assert f"charge={row['charge']}" in str(comment)


def test_shard_job_holds_a_share_of_a_gpu(funded: config_mod.Config) -> None:
    job = sbatch("-p", "a100", "--gres=shard:a100:2", "-t", "1", script="true")
    row = settled(funded, job)
    assert row["gpus"] == 0.5 and row["hold"] == bucket.gpu_tokens(60, 0.5, k_of(funded, "a100"))


def test_array_tasks_are_held_and_settled_each(funded: config_mod.Config) -> None:
    """Array tasks start together (hookd merges their lookups) and each is held and settled under
    its raw job id."""
    first = sbatch("-p", "a100", "--array=0-3", "--gres=shard:a100:1", "-t", "1", script="sleep 1")
    tasks = poll("array tasks in sacct", lambda: len(found := commands.sacct_jobs([first])) == 4 and found)
    rows = [settled(funded, int(task["JobIDRaw"])) for task in tasks]
    assert all(r["end_state"] == "COMPLETED" and r["gpus"] == 0.25 and r["charge"] + r["refund"] == r["hold"] for r in rows)


def test_cancel_while_pending_moves_nothing(funded: config_mod.Config) -> None:
    job = sbatch("-p", "t4", "--gres=gpu:t4:1", "--hold")
    subprocess.run(["/usr/bin/scancel", str(job)], check=True)
    assert commands.wait_for_end(job, timeout=30).startswith("CANCELLED")
    time.sleep(2)
    lg = read(funded)
    try:
        assert lg.runs(job) == [] and lg.job_movements(job) == []
    finally:
        lg.close()


def test_cancel_while_running_pays_the_time_it_ran(funded: config_mod.Config) -> None:
    job = sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 120")
    assert commands.wait_for_state(job, {"RUNNING"}, timeout=30) == "RUNNING"
    time.sleep(3)
    subprocess.run(["/usr/bin/scancel", str(job)], check=True)
    row = settled(funded, job)
    assert row["end_state"] == "CANCELLED" and row["elapsed"] >= 2
    assert row["charge"] == bucket.gpu_tokens(row["elapsed"], 1, row["k"]) < row["hold"]


def test_failed_job_pays_the_time_it_ran(funded: config_mod.Config) -> None:
    row = settled(funded, sbatch("-p", "a100", "--gres=gpu:a100:2", "-t", "1", script="sleep 1; exit 3"))
    assert row["end_state"] == "FAILED" and row["gpus"] == 2
    assert row["charge"] == bucket.gpu_tokens(row["elapsed"], 2, row["k"])


def test_timeout_is_charged_in_full(funded: config_mod.Config) -> None:
    row = settled(funded, sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 300"), timeout=240)
    assert row["end_state"] == "TIMEOUT" and row["charge"] == row["hold"] and row["refund"] == 0


def test_requeue_settles_each_run_once(funded: config_mod.Config) -> None:
    job = sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 8")
    assert commands.wait_for_state(job, {"RUNNING"}, timeout=30) == "RUNNING"
    time.sleep(1)
    subprocess.run(["/usr/bin/scontrol", "requeue", str(job)], check=True)
    first = settled(funded, job, restart=0)
    assert first["end_state"] == "REQUEUED" and first["charge"] == bucket.gpu_tokens(first["elapsed"], 1, first["k"])
    skip_requeue_delay(job)
    second = settled(funded, job, restart=1, timeout=240)
    assert second["end_state"] == "COMPLETED" and second["job_key"] != first["job_key"]
    lg = read(funded)
    try:
        kinds = [m["kind"] for m in lg.job_movements(job)]
    finally:
        lg.close()
    assert kinds.count("hold") == 2 and kinds.count("charge") == 2 and kinds.count("refund") == 2


def test_repeated_prolog_and_epilog_change_nothing(funded: config_mod.Config) -> None:
    job = sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="true")
    row = settled(funded, job)
    before = balance(funded, "vision")
    env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_ACCOUNT": "vision", "SLURM_JOB_USER": "root",
           "SLURM_JOB_PARTITION": "t4", "SLURM_CLUSTER_NAME": "yolo", "SLURM_JOB_RESTART_COUNT": "0"}  # fmt: skip
    for hook in ("slurm-yolo-epilog", "slurm-yolo-prolog", "slurm-yolo-epilog"):
        assert subprocess.run([str(VENV_BIN / hook)], env=env, timeout=60).returncode == 0
    assert balance(funded, "vision") == before
    lg = read(funded)
    try:
        assert len(lg.job_movements(job)) == 3 and dict(lg.runs(job)[0])["charge"] == row["charge"]
    finally:
        lg.close()


def test_dry_account_refused_by_yolo_sbatch_and_held_back_by_slurm(system: config_mod.Config, site_config: Path,
                                                                   dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    set_balance(system, "research", 5_000_000)
    try:
        res = CliRunner().invoke(yolo_sbatch, ["-A", "research", "-p", "t4", "train", "model=yolov8l.yaml", f"data={dataset}",
                                               "epochs=50", "imgsz=640"])  # fmt: skip
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert res.output.startswith("Error: account research cannot cover this job: needs ")
        assert "has 5.0 MTok left (balance 5.0 MTok - pending jobs 0.0 MTok); no refill covers it" in res.output
        assert balance(system, "research") == 5_000_000

        set_balance(system, "research", 0)
        assert "gres/gpu=0" in subprocess.run(
            ["/usr/bin/sacctmgr", "-n", "-P", "show", "assoc", "where", "account=research", "format=grptresrunmins"],
            capture_output=True, text=True).stdout  # fmt: skip
        gpu_job = sbatch("-A", "research", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="true")
        cpu_job = sbatch("-A", "research", "-p", "t4", "-t", "1", script="true")
        assert commands.wait_for_end(cpu_job, timeout=60) == "COMPLETED"  # CPU jobs are not metered
        reason = poll("pending reason", lambda: subprocess.run(
            ["/usr/bin/squeue", "-h", "-j", str(gpu_job), "-o", "%r"], capture_output=True, text=True).stdout.strip())
        assert reason == "AssocGrpGRESRunMinutes"
        res = subprocess.run([str(VENV_BIN / "slurm-yolo"), "ledger", "deposit", "research", "1G"],
                             env={k: v for k, v in os.environ.items() if k != "SLURM_YOLO_HOME"}, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert commands.wait_for_end(gpu_job, timeout=90) == "COMPLETED"
    finally:
        set_balance(system, "research", 10**12)


def test_spank_option_reaches_the_ledger(funded: config_mod.Config) -> None:
    bad = subprocess.run(["/usr/bin/sbatch", "--yolo-tokens=12abc", "-p", "t4", "--wrap", "true"], capture_output=True, text=True)
    assert bad.returncode != 0 and "yolo_tokens: --yolo-tokens: '12abc' is not a whole number" in bad.stderr
    row = settled(funded, sbatch("--yolo-tokens=777", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="true"))
    assert row["estimate"] == 777


def test_users_cannot_write_the_ledger(funded: config_mod.Config) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice"}
    before = balance(funded, "vision")

    def as_alice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/usr/sbin/runuser", "-u", "alice", "--", str(VENV_BIN / "slurm-yolo"), "ledger", *args],
                              env=env, capture_output=True, text=True, cwd="/tmp")  # fmt: skip

    res = as_alice("deposit", "vision", "1000G")
    assert res.returncode == 1 and "permission denied" in res.stderr
    res = as_alice("tiers", "yolo-explore", "0.001")
    assert res.returncode == 1 and "permission denied" in res.stderr
    assert balance(funded, "vision") == before
    assert as_alice("balance", "vision").returncode == 0  # her own account
    res = as_alice("balance", "research")
    assert res.returncode == 1 and "not one of yours" in res.stderr


def test_hundreds_of_concurrent_hooks_with_kills_keep_the_books(cluster: None, home: Path) -> None:
    """250 real prolog/epilog invocations (duplicated, shuffled, 10% killed -9) on real held jobs."""
    (home / "config.toml").write_text(_chaos_config())
    jobs = [sbatch("-p", "a100", "--gres=gpu:a100:1", "--hold", "-t", "5") for _ in range(50)]
    try:
        events = [(j, "prolog") for j in jobs for _ in range(3)] + [(j, "epilog") for j in jobs for _ in range(2)]
        random.Random(7).shuffle(events)
        procs: list[subprocess.Popen[bytes]] = []
        rng = random.Random(11)
        for job, hook in events:
            env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_ACCOUNT": "vision", "SLURM_JOB_USER": "root",
                   "SLURM_JOB_PARTITION": "a100", "SLURM_CLUSTER_NAME": "yolo", "SLURM_JOB_RESTART_COUNT": "0",
                   "SLURM_YOLO_HOME": str(home)}  # fmt: skip
            procs.append(subprocess.Popen([str(VENV_BIN / f"slurm-yolo-{hook}")], env=env))
            if rng.random() < 0.1:
                time.sleep(rng.uniform(0, 0.15))
                procs[-1].send_signal(signal.SIGKILL)
            while sum(p.poll() is None for p in procs) >= 24:
                time.sleep(0.02)
        for p in procs:
            p.wait(timeout=120)
        killed = sum(p.returncode == -signal.SIGKILL for p in procs)
        assert all(p.returncode in (0, -signal.SIGKILL) for p in procs)
    finally:
        subprocess.run(["/usr/bin/scancel", *map(str, jobs)], check=False)
    cfg = config_mod.load()
    lg = read(cfg)
    try:
        assert lg.check() == [], lg.check()
        holds = lg.conn.execute("SELECT job_key, count(*) FROM movements WHERE kind = 'hold' GROUP BY job_key").fetchall()
        assert all(n == 1 for _, n in holds) and len(holds) >= 40
        for r in lg.conn.execute("SELECT * FROM jobs WHERE state = 'settled'"):
            assert r["charge"] + r["refund"] == r["hold"]
    finally:
        lg.close()
    print(json.dumps({"invocations": len(procs), "killed": killed, "runs": len(holds)}))


def _chaos_config() -> str:
    text = Path("/etc/slurm-yolo/config.toml").read_text()
    return text.replace('prolog_errors = "open"', 'prolog_errors = "open"\nenforce = false\nadmin_comment = false')
