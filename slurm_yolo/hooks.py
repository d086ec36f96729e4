"""PrologSlurmctld / EpilogSlurmctld and reconcile: hold tokens when a run starts, charge and refund
when it ends, exactly once per run.

Orchestration only: the facts come from the Slurm adapter (``slurm.records``: fields slurmctld and
slurmdbd set, never text a user wrote), the amounts from the billing policy (``ledger.policy``),
the movements from the ledger. Both hooks run as the SlurmUser with no PATH; a non-zero
PrologSlurmctld exit makes Slurm requeue the job forever, so no hook ever fails a job. A hook that
cannot do its work leaves a trace that gets it done: an incident in the ledger (``alerts`` and the
metrics show it) and a line in ``hooks.log``; ``reconcile`` (cron) then holds and settles every GPU
run sacct knows that the ledger does not, from sacct's own record of that run.

An epilog settles a run only from slurmdbd's final record of it (COMPLETED, TIMEOUT, NODE_FAIL...),
never from a transitional state: when sacct has none yet (slurmdbd down or behind), the run stays
held and ``reconcile`` settles it once sacct answers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import books, ledger
from .config import ENV_OVERRIDES, Config, load
from .errors import SlurmYoloError
from .ledger import policy
from .parse.records import USAGE_NAME
from .slurm import commands, detached
from .slurm.records import PAST_A_YEAR, JobRecord, from_sacct, from_squeue

if TYPE_CHECKING:
    import sqlite3
    import subprocess
    from collections.abc import Callable

    RunsLookup = Callable[[int], list[JobRecord] | None]

SACCT_LAG_SECONDS = 3.0  # how long a hook waits for sacct to catch up with slurmctld
PAST_A_YEAR_AT_LEAST = 366 * 86400  # the hold of a run whose limit squeue and sacct cannot tell yet
LATE_SACCT_SECONDS = 900  # then a detached child goes on asking this long (cron's reconcile after that)
CANCEL_AFTER = 2.0  # a prolog's scancel waits for slurmctld to see the prolog end (see slurm.detached)


def log_event(config: Config, record: dict[str, object]) -> None:
    """Append one JSON line to hooks.log (stderr if the state dir is not writable)."""
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        with open(config.state_dir / "hooks.log", "a") as f:
            f.write(json.dumps({"at": time.time(), **record}) + "\n")
    except OSError:
        print(json.dumps(record), file=sys.stderr)


def cluster_of(env: Mapping[str, str]) -> str:
    """The cluster a run is keyed under: the name slurmctld gives its hooks (sacct's Cluster field on
    the other paths), never a setting that could change while jobs run."""
    name = env.get("SLURM_CLUSTER_NAME", "")
    if not name:
        raise SlurmYoloError("no SLURM_CLUSTER_NAME in the hook's environment")
    return name


def _bin_dir(config: Config) -> Path:
    return Path(config["slurm"]["bin_dir"])


def _rules(config: Config) -> policy.Rules:
    return policy.Rules(*(bool(config["ledger"][f]) for f in policy.Rules._fields))


def billable_run(lg: ledger.Ledger, record: JobRecord, cluster: str, config: Config, at: float,
                 restart: int) -> tuple[ledger.Run, int] | None:  # fmt: skip
    """The run and what it holds: its time limit (or the configured cap) x its GPUs x the partition's
    price at ``at`` x its QOS tier's rate. None for a run without GPUs (not metered)."""
    share = policy.gpus(record.tres, config.partition(record.partition).shards_per_gpu)
    if not share:
        return None
    seconds = ledger.limit_seconds(record.time_limit, config)
    price = lg.price_at(record.partition, at, int(config["ledger"]["default_price"]))
    rate = lg.tier_rate(record.qos)
    run = ledger.Run(cluster, record.job_id, record.submit, restart, record.account, record.user, record.partition,
                     record.qos, share, record.time_limit, seconds, price, rate)  # fmt: skip
    return run, policy.tokens(seconds, share, price, rate)


def _enforce_later(config: Config, account: str) -> None:
    """Sync the account's Slurm limit with the ledger in a detached child (sacctmgr takes ~0.3 s and
    the hook must not wait; the child reads the ledger afresh, so racing children agree)."""
    if config["ledger"]["enforce"]:
        spawn_python(["ledger", "enforce", "--account", account], config)


def _child_env(config: Config) -> dict[str, str]:
    """The environment of a detached child: the config and state this hook used (in hookd they come
    from the hook's environment, not the server's)."""
    return {k: v for k, v in os.environ.items() if k not in ENV_OVERRIDES} | config.env


def _own_target(env: Mapping[str, str], job_id: int) -> str:
    """This run's job alone, for scancel: an array task's own id can be the array's (the task that
    keeps the array's record), and ``scancel ARRAY_ID`` would cancel every task of it."""
    return commands.job_target(job_id, env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", ""))


def _cancel_own_job(env: Mapping[str, str], job_id: int, config: Config) -> None:
    """Cancel this run's job alone, once slurmctld has seen the prolog end (``CANCEL_AFTER``)."""
    detached(["scancel", _own_target(env, job_id)], _child_env(config), _bin_dir(config), CANCEL_AFTER)


def spawn_python(args: list[str], config: Config) -> None:
    """``slurm-yolo ARGS`` in a detached child."""
    detached([sys.executable, "-m", "slurm_yolo", *args], _child_env(config))


def prolog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None,
           record: JobRecord | None = None) -> dict[str, object]:  # fmt: skip
    """Hold the most the run can cost. ``record``: the controller's record of the job when the caller
    has it (hookd looks up many jobs in one call); else the query hook_entry started, else a lookup."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = cluster_of(env)
    if record is None:
        found = {r.job_id: r for r in from_squeue(_collect(query, config))}
        record = found.get(job_id) or commands.current_runs([job_id], bin_dir=_bin_dir(config)).get(job_id)
    if record is None:
        raise SlurmYoloError(f"job {job_id}: the controller printed no complete record of it")
    if record.time_limit == PAST_A_YEAR:
        record = record._replace(time_limit=_limit_from_sacct(job_id, record.submit, config))
    estimate = policy.user_estimate(env.get("SPANK_YOLO_TOKENS"), env.get("SLURM_JOB_COMMENT"))
    with ledger.writer(config) as lg:
        found_run = billable_run(lg, record, cluster, config, time.time(), record.restarts)
        if found_run is None:
            return {"event": "prolog", "job": job_id, "skipped": "no GPUs"}
        run, amount = found_run
        held, blocked = lg.hold(run, amount, estimate, actor="prolog")
        left = lg.balance(run.account)
    if blocked is not None:
        _enforce_later(config, run.account)
    out: dict[str, object] = {"event": "prolog", "job": job_id, "key": run.key, "hold": amount, "new": held}
    if held and left < 0 and config["ledger"]["cancel_over_budget"]:
        # Admitted while the account could cover it, it no longer can (an expiry, an adjustment, a
        # requeue after the tokens went elsewhere): it pays the seconds it ran, and goes no further.
        _cancel_own_job(env, job_id, config)
        out["cancelled"] = f"over budget at start: {run.account} is at {left} after this hold"
    return out


def _limit_from_sacct(job_id: int, submit: int, config: Config) -> int:
    """A time limit past a year, which squeue cannot print: sacct's record of this run has it once
    slurmdbd has the run's start; until then (a prolog must not wait), a year and a day, the least
    it can be. The charge is the time the run takes either way."""
    runs = commands.job_runs([job_id], bin_dir=_bin_dir(config)).get(job_id, [])
    same = [r.time_limit for r in runs if r.submit == submit and r.time_limit]
    return same[-1] if same else PAST_A_YEAR_AT_LEAST


def settle_runs(lg: ledger.Ledger, runs: list[JobRecord], config: Config, actor: str, cluster: str = "",
                estimate: int | None = None) -> list[tuple[JobRecord, sqlite3.Row, ledger.Settlement]]:  # fmt: skip
    """Settle every run in ``runs`` (sacct's records of one job, oldest first) that has ended and is
    not settled yet; a run that was never held (its prolog failed) is held first, at the price in
    effect when it started. Runs still going on are left alone, and so are runs that never started
    and hold nothing."""
    done = []
    for restart, rec in enumerate(runs):
        if not rec.final:
            continue
        key = ledger.run_key(rec.cluster or cluster, rec.job_id, rec.submit)
        row = lg.run(key)
        if row is None:
            if not rec.start:
                continue
            found = billable_run(lg, rec, rec.cluster or cluster, config, rec.start, restart)
            if found is None:
                continue
            lg.hold(found[0], found[1], estimate, actor=actor)
            row = lg.run(key)
        if row is None or row["state"] != "held":
            continue
        limit = ledger.limit_seconds(rec.time_limit, config)  # the limit at the end: a TIMEOUT pays it at least
        amount = policy.charge(rec.state, rec.elapsed, limit, ledger.run_share(row), row["price"], row["rate_ppm"],
                               _rules(config))  # fmt: skip
        settled = lg.settle(key, amount, rec.state, rec.elapsed, actor=actor)
        if settled is not None:
            done.append((rec, row, settled))
    return done


def _unfinished(lg: ledger.Ledger, runs: list[JobRecord], cluster: str, job_id: int, ended: bool) -> bool:
    """Whether sacct has yet to report the end of a run of this job that started (slurmctld tells
    slurmdbd asynchronously: an epilog can be ahead of it, even of the run's start). ``ended``: the
    caller knows a run just ended (slurmctld's own epilog), so sacct is behind until its newest
    record is final. Otherwise a held run sacct does not know yet counts, and one it shows never
    started (an epilog run by hand on a pending job) does not."""
    if ended and not (runs and runs[-1].final):
        return True
    by_key = {ledger.run_key(r.cluster or cluster, r.job_id, r.submit): r for r in runs}
    for row in lg.held_runs(cluster, job_id):
        rec = by_key.get(row["job_key"])
        if rec is None or (rec.start and not rec.final):
            return True
    return any(not r.final and r.start and r.tres for r in runs)


def epilog(env: Mapping[str, str], config: Config, query: subprocess.Popen[str] | None = None,
           runs: RunsLookup | None = None) -> dict[str, object]:  # fmt: skip
    """Charge what each ended run of the job used and refund the rest of its hold, exactly once.
    ``runs``: looks up slurmdbd's records of a job in place of a sacct call of its own (hookd merges
    many). Without a final record within a few seconds, the run stays held for ``reconcile``."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = cluster_of(env)
    estimate = policy.user_estimate(env.get("SPANK_YOLO_TOKENS"), env.get("SLURM_JOB_COMMENT"))
    ended = env.get("SLURM_SCRIPT_CONTEXT") == "epilog_slurmctld"  # slurmctld's: a run of the job just ended
    done, waiting = settle_job(config, job_id, cluster, SACCT_LAG_SECONDS, "epilog", estimate, query, runs, ended)
    for rec, row, settled in done:
        after_settlement(config, rec, row, settled, env)
    if waiting:  # sacct is behind (or down): a detached child keeps asking, then cron's reconcile
        follow = ["--work-dir", env.get("SLURM_JOB_WORK_DIR", ""), "--uid", env.get("SLURM_JOB_UID", "")]
        spawn_python(["ledger", "reconcile", "--job", str(job_id), "--cluster", cluster, "--wait", str(LATE_SACCT_SECONDS),
                      *follow], config)  # fmt: skip
    if not done:
        return {
            "event": "epilog",
            "job": job_id,
            "left": "held: settled once sacct has its end" if waiting else "nothing held",
        }
    return {"event": "epilog", "job": job_id, "settled": [
        {"key": s.key, "state": rec.state, "elapsed": rec.elapsed, "charge": s.charge, "refund": s.refund}
        for rec, _, s in done]}  # fmt: skip


def settle_job(config: Config, job_id: int, cluster: str, wait: float, actor: str, estimate: int | None = None,
               query: subprocess.Popen[str] | None = None, runs: RunsLookup | None = None, ended: bool = False,
               ) -> tuple[list[tuple[JobRecord, sqlite3.Row, ledger.Settlement]], bool]:  # fmt: skip
    """Settle the job's ended runs from sacct, asking again for up to ``wait`` seconds while a run it
    holds (or one that started) has no final record there yet; what was settled, and whether one
    is still waiting for sacct."""
    deadline = time.monotonic() + wait
    pause = 0.1
    while True:
        found = _job_runs(job_id, config, query, runs)
        query = None
        if found is None:  # sacct did not answer at all
            waiting = True
        else:
            with ledger.writer(config) as lg:
                done = settle_runs(lg, found, config, actor, cluster, estimate)
                waiting = not done and _unfinished(lg, found, cluster, job_id, ended)
            if done or not waiting:
                return done, False
        if time.monotonic() + pause >= deadline:
            return [], waiting
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def _job_runs(job_id: int, config: Config, query: subprocess.Popen[str] | None,
              runs: RunsLookup | None) -> list[JobRecord] | None:  # fmt: skip
    """sacct's records of the job's runs; None when sacct cannot be asked."""
    if runs is not None:
        found = runs(job_id)
        if found is not None:
            return found
    out = _collect(query, config)
    if out:
        return [r for r in from_sacct(out) if r.job_id == job_id]
    try:
        return commands.job_runs([job_id], bin_dir=_bin_dir(config)).get(job_id, [])
    except SlurmYoloError:
        return None


def after_settlement(config: Config, rec: JobRecord, row: sqlite3.Row, done: ledger.Settlement,
                     env: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """What follows a settlement, detached: the account's Slurm limit, the AdminComments queued, and
    (for a completed run whose hook knows the job's work dir and user) the time model's feedback."""
    if done.blocked is not None:
        _enforce_later(config, done.account)
    if config["ledger"]["admin_comment"]:  # queued with the settlement; written (and retried) by a child, then cron
        spawn_python(["ledger", "comments"], config)
    env = env or {}
    work_dir, uid = env.get("SLURM_JOB_WORK_DIR", ""), env.get("SLURM_JOB_UID", "")
    if rec.state == "COMPLETED" and config["ledger"]["feedback"] and work_dir.startswith("/") and uid.isdigit():
        usage = Path(work_dir) / USAGE_NAME.format(job=rec.job_id)
        spawn_python(["feedback", "--job", str(rec.job_id), "--partition", rec.partition, "--cluster",
                      rec.cluster or cluster_of(env), "--uid", uid, "--elapsed", str(rec.elapsed), str(usage)],
                     config)  # fmt: skip


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
         record: JobRecord | None = None, config: Config | None = None, runs: RunsLookup | None = None) -> bool:  # fmt: skip
    """A hook invocation (in its own process, or in hookd with the hook's ``env``, the config, the
    prolog's ``record`` and the epilog's ``runs``). True when it did its work; a failure is logged and
    recorded as an incident, and the caller still exits 0 (Slurm would requeue the job forever)."""
    env = dict(os.environ) if env is None else env
    try:
        config = config or load(env=env)
    except Exception as e:  # noqa: BLE001 - a broken config must not requeue every job
        print(f"slurm-yolo {event}: config: {e}", file=sys.stderr)
        return False
    try:
        log_event(config, prolog(env, config, query, record) if event == "prolog" else epilog(env, config, query, runs))
        return True
    except Exception as e:  # noqa: BLE001 - never let our failure become Slurm's requeue loop
        error = f"{type(e).__name__}: {e}"
        log_event(config, {"event": event, "job": env.get("SLURM_JOB_ID"), "alert": error})
        _record_incident(config, env, event, error)
        if (
            event == "prolog"
            and config["ledger"]["prolog_errors"] == "cancel"
            and env.get("SLURM_JOB_ID", "").isdigit()
        ):
            _cancel_own_job(env, int(env["SLURM_JOB_ID"]), config)
        return False


def _record_incident(config: Config, env: Mapping[str, str], event: str, error: str) -> None:
    """Best effort: when the ledger itself is what failed, hooks.log and reconcile remain."""
    try:
        with ledger.writer(config) as lg:
            lg.record_incident(env.get("SLURM_CLUSTER_NAME", ""), int(env.get("SLURM_JOB_ID") or 0), event, error)
    except Exception:  # noqa: BLE001, S110 - the log line above already says what failed
        pass


def reconcile_job(config: Config, job_id: int, cluster: str, wait: float, work_dir: str = "",
                  uid: str = "") -> list[dict[str, object]]:  # fmt: skip
    """Settle one job's ended runs once sacct has them (what an epilog left waiting); ``work_dir`` and
    ``uid``, the epilog's, let the time model's feedback follow as it would have."""
    done, waiting = settle_job(config, job_id, cluster, wait, "reconcile", ended=True)
    env = {"SLURM_JOB_WORK_DIR": work_dir, "SLURM_JOB_UID": uid, "SLURM_CLUSTER_NAME": cluster}
    if waiting:  # still no final record that reads: an admin should look (alerts show it)
        with ledger.writer(config) as lg:
            lg.record_incident(cluster, job_id, "epilog", f"no readable final sacct record after {wait:.0f} s")
    for rec, row, settled in done:
        after_settlement(config, rec, row, settled, env)
    return [{"key": s.key, "state": rec.state, "charge": s.charge, "refund": s.refund} for rec, _, s in done]


def reconcile(
    config: Config, window_days: float | None = None, min_age_seconds: float = 0.0
) -> list[dict[str, object]]:
    """What the hooks missed, from sacct: settle every ended GPU run of the last ``window_days``
    (``ledger.reconcile_days``) that the ledger has not settled, holding first those never held, and
    those of older holds still open; hold the running GPU runs that no prolog held. Runs held less
    than ``min_age_seconds`` ago are left to their epilog."""
    bin_dir = _bin_dir(config)
    now = time.time()
    window = config["ledger"]["reconcile_days"] if window_days is None else window_days
    by_job: dict[int, list[JobRecord]] = {}
    for rec in commands.runs_since(now - window * 86400, bin_dir=bin_dir):
        by_job.setdefault(rec.job_id, []).append(rec)
    reader = ledger.reader(config)
    if reader is not None:
        with reader:
            older = {row["job_id"] for row in reader.stale_holds(now)} - set(by_job)
        if older:
            by_job.update(commands.job_runs(sorted(older), bin_dir=bin_dir))
    out: list[dict[str, object]] = []
    settled = []
    with ledger.writer(config) as lg:
        for job_id in sorted(by_job):
            runs = sorted(by_job[job_id], key=lambda r: r.submit)
            if not runs:  # a hold on a job sacct has no record of: nothing to settle it from
                continue
            fresh = {
                row["job_key"]
                for row in lg.held_runs(runs[0].cluster, job_id)
                if row["held_at"] > now - min_age_seconds
            }
            runs = [r for r in runs if ledger.run_key(r.cluster, r.job_id, r.submit) not in fresh]
            settled += settle_runs(lg, runs, config, "reconcile")
            out += _hold_running(lg, runs, config)
    for rec, row, done in settled:
        after_settlement(config, rec, row, done)
        out.append({"key": done.key, "state": rec.state, "charge": done.charge, "refund": done.refund})
    books.write_comments(config)  # those the hooks' children could not write (slurmdbd was down)
    return out


def _hold_running(lg: ledger.Ledger, runs: list[JobRecord], config: Config) -> list[dict[str, object]]:
    """Hold the job's running GPU run if no prolog did (a failed prolog must not leave it free)."""
    out: list[dict[str, object]] = []
    for restart, rec in enumerate(runs):
        if rec.state != "RUNNING" or not rec.start or lg.run(ledger.run_key(rec.cluster, rec.job_id, rec.submit)):
            continue
        found = billable_run(lg, rec, rec.cluster, config, rec.start, restart)
        if found is not None and lg.hold(found[0], found[1], None, actor="reconcile")[0]:
            out.append({"key": found[0].key, "state": "RUNNING", "hold": found[1]})
    return out
