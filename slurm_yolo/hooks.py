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
from .config import ENV_OVERRIDES, Config, load
from .errors import SlurmYoloError
from .ledger import bucket
from .slurm import commands, parsers

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

    RunsLookup = Callable[[int], dict[str, tuple[str, int]] | None]

SACCT_LAG_SECONDS = 3.0
UNFINISHED = {"PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING"}
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


def cluster_of(env: Mapping[str, str], config: Config) -> str:
    """The cluster a run is keyed under: the configured name, else Slurm's."""
    return config["ledger"]["cluster"] or env.get("SLURM_CLUSTER_NAME") or "default"


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
        cluster=cluster_of(env, config),
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
        spawn_detached([sys.executable, "-m", "slurm_yolo", "ledger", "enforce", "--account", account], config)


def spawn_detached(argv: list[str], config: Config) -> None:
    """Start ``argv`` in its own session, not waited for (no inherited stdio), with the config and
    state this hook used (in hookd they come from the hook's environment, not the server's)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ENV_OVERRIDES} | config.env
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True, env=env)  # fmt: skip


def prolog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None,
           job: dict[str, str] | None = None) -> dict[str, object]:  # fmt: skip
    """Hold the most the run can use: time limit x GPUs / k x the QOS tier's rate. ``job``: the
    controller's record when the caller has it (hookd looks up many jobs in one call)."""
    if job is None:
        out = _collect(query, config)
        job = parsers.scontrol_record(out.splitlines()[0]) if out.strip() else None
    run = run_from_slurm(env, config, job)
    if run is None:
        return {"event": "prolog", "job": env.get("SLURM_JOB_ID"), "skipped": "no GPUs"}
    with ledger.writer(config) as lg:
        amount = int(bucket.gpu_tokens(run.time_limit, run.gpus, run.k) * lg.tier_rate(run.qos))
        held, blocked = lg.hold(run, amount, user_estimate(env), actor="prolog")
    if blocked is not None:
        _enforce_later(config, run.account)
    return {"event": "prolog", "job": run.job_id, "key": run.key, "hold": amount, "new": held}


def run_records(job_id: int, config: Config, query: subprocess.Popen[str] | None = None) -> dict[str, tuple[str, int]] | None:
    """slurmdbd's record of each run of the job (``parsers.run_records``); None when sacct fails."""
    try:
        out = _collect(query, config)
        found = parsers.run_records(out) if out.strip() else commands.job_runs([job_id], Path(config["slurm"]["bin_dir"]))
    except SlurmYoloError:
        return None
    return found.get(job_id, {})


def ended_run(lg: ledger.Ledger, env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None,
              runs: RunsLookup | None) -> tuple[sqlite3.Row | None, str, int]:  # fmt: skip
    """The run this epilog ends, with its final state and elapsed seconds.

    It is the newest run still held whose slurmdbd record is final (a requeued run's says REQUEUED,
    while the next one may already be pending or running). slurmctld reports runs to slurmdbd
    asynchronously, so an epilog can find its run still PENDING or RUNNING there: it asks again for
    a few seconds. Without a final record (slurmdbd down or behind) it settles from what it has:
    the run's own record, else the controller's view."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = cluster_of(env, config)
    restart = int(env.get("SLURM_JOB_RESTART_COUNT") or 0)
    bin_dir = Path(config["slurm"]["bin_dir"])
    deadline = time.monotonic() + SACCT_LAG_SECONDS
    controller: dict[str, str] | None = None
    while True:
        records = runs(job_id) if runs else run_records(job_id, config, query)
        query = None
        held = lg.held_runs(cluster, job_id, restart)
        for row in held:
            state, elapsed = (records or {}).get(row["submit_time"], ("", 0))
            if state and state not in UNFINISHED:
                return row, state, elapsed
        if not held or records is None or time.monotonic() >= deadline:
            break
        if controller is None:  # a run that never started (an epilog run by hand) will not catch up
            controller = commands.show_job(job_id, bin_dir=bin_dir)
            if controller.get("JobState") == "PENDING" and held[0]["restart"] == restart:
                break
        time.sleep(0.1)
    run = lg.ended_run(cluster, job_id, restart, requeued=False)
    if run is not None and records and run["submit_time"] in records:
        return (run, *records[run["submit_time"]])
    job = controller or commands.show_job(job_id, bin_dir=bin_dir)
    return run, job.get("JobState", "UNKNOWN"), parsers.duration(job.get("RunTime", "")) or 0


def charge_for(state: str, elapsed: int, row: sqlite3.Row, rate: float, config: Config) -> int:
    """What the run pays, by cause: failures of the machine are refunded, a job's own TIMEOUT pays
    its whole hold, everything else (completed, failed, cancelled, requeued) pays the time it ran."""
    flag = REFUND_STATES.get(state)
    if flag and config["ledger"][flag]:
        return 0
    if state == "TIMEOUT" and config["ledger"]["charge_timeout_full"]:
        return int(row["hold"])
    return int(bucket.gpu_tokens(elapsed, float(row["gpus"]), float(row["k"])) * rate)


def epilog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None,
           runs: RunsLookup | None = None) -> dict[str, object]:  # fmt: skip
    """Charge what the run occupied and refund the rest of its hold, exactly once. ``runs``: looks
    up slurmdbd's records of a job, in place of a sacct call of its own (hookd merges many)."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = cluster_of(env, config)
    with ledger.writer(config) as lg:
        row, state, elapsed = ended_run(lg, env, config, query, runs)
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
                        str(row["partition"]), "--cluster", cluster, str(usage)], config)  # fmt: skip
    return {"event": "epilog", "job": job_id, "key": done.key, "state": state, "elapsed": elapsed,
            "charge": done.charge, "refund": done.refund}  # fmt: skip


def write_admin_comment(config: Config, job_id: int, estimate: int | None, done: ledger.Settlement, k: float,
                        state: str, elapsed: int) -> None:  # fmt: skip
    """The accounting summary in the job's AdminComment, so sacct alone can rebuild it (detached:
    from the epilog only sacctmgr can set it, and it takes ~0.3 s)."""
    summary = (f"yolo:est={estimate or ''},hold={done.hold},charge={done.charge},refund={done.refund},"
               f"k={k:.6g},state={state},elapsed={elapsed}")  # fmt: skip
    spawn_detached([f"{config['slurm']['bin_dir']}/sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}",
                    "set", f"AdminComment={summary}"], config)  # fmt: skip


def _collect(query: subprocess.Popen[str] | None, config: Config) -> str:
    """The output of a query hook_entry started, if it ran the configured Slurm and succeeded."""
    if query is None:
        return ""
    out, _ = query.communicate(timeout=config["slurm"]["timeout_seconds"])
    program = str(query.args[0] if isinstance(query.args, (list, tuple)) else query.args)
    if query.returncode != 0 or not program.startswith(str(config["slurm"]["bin_dir"]).rstrip("/") + "/"):
        return ""
    return out


def main(event: str, query: subprocess.Popen[str] | None = None, env: Mapping[str, str] | None = None,
         job: dict[str, str] | None = None, config: Config | None = None, runs: RunsLookup | None = None) -> int:  # fmt: skip
    """A hook invocation (in its own process, or in hookd with the hook's ``env``, the config, the
    prolog's ``job`` and the epilog's ``runs``): never a non-zero exit (Slurm would requeue the job
    forever)."""
    env = dict(os.environ) if env is None else env
    try:
        config = config or load(env=env)
    except Exception as e:  # noqa: BLE001 - a broken config must not requeue every job
        print(f"slurm-yolo {event}: config: {e}", file=sys.stderr)
        return 0
    try:
        record = prolog(env, config, query, job) if event == "prolog" else epilog(env, config, query, runs)
        log_event(config, record)
    except Exception as e:  # noqa: BLE001 - never let our failure become Slurm's requeue loop
        log_event(config, {"event": event, "job": env.get("SLURM_JOB_ID"), "alert": f"{type(e).__name__}: {e}"})
        if event == "prolog" and config["ledger"]["prolog_errors"] == "cancel" and env.get("SLURM_JOB_ID"):
            spawn_detached([f"{config['slurm']['bin_dir']}/scancel", env["SLURM_JOB_ID"]], config)
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
        found = commands.job_runs(sorted({row["job_id"] for row in stale}), bin_dir=bin_dir) if stale else {}
        for row in stale:
            state, elapsed = found.get(row["job_id"], {}).get(row["submit_time"], ("", 0))
            if not state or state in UNFINISHED:
                continue
            charge = charge_for(state, elapsed, row, lg.tier_rate(row["qos"]), config)
            settled = lg.settle(row["job_key"], charge, state, elapsed, actor="reconcile")
            if settled:
                done.append({"key": settled.key, "state": state, "charge": settled.charge, "refund": settled.refund})
                if settled.blocked is not None:
                    _enforce_later(config, settled.account)
    return done
