"""PrologSlurmctld / EpilogSlurmctld: hold tokens when a job starts, charge and refund when it ends.

Both run as the SlurmUser with no PATH and a bare environment. The amounts come from trusted Slurm
fields (time limit, allocated GPUs or shards, the partition's k), never from user claims alone; the
user's own estimate (``--yolo-tokens`` through SPANK, or yolo-sbatch's ``--comment``) is recorded
beside them. A non-zero PrologSlurmctld exit makes Slurm requeue the job forever, so the prolog
never fails a job: our own errors are logged as alerts and, by policy, the job runs (``open``) or
is cancelled (``cancel``). Each invocation appends one JSON line to ``hooks.log`` in the state dir.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import calibration, ledger
from .config import Config, load
from .ledger import bucket
from .slurm import commands, parsers

if TYPE_CHECKING:
    import subprocess

REFUND_STATES = {"NODE_FAIL": "refund_node_fail", "BOOT_FAIL": "refund_node_fail", "PREEMPTED": "refund_preempted"}


def log_event(config: Config, record: dict[str, object]) -> None:
    """Append one JSON line to hooks.log (stderr if the state dir is not writable)."""
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        with open(config.state_dir / "hooks.log", "a") as f:
            f.write(json.dumps({"at": time.time(), **record}) + "\n")
    except OSError:
        print(json.dumps(record), file=sys.stderr)


def _gpus(tres: str, partition: str, config: Config) -> float:
    """Allocated GPUs: whole GPUs, or shards as a share of one (0 for CPU-only jobs)."""
    alloc = parsers.tres(tres)
    gpus = int(alloc.get("gres/gpu", "0") or 0)
    if gpus:
        return float(gpus)
    shards = int(alloc.get("gres/shard", "0") or 0)
    if shards:
        per_gpu = config.partition(partition).shards_per_gpu or shards
        return shards / per_gpu
    return 0.0


def user_estimate(env: Mapping[str, str]) -> int | None:
    """The user's claim: SPANK ``--yolo-tokens``, else the ``eff=`` yolo-sbatch put in the comment."""
    raw = env.get("SPANK_YOLO_TOKENS")
    if raw and raw.isdigit():
        return int(raw)
    comment = env.get("SLURM_JOB_COMMENT", "")
    if comment.startswith("yolo:"):
        for field in comment[5:].split(","):
            key, _, value = field.partition("=")
            if key == "eff":
                try:
                    return int(float(value))
                except ValueError:
                    return None
    return None


def run_from_slurm(env: Mapping[str, str], config: Config, job: dict[str, str] | None = None) -> ledger.Run | None:
    """The running job's trusted fields (``scontrol show job``, unless given); None for jobs with no GPUs."""
    job_id = int(env["SLURM_JOB_ID"])
    if job is None:
        job = commands.show_job(job_id, bin_dir=Path(config["slurm"]["bin_dir"]))
    partition = job.get("Partition") or env.get("SLURM_JOB_PARTITION", "")
    gpus = _gpus(job.get("TRES", ""), partition, config)
    if not gpus:
        return None
    user = env.get("SLURM_JOB_USER") or job.get("UserId", "").split("(")[0]
    return ledger.Run(
        cluster=config["ledger"]["cluster"] or env.get("SLURM_CLUSTER_NAME") or "default",
        job_id=job_id,
        submit_time=job.get("SubmitTime", ""),
        restart=int(env.get("SLURM_JOB_RESTART_COUNT") or job.get("Restarts") or 0),
        account=env.get("SLURM_JOB_ACCOUNT") or job.get("Account", ""),
        user=user,
        partition=partition,
        qos=job.get("QOS", ""),
        gpus=gpus,
        k=calibration.load(config, partition).model.k,
        time_limit=parsers.duration(job.get("TimeLimit", "")) or 0,
    )


def _enforce_later(config: Config, account: str) -> None:
    """Sync the account's Slurm limit with the ledger in a detached child (sacctmgr takes ~0.3 s and
    the hook must not wait; the child reads the ledger afresh, so racing children agree)."""
    if config["ledger"]["enforce"]:
        spawn_detached([sys.executable, "-m", "slurm_yolo", "ledger", "enforce", "--account", account])


def spawn_detached(argv: list[str]) -> None:
    """Start ``argv`` in its own session, not waited for (double fork, no inherited stdio)."""
    import subprocess

    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)  # fmt: skip


def prolog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None) -> dict[str, object]:
    """Hold the most the run can use: time limit x GPUs / k x the QOS tier's rate."""
    out = _collect(query, config)
    run = run_from_slurm(env, config, parsers.scontrol_record(out.splitlines()[0]) if out.strip() else None)
    if run is None:
        return {"event": "prolog", "job": env.get("SLURM_JOB_ID"), "skipped": "no GPUs"}
    with ledger.writer(config) as lg:
        amount = int(bucket.gpu_tokens(run.time_limit, run.gpus, run.k) * lg.tier_rate(run.qos))
        held, blocked = lg.hold(run, amount, user_estimate(env), actor="prolog")
    if blocked is not None:
        _enforce_later(config, run.account)
    return {"event": "prolog", "job": run.job_id, "key": run.key, "hold": amount, "new": held}


def final_state(job_id: int, config: Config, query: subprocess.Popen[str] | None = None) -> tuple[str, int]:
    """(state, elapsed seconds) of the run that just ended: sacct, else scontrol when slurmdbd is down."""
    bin_dir = Path(config["slurm"]["bin_dir"])
    try:
        out = _collect(query, config)
        if not out.strip():
            out = commands.run(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ElapsedRaw"], bin_dir=bin_dir).stdout
        line = out.strip().splitlines()[0] if out.strip() else ""
        state, _, elapsed = line.partition("|")
        if state and elapsed.isdigit():
            return state.split()[0], int(elapsed)
    except Exception:  # noqa: BLE001 - fall back on the controller's view
        pass
    job = commands.show_job(job_id, bin_dir=bin_dir)
    return job.get("JobState", "UNKNOWN"), parsers.duration(job.get("RunTime", "")) or 0


def charge_for(state: str, elapsed: int, row: sqlite3.Row, rate: float, config: Config) -> int:
    """What the run pays, by cause: failures of the machine are refunded, a job's own TIMEOUT pays
    its whole hold, everything else (completed, failed, cancelled, requeued) pays the time it ran."""
    flag = REFUND_STATES.get(state)
    if flag and config["ledger"][flag]:
        return 0
    if state == "TIMEOUT" and config["ledger"]["charge_timeout_full"]:
        return int(row["hold"])
    return int(bucket.gpu_tokens(elapsed, float(row["gpus"]), float(row["k"])) * rate)


def epilog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None) -> dict[str, object]:
    """Charge what the run occupied and refund the rest of its hold, exactly once."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = config["ledger"]["cluster"] or env.get("SLURM_CLUSTER_NAME") or "default"
    restart = int(env.get("SLURM_JOB_RESTART_COUNT") or 0)
    state, elapsed = final_state(job_id, config, query)
    with ledger.writer(config) as lg:
        row = lg.ended_run(cluster, job_id, restart, requeued=state == "REQUEUED")
        if row is None:  # the prolog never recorded this run (it failed open): hold now, then settle
            run = run_from_slurm(env, config)
            if run is None:
                return {"event": "epilog", "job": job_id, "skipped": "no GPUs"}
            lg.hold(run, int(bucket.gpu_tokens(run.time_limit, run.gpus, run.k) * lg.tier_rate(run.qos)),
                    user_estimate(env), actor="epilog")  # fmt: skip
            row = lg.ended_run(cluster, job_id, run.restart, requeued=False)
        assert row is not None
        charge = charge_for(state, elapsed, row, lg.tier_rate(row["qos"]), config)
        done = lg.settle(row["job_key"], charge, state, elapsed, actor="epilog")
    if done is None:
        return {"event": "epilog", "job": job_id, "key": row["job_key"], "repeat": True}
    if done.blocked is not None:
        _enforce_later(config, done.account)
    if config["ledger"]["admin_comment"]:
        write_admin_comment(config, job_id, row["estimate"], done, float(row["k"]), state, elapsed)
    usage = Path(env.get("SLURM_JOB_WORK_DIR", "/nonexistent")) / f"yolo-usage-{job_id}.jsonl"
    if state == "COMPLETED" and config["ledger"]["feedback"] and os.access(usage, os.R_OK):
        spawn_detached([sys.executable, "-m", "slurm_yolo", "feedback", "--job", str(job_id), "--partition",
                        str(row["partition"]), "--cluster", cluster, str(usage)])  # fmt: skip
    return {"event": "epilog", "job": job_id, "key": done.key, "state": state, "elapsed": elapsed,
            "charge": done.charge, "refund": done.refund}  # fmt: skip


def write_admin_comment(config: Config, job_id: int, estimate: int | None, done: ledger.Settlement, k: float,
                        state: str, elapsed: int) -> None:  # fmt: skip
    """The accounting summary in the job's AdminComment, so sacct alone can rebuild it (detached:
    from the epilog only sacctmgr can set it, and it takes ~0.3 s)."""
    summary = (f"yolo:est={estimate or ''},hold={done.hold},charge={done.charge},refund={done.refund},"
               f"k={k:.6g},state={state},elapsed={elapsed}")  # fmt: skip
    spawn_detached([f"{config['slurm']['bin_dir']}/sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}",
                    "set", f"AdminComment={summary}"])  # fmt: skip


def _collect(query: subprocess.Popen[str] | None, config: Config) -> str:
    """The output of a query hook_entry started, if it ran the configured Slurm and succeeded."""
    if query is None:
        return ""
    out, _ = query.communicate(timeout=config["slurm"]["timeout_seconds"])
    program = str(query.args[0] if isinstance(query.args, (list, tuple)) else query.args)
    if query.returncode != 0 or not program.startswith(str(config["slurm"]["bin_dir"]).rstrip("/") + "/"):
        return ""
    return out


def main(event: str, query: subprocess.Popen[str] | None = None) -> int:
    """A hook invocation: never a non-zero exit (Slurm would requeue the job forever)."""
    env = dict(os.environ)
    try:
        config = load()
    except Exception as e:  # noqa: BLE001 - a broken config must not requeue every job
        print(f"slurm-yolo {event}: config: {e}", file=sys.stderr)
        return 0
    try:
        record = (prolog if event == "prolog" else epilog)(env, config, query)
        log_event(config, record)
    except Exception as e:  # noqa: BLE001 - never let our failure become Slurm's requeue loop
        log_event(config, {"event": event, "job": env.get("SLURM_JOB_ID"), "alert": f"{type(e).__name__}: {e}"})
        if event == "prolog" and config["ledger"]["prolog_errors"] == "cancel" and env.get("SLURM_JOB_ID"):
            spawn_detached([f"{config['slurm']['bin_dir']}/scancel", env["SLURM_JOB_ID"]])
    return 0



def reconcile(config: Config, min_age_seconds: float = 300) -> list[dict[str, object]]:
    """Settle runs still held after their run ended (an epilog lost to a slurmdbd or controller outage),
    from sacct's record of that very run (matched by submit time). Runs Slurm still shows as running,
    and younger holds, are left alone."""
    bin_dir = Path(config["slurm"]["bin_dir"])
    done = []
    with ledger.writer(config) as lg:
        stale = lg.conn.execute("SELECT * FROM jobs WHERE state = 'held' AND held_at < ?",
                                (time.time() - min_age_seconds,)).fetchall()  # fmt: skip
        for row in stale:
            res = commands.run(["sacct", "-j", str(row["job_id"]), "-X", "-D", "-n", "-P", "-o", "Submit,State,ElapsedRaw"],
                               bin_dir=bin_dir)  # fmt: skip
            runs = [line.split("|") for line in res.stdout.splitlines() if line.count("|") == 2]
            match = next((r for r in runs if r[0] == row["submit_time"]), None)
            if match is None or match[1].split()[0] in ("RUNNING", "PENDING", "SUSPENDED", "COMPLETING"):
                continue
            state, elapsed = match[1].split()[0], int(match[2] or 0)
            charge = charge_for(state, elapsed, row, lg.tier_rate(row["qos"]), config)
            settled = lg.settle(row["job_key"], charge, state, elapsed, actor="reconcile")
            if settled:
                done.append({"key": settled.key, "state": state, "charge": settled.charge, "refund": settled.refund})
                if settled.blocked is not None:
                    _enforce_later(config, settled.account)
    return done
