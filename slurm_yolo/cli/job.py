"""Job-side and monitoring commands: parse, feedback, watch, jobs, watchdog."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import click

from slurm_yolo.cli import echo_json, library_errors, load_config
from slurm_yolo.cli.follow import follow
from slurm_yolo.controller import feedback as feedback_mod
from slurm_yolo.controller import watchdog
from slurm_yolo.core import durations
from slurm_yolo.parse import beacon, parse_path
from slurm_yolo.state.eventlog import log_event


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@library_errors
def parse(path: Path, as_json: bool) -> None:
    """Throughput per epoch from usage records, a results.csv, a stdout log, or a folder of them."""
    result = parse_path(path)
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(
        f"source: {result.source} ({result.path}); epochs {result.epochs_completed}/{result.epochs_total or '?'}"
        + (" [partial]" if result.partial else "")
    )
    for e in result.per_epoch:
        parts = [f"epoch {e.epoch}"]
        if e.seconds is not None:
            parts.append(f"{e.seconds:.2f} s")
        if e.images_per_s:
            parts.append(f"{e.images_per_s:.1f} img/s")
        if e.mpx_per_s:
            parts.append(f"{e.mpx_per_s:.3f} Mpx/s")
        if e.gpu_mem_gb is not None:
            parts.append(f"{e.gpu_mem_gb:.2f} GB")
        click.echo("  " + ", ".join(parts))
    if result.images_per_s:
        click.echo(
            f"run: {result.images_per_s:.1f} img/s" + (f", {result.mpx_per_s:.3f} Mpx/s" if result.mpx_per_s else "")
        )
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)


@click.command()
@click.option("--job", "job_id", type=int, required=True)
@click.option("--partition", required=True)
@click.option("--cluster", default="default")
@click.option(
    "--uid",
    type=int,
    default=None,
    help="The job's user: USAGE must be theirs, and its move counts against their bound.",
)
@click.option(
    "--elapsed",
    type=click.IntRange(min=0),
    default=None,
    help="The job's elapsed seconds (sacct ElapsedRaw): caps the records' training time and teaches the"
    " partition's start-up; without it (or --uid) nothing is fed back.",
)
@click.argument("usage", type=click.Path(path_type=Path))
@library_errors
def feedback(job_id: int, partition: str, cluster: str, uid: int | None, elapsed: int | None, usage: Path) -> None:
    """Feed a finished job's measured throughput into its partition's k (the settler does this after
    each completed run; by hand, for a run it could not read)."""
    config = load_config()
    try:
        summary = beacon.from_records(usage, time.time(), owner=uid)
        result = feedback_mod.job_feedback(config, partition, job_id, summary, cluster, uid, elapsed)
    except Exception as e:  # in hooks.log too, beside the settler's own
        log_event(config, {"event": "feedback", "job": job_id, "alert": f"{type(e).__name__}: {e}"})
        raise
    reason = result.reason if result else "no usable usage records (or not the job user's file)"
    log_event(config, {"event": "feedback", "job": job_id, "partition": partition, "result": reason})
    click.echo(f"job {job_id}: {reason}")


@click.command()
@click.argument("job_id", type=int)
@click.option("--interval", default=2.0, show_default=True)
@click.option("--timeout", default=None, help="Give up after this long (e.g. 90m, 2h, 1d); the job goes on.")
@library_errors
def watch(job_id: int, interval: float, timeout: str | None) -> None:
    """Follow a job: epoch, pixels done/total, Mpx/s, ETA, until it ends."""
    state = follow(job_id, interval, durations.parse(timeout) if timeout is not None else None)
    if state != "COMPLETED":
        raise SystemExit(1)


@click.command()
@click.option("--since", default="now-7days", show_default=True, help="Jobs with a run since then (sacct -S).")
@click.option("--user", "-u", default=None, help="Another user's (an admin's, or her account's coordinator's).")
@click.option("--json", "as_json", is_flag=True, help="Raw numbers: seconds, tokens, GPU-hours.")
@library_errors
def jobs(since: str, user: str | None, as_json: bool) -> None:
    """Your recent jobs, a line each (as Slurm's PrivateData lets you see them): state, partition,
    GPUs, predicted against actual run time, limit and the tokens charged."""
    from slurm_yolo.admin import joblist
    from slurm_yolo.admin.report.output import fmt_duration
    from slurm_yolo.core.billing.policy import fmt_tokens
    from slurm_yolo.slurm import visibility

    config = load_config()
    viewer = visibility.viewer(config)
    if viewer.unreached:
        click.echo(f"warning: {viewer.unreached}", err=True)
    rows = joblist.recent(config, viewer, user, since)
    if as_json:
        echo_json(rows)
        return

    def took(seconds: float | None) -> str:
        return "-" if seconds is None else fmt_duration(seconds)

    table = [("JOBID", "STATE", "PARTITION", "GPUS", "PREDICTED", "RAN", "LIMIT", "CHARGED")]
    for r in rows:
        table.append(
            (
                str(r["job_id"]) + (f" ({r['runs']} runs)" if r["runs"] > 1 else ""),
                r["state"],
                r["partition"],
                f"{r['gpus']:g}",
                took(r["predicted_s"]),
                took(r["elapsed_s"]),
                took(r["limit_s"]),
                "-" if r["charge"] is None else fmt_tokens(r["charge"]),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if not rows:
        click.echo(f"no jobs of {user or viewer.user} since {since}")


@click.command("watchdog")
@click.option(
    "--stall-minutes", type=float, default=None, help="Silence that makes a zombie (config: watchdog.stall_minutes)."
)
@click.option("--action", type=click.Choice(["requeue", "cancel"]), default=None)
@click.option("--dry-run", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def watchdog_cmd(stall_minutes: float | None, action: str | None, dry_run: bool, as_json: bool) -> None:
    """Requeue or cancel running jobs that stopped making progress (cron)."""
    config = load_config()
    if action:
        config.watchdog = replace(config.watchdog, action=action)
    stall = (stall_minutes if stall_minutes is not None else config.watchdog.stall_minutes) * 60
    found = watchdog.act(config, watchdog.find_zombies(config, stall), dry_run=dry_run)
    if as_json:
        echo_json([z.__dict__ for z in found])
        return
    for z in found:
        click.echo(
            f"job {z.target}: silent {z.silent_seconds / 60:.1f} min -> {z.action}"
            + (" (dry run)" if dry_run else "")
            + (f" ({z.error})" if z.error else "")
        )
    if not found:
        click.echo(f"no running job silent for {stall / 60:g} min or more")
    if any(z.action == "none" for z in found):
        raise SystemExit(1)  # cron mails it: a zombie Slurm would not end


COMMANDS = (parse, feedback, watch, jobs, watchdog_cmd)
