"""One job, as ``seff`` and Princeton's ``jobstats`` show it: each run's time against its limit and
the prediction, what the ledger held, charged and refunded, its GPUs' utilisation and memory (the
usage records, else Slurm's own accounting where the site gathers it), and a line of advice where the
numbers call for it. Whose job it is decides who may see it: Slurm's PrivateData rule for jobs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from slurm_yolo.admin import report
from slurm_yolo.admin.efficiency import thresholds
from slurm_yolo.admin.report.output import fmt_duration
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError, UsageError
from slurm_yolo.parse import joblog
from slurm_yolo.parse.records import USAGE_NAME
from slurm_yolo.slurm import commands, visibility
from slurm_yolo.state import cost, ledger

SHORT_USE = 0.25  # a completed run that used less of its limit than this is told so
MIN_LIMIT_S = 60  # Slurm's least time limit (a minute): no shorter one to advise
UNDONE = frozenset({"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "SUSPENDED", "COMPLETED"})  # nothing to explain
LOG_FIELDS = ["JobIDRaw", "JobName", "ExitCode", "WorkDir", "StdOut"]  # StdOut: sacct of 23.02 on, not 22.05's


def may_see(v: visibility.Viewer, user: str, account: str) -> bool:
    """Slurm's rule for a job: its owner, an admin, its account's coordinators, or anyone when
    PrivateData hides no jobs."""
    return (
        visibility.is_admin(v)
        or user == v.user
        or account in v.coordinated
        or not (v.private_data & visibility.JOBS_PRIVATE)
    )


def summaries(config: Config, job_ids: list[int], v: visibility.Viewer) -> list[dict[str, Any]]:
    """Each job's summary (``summary``), in the order asked; a job sacct has not, or ``v`` may not
    see, is an error naming it."""
    f = report.Filters(jobs=tuple(job_ids))
    runs = report.jobs(config, f)
    eff = report.efficiency(runs, config, slurm_gpus=report.fetch_step_gpus(config, f)) if len(runs) else runs
    out = []
    for job_id in job_ids:
        mine = runs[runs["job_id"] == job_id].sort_values("submit", kind="stable")
        if mine.empty:
            raise UsageError(f"job {job_id}: sacct has no record of it (on this cluster)")
        last = mine.iloc[-1]
        if not may_see(v, str(last["User"]), str(last["Account"])):
            raise UsageError(
                f"job {job_id} is not one you may see ({v.user}: Slurm's PrivateData hides other users' jobs)"
            )
        gpu = eff[eff["job_id"] == job_id] if len(eff) else eff
        out.append(summary(mine, gpu.iloc[0].to_dict() if len(gpu) else None, config))
    explain(config, out)
    return out


def explain(config: Config, views: list[dict[str, Any]]) -> None:
    """Add to each summary of a job that did not complete why (its log's failing line, else Slurm's
    reason) and the command that resumes it (``joblog.ending``), its files read as its user could."""
    ended = {s["job_id"]: s for s in views if s["state"] not in UNDONE}
    facts = _log_facts(config, list(ended))
    for job_id, s in ended.items():
        name, exit_code, workdir, pattern = facts.get(job_id, ("", "", "", ""))
        guess = pattern or ("%x-%j.out" if s["predicted_s"] else "slurm-%j.out")  # yolo-sbatch's, else Slurm's default
        log = joblog.log_path(guess, workdir, job_id, name, s["user"])
        usage = Path(workdir) / USAGE_NAME.format(job=job_id) if workdir.startswith("/") else None
        end = joblog.ending(
            s["user"],
            s["state"],
            exit_code,
            log,
            usage,
            (s["partition"], s["account"]),
            config.job.signal_seconds,
            config.estimate.buffer,
        )
        s["why"], s["resume"] = end.why, end.resume
        s["saved_epoch"], s["epochs"] = (end.saved.epoch, end.saved.epochs) if end.saved else (None, None)
        s["all_trained"] = joblog.all_trained(end.saved)
        s["advice"] = advice(s, thresholds(config).low_util_pct, config, end.trained)


def _log_facts(config: Config, job_ids: list[int]) -> dict[int, tuple[str, str, str, str]]:
    """Each job's name, exit code, work dir and log (``--output``) as its last run has them: from sacct,
    whose 22.05 has no StdOut (then the controller's, while it still knows the job)."""
    if not job_ids:
        return {}
    select, bin_dir = ["-a", "-j", ",".join(map(str, job_ids))], config.bin_dir
    rows: list[list[str]] = []
    for fields in (LOG_FIELDS, LOG_FIELDS[:-1]):
        try:
            rows = [[*r, ""][: len(LOG_FIELDS)] for r in commands.sacct_rows(select, fields, bin_dir=bin_dir)]
            break
        except SlurmError:  # 22.05: no StdOut; slurmdbd down: nothing (the summaries stand without it)
            continue
    out = {int(r[0]): (r[1], r[2], r[3], r[4]) for r in rows if r[0].isdigit()}  # the last run's, as sacct lists them
    for job_id, (name, code, work, pattern) in out.items():
        if not pattern:
            try:
                out[job_id] = (name, code, work, commands.show_job(job_id, bin_dir=bin_dir).get("StdOut", ""))
            except SlurmError:
                continue
    return out


def _num(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value) else float(value)


def summary(runs: pd.DataFrame, gpu: dict[str, Any] | None, config: Config) -> dict[str, Any]:
    """What sacct and the ledger say of one job's runs (``report.jobs`` rows, oldest first), its GPU
    figures (a ``report.efficiency`` row, or None) and the advice they call for (pure)."""
    last = runs.iloc[-1]
    each: list[dict[str, Any]] = [
        {
            "run": i + 1,
            "state": str(r["state"]),
            "elapsed_s": int(r["elapsed"]),
            "limit_s": _num(r["limit_s"]),
            "hold": _num(r["hold"]),
            "charge": _num(r["charge"]),
            "refund": _num(r["refund"]),
        }
        for i, (_, r) in enumerate(runs.iterrows())
    ]
    total = {k: sum(float(r[k] or 0) for r in each) for k in ("hold", "charge", "refund")}
    out: dict[str, Any] = {
        "job_id": int(last["job_id"]),
        "user": str(last["User"]),
        "account": str(last["Account"]),
        "partition": str(last["Partition"]),
        "qos": str(last["QOS"]),
        "state": str(last["state"]),
        "gpus": float(last["gpus"]),
        "runs": each,
        "elapsed_s": int(runs["elapsed"].sum()),
        "gpu_hours": float(runs["gpu_hours"].sum()),
        "money": float(runs["money"].sum()),
        "predicted_s": _num(last["pred_s"]),
        **total,
        "util_pct": _num(gpu.get("util_pct")) if gpu else None,
        "mem_gb": _num(gpu.get("mem_gb")) if gpu else None,
        "mem_total_gb": _num(gpu.get("mem_total_gb")) if gpu else None,
        "fits_shard": bool(gpu.get("fits_shard")) if gpu and gpu.get("fits_shard") is not None else None,
        "exempt": ledger.exempt(str(last["Partition"]), str(last["Account"]), config),  # '': billed
    }
    out["advice"] = advice(out, thresholds(config).low_util_pct, config)
    return out


def advice(s: dict[str, Any], low_util_pct: float, config: Config, trained: bool = False) -> list[str]:
    """The lines the numbers call for: a GPU left idle, a limit hit (and how the run goes on from its
    checkpoint, ``explain``'s ``resume``; ``trained``: it kept usage records) or far from reached, a
    failure and why."""
    lines = []
    last = s["runs"][-1]
    util = s["util_pct"]
    if util is not None and util < low_util_pct and s["gpus"] > 0:
        shards = config.partitions[s["partition"]].shards_per_gpu if s["partition"] in config.partitions else 0
        share = (
            f": it would fit a shard (1/{shards} of a GPU), at 1/{shards} of the cost"
            if s["fits_shard"] and shards
            else ""
        )
        lines.append(f"its GPUs were busy {util:.0f}% of the time{share}")
    resume = s.get("resume")
    if resume:
        lines.append(f"it saved epoch {s['saved_epoch']} of {s['epochs']}; to train the rest: {resume}")
    if s.get("all_trained"):
        lines.append(str(s["all_trained"]))
    elif last["state"] == "TIMEOUT" and not resume:
        lines.append(
            "it hit its time limit before saving an epoch: run it again with a longer one (-t)"
            if trained
            else "it hit its time limit: a longer one (-t) lets it finish"
        )
    elif (
        last["state"] == "COMPLETED"
        and last["limit_s"]
        and last["limit_s"] > MIN_LIMIT_S
        and last["elapsed_s"] < SHORT_USE * last["limit_s"]
    ):
        used = 100 * last["elapsed_s"] / last["limit_s"]
        why = "may start sooner" if s["exempt"] else "holds fewer tokens and may start sooner"
        lines.append(f"it used {used:.0f}% of its time limit: a shorter limit {why}")
    return lines


def text(s: dict[str, Any], currency: str) -> str:
    """A summary as ``seff`` prints one: a line a fact."""

    def tok(v: float | None) -> str:
        return "-" if v is None else fmt_tokens(v)

    lines = [
        f"Job {s['job_id']}: {s['state']}",
        f"  user {s['user']}, account {s['account']}, partition {s['partition']}, QOS {s['qos']}, {s['gpus']:g} GPU(s)",
    ]
    for r in s["runs"]:
        limit = r["limit_s"]
        of = f" of {fmt_duration(limit)} ({100 * r['elapsed_s'] / limit:.0f}%)" if limit else ""
        lines.append(
            f"  run {r['run']}: {r['state']}, ran {fmt_duration(r['elapsed_s'])}{of};"
            f" held {tok(r['hold'])}, charged {tok(r['charge'])}, refunded {tok(r['refund'])}"
        )
    if s["predicted_s"]:
        lines.append(f"  predicted {fmt_duration(s['predicted_s'])}, ran {fmt_duration(s['elapsed_s'])}")
    money = f", {cost.fmt_money(s['money'], currency)}" if currency else ""
    used = f"{_hours(s['gpu_hours'])} GPU-hours{money}"
    if s["exempt"] and not s["hold"]:
        lines.append(f"  not billed: {s['exempt']} is exempt (the site's ledger.exempt_*); {used}")
    else:
        lines.append(f"  charged {tok(s['charge'])} in all ({used})")
    if s["util_pct"] is not None or s["mem_gb"] is not None:
        util = "-" if s["util_pct"] is None else f"{s['util_pct']:.0f}%"
        mem = "-" if s["mem_gb"] is None else f"{s['mem_gb']:.1f} GB"
        of_mem = f" of {s['mem_total_gb']:.0f} GB" if s["mem_total_gb"] else ""
        lines.append(f"  GPU utilisation {util}, memory {mem}{of_mem}")
    else:
        lines.append("  GPU figures: none (no usage records with them, and no gres/gpuutil from sacct)")
    if s.get("why"):
        lines.append(f"  why: {s['why']}")
    lines += [f"  advice: {a}" for a in s["advice"]]
    return "\n".join(lines) + "\n"


def _hours(hours: float) -> str:
    """GPU-hours to three significant digits, as the report shows them (0.000278, 0.0123, 1.25, 312)."""
    if hours == 0 or abs(hours) >= 100:
        return f"{hours:,.0f}"
    return f"{hours:.{max(0, 2 - math.floor(math.log10(abs(hours))))}f}"
