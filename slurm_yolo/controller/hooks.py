"""PrologSlurmctld / EpilogSlurmctld: hold tokens when a run starts; record its end for the settler,
which charges and refunds exactly once per run.

Orchestration only: the facts come from the Slurm adapter (``slurm.records``: fields slurmctld and
slurmdbd set, never text a user wrote), the amounts from the billing policy (``billing.policy``),
the movements from the ledger. Both hooks run as the SlurmUser with no PATH; a non-zero
PrologSlurmctld exit makes Slurm requeue the job forever, so no hook ever fails a job. A hook that
cannot do its work leaves a trace that gets it done: an incident in the ledger (``alerts`` and the
metrics show it) and a line in ``hooks.log``; ``ledger reconcile`` (cron) then holds and settles
every GPU run sacct knows that the ledger does not, from sacct's own record of that run. A prolog
that cannot record its hold fails closed: the job is cancelled, never run unheld.

An epilog's run is settled only from slurmdbd's final record of it (COMPLETED, TIMEOUT, NODE_FAIL...),
never from a transitional state: the settler (``settler``) keeps its inbox row until sacct has one.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_yolo.controller import settler as settler_mod
from slurm_yolo.controller.settler import Settler, Worker
from slurm_yolo.core import durations
from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import ENV_OVERRIDES, Config, load
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import commands, detached
from slurm_yolo.slurm.records import PAST_A_YEAR, JobRecord, from_sacct, from_squeue
from slurm_yolo.state import ledger
from slurm_yolo.state.eventlog import log_event

if TYPE_CHECKING:
    import subprocess

logger = logging.getLogger(__name__)
SACCT_LAG_SECONDS = 3.0  # how long a hook without hookd waits for sacct to catch up with slurmctld
# The hold of a run whose limit squeue and sacct cannot tell yet (22.05's scontrol prints a limit past
# a year as INVALID): job_submit.lua's MAX_LIMIT_SECONDS, the longest limit it admits for a GPU job.
PAST_A_YEAR_AT_LEAST = durations.YEAR
CANCEL_AFTER = 2.0  # a prolog's scancel waits for slurmctld to see the prolog end (see slurm.detached)


def cluster_of(env: Mapping[str, str]) -> str:
    """The cluster a run is keyed under: the name slurmctld gives its hooks (sacct's Cluster field on
    the other paths), never a setting that could change while jobs run."""
    name = env.get("SLURM_CLUSTER_NAME", "")
    if not name:
        raise SlurmYoloError("no SLURM_CLUSTER_NAME in the hook's environment")
    return name


def _bin_dir(config: Config) -> Path:
    return config.bin_dir


def _own_target(env: Mapping[str, str], job_id: int) -> str:
    """This run's job alone, for scancel: an array task's own id can be the array's (the task that
    keeps the array's record), and ``scancel ARRAY_ID`` would cancel every task of it."""
    return commands.job_target(job_id, env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", ""))


def _cancel_own_job(env: Mapping[str, str], job_id: int, config: Config, settler: Settler | None) -> None:
    """Cancel this run's job alone, once slurmctld has seen the prolog end (``CANCEL_AFTER``): hookd's
    worker does it; a hook in a process of its own must end first, so a detached child waits."""
    target = _own_target(env, job_id)
    if settler is not None and isinstance(settler.followups, Worker):
        settler.followups.cancel_after(target, CANCEL_AFTER)
        return
    child_env = {k: v for k, v in os.environ.items() if k not in ENV_OVERRIDES} | config.env
    detached(["scancel", target], child_env, _bin_dir(config), CANCEL_AFTER)


def prolog(
    env: Mapping[str, str],
    config: Config,
    settler: Settler | None = None,
    query: subprocess.Popen[str] | None = None,
    record: JobRecord | None = None,
) -> dict[str, object]:
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
    with ledger.writer(config, publish=settler is None) as lg:
        found_run = settler_mod.billable_run(lg, record, cluster, config, time.time(), record.restarts)
        if found_run is None:
            why = ledger.exempt(record.partition, record.account, config)
            return {"event": "prolog", "job": job_id, "skipped": f"exempt: {why}" if why else "no GPUs"}
        run, amount = found_run
        held, blocked = lg.hold(run, amount, estimate, actor="prolog")
        left = lg.balance(run.account)
    followups = settler.followups if settler else settler_mod.Followups(config)
    if settler is not None:
        settler.changed()
    if blocked is not None:
        followups.enforce([run.account])
    out: dict[str, object] = {"event": "prolog", "job": job_id, "key": run.key, "hold": amount, "new": held}
    if held and left < 0 and config.ledger.cancel_over_budget:
        # Admitted while the account could cover it, it no longer can (an expiry, an adjustment, a
        # requeue after the tokens went elsewhere): it pays the seconds it ran, and goes no further.
        _cancel_own_job(env, job_id, config, settler)
        out["cancelled"] = f"over budget at start: {run.account} is at {left} after this hold"
    return out


def _limit_from_sacct(job_id: int, submit: int, config: Config) -> int:
    """A time limit past a year, which squeue cannot print: sacct's record of this run has it once
    slurmdbd has the run's start; until then (a prolog must not wait), a year and a day, the least
    it can be. The charge is the time the run takes either way."""
    runs = commands.job_runs([job_id], bin_dir=_bin_dir(config)).get(job_id, [])
    same = [r.time_limit for r in runs if r.submit == submit and r.time_limit]
    return same[-1] if same else PAST_A_YEAR_AT_LEAST


def epilog(
    env: Mapping[str, str], config: Config, settler: Settler | None = None, query: subprocess.Popen[str] | None = None
) -> dict[str, object]:
    """Record the end of a run in the inbox (durably: hookd answers after this), for the settler to
    charge what each ended run of the job used and refund the rest of its hold, exactly once. In a
    hook process of its own (hookd down), settle this job's rows now if sacct has the end within a
    few seconds (other jobs' rows are hookd's or cron's: a burst of hooks would each take them all);
    the row otherwise waits for hookd's settler or cron's ``ledger reconcile``."""
    job_id = int(env["SLURM_JOB_ID"])
    cluster = cluster_of(env)
    estimate = policy.user_estimate(env.get("SPANK_YOLO_TOKENS"), env.get("SLURM_JOB_COMMENT"))
    facts = {
        "summary": beacon.summary_text(env.get("SLURM_JOB_COMMENT")),
        "uid": env.get("SLURM_JOB_UID", ""),
        "estimate": "" if estimate is None else str(estimate),
        "ended": "1" if env.get("SLURM_SCRIPT_CONTEXT") == "epilog_slurmctld" else "",
    }
    with ledger.writer(config, publish=False) as lg:
        row = lg.receive(cluster, job_id, "epilog", facts)
    if settler is not None:
        settler.wake()
        return {"event": "epilog", "job": job_id, "inbox": row}
    deadline = time.monotonic() + SACCT_LAG_SECONDS
    settled: list[dict[str, object]] = []
    lookup = _first_answer(query, config, job_id)
    while True:
        settled += settler_mod.settle_due(
            config, settler_mod.Followups(config), time.time(), lookup, job=(cluster, job_id)
        )
        lookup = None
        with ledger.writer(config, publish=False) as lg:
            due = lg.inbox_row_due(row)
        if due is None:
            return {"event": "epilog", "job": job_id, "settled": settled}
        if due - time.time() > deadline - time.monotonic():
            return {"event": "epilog", "job": job_id, "left": "held: settled once sacct has its end"}
        time.sleep(max(0.0, due - time.time()))


def _first_answer(query: subprocess.Popen[str] | None, config: Config, job_id: int) -> settler_mod.RunsLookup | None:
    """The sacct query hook_entry started, as the settler's first lookup (None: it has no answer)."""
    out = _collect(query, config)
    if not out:
        return None
    runs = [r for r in from_sacct(out) if r.job_id == job_id]
    return lambda _ids: {job_id: runs}


def _collect(query: subprocess.Popen[str] | None, config: Config) -> str:
    """The output of a query hook_entry started, if it ran the configured Slurm and succeeded."""
    if query is None:
        return ""
    out, _ = query.communicate(timeout=config.slurm.timeout_seconds)
    program = str(query.args[0] if isinstance(query.args, (list, tuple)) else query.args)
    if query.returncode != 0 or not program.startswith(str(config.slurm.bin_dir).rstrip("/") + "/"):
        return ""
    return out


def main(
    event: str,
    query: subprocess.Popen[str] | None = None,
    env: Mapping[str, str] | None = None,
    record: JobRecord | None = None,
    config: Config | None = None,
    settler: Settler | None = None,
    started: float | None = None,
) -> bool:
    """A hook invocation (in its own process, or in hookd with the hook's ``env``, hookd's config, the
    prolog's ``record`` and the settler). True when it did its work; a failure is logged and recorded
    as an incident, and the caller still exits 0 (Slurm would requeue the job forever). A prolog that
    could not hold fails closed: its job is cancelled (in hookd, the client's own retry decides).
    ``started``: when the request came in (``time.perf_counter``), for the time logged."""
    started = time.perf_counter() if started is None else started
    env = dict(os.environ) if env is None else env
    try:
        config = config or load(env=env)
    except Exception as e:  # noqa: BLE001 - a broken config must not requeue every job
        logger.error("slurm-yolo %s: config: %s", event, e)
        return False
    try:
        done = prolog(env, config, settler, query, record) if event == "prolog" else epilog(env, config, settler, query)
        log_event(config, {**done, "ms": round((time.perf_counter() - started) * 1000, 1)})  # bench array reads it
        return True
    except Exception as e:  # noqa: BLE001 - never let our failure become Slurm's requeue loop
        error = f"{type(e).__name__}: {e}" + (f" ({e.sqlite_errorname})" if isinstance(e, sqlite3.Error) else "")
        log_event(config, {"event": event, "job": env.get("SLURM_JOB_ID"), "alert": error})
        _record_incident(config, env, event, error)
        if event == "prolog" and settler is None and env.get("SLURM_JOB_ID", "").isdigit():
            _cancel_own_job(env, int(env["SLURM_JOB_ID"]), config, None)
        return False


def _record_incident(config: Config, env: Mapping[str, str], event: str, error: str) -> None:
    """Best effort: when the ledger itself is what failed, hooks.log and reconcile remain."""
    try:
        with ledger.writer(config) as lg:
            lg.record_incident(env.get("SLURM_CLUSTER_NAME", ""), int(env.get("SLURM_JOB_ID") or 0), event, error)
    except Exception:  # noqa: BLE001, S110 - the log line above already says what failed
        pass
