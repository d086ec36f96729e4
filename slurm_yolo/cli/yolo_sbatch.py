"""``yolo-sbatch``: ``yolo train ...`` as a correctly sized Slurm job."""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from slurm_yolo import __version__
from slurm_yolo.cli import OneLineErrors, echo_json, library_errors, load_config
from slurm_yolo.core import durations, logs
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.core.model.estimate import fmt_pixels
from slurm_yolo.login import plan, submission
from slurm_yolo.slurm import commands
from slurm_yolo.state import cost

CLOCK_SKEW_SECONDS = 300  # a login node's clock behind slurmctld's: a job's runs are those submitted since


@click.command(
    cls=OneLineErrors,
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["-h", "--help"],
    },
)
@click.version_option(__version__, prog_name="yolo-sbatch")
@click.option(
    "--partition",
    "-p",
    default=None,
    help="Partition name, or 'auto': the earliest predicted finish (default: auto over the configured"
    " partitions, else Slurm's default partition).",
)
@click.option("--gpus", "-G", type=int, default=None, help="GPUs (default: device= of the command, else 1).")
@click.option(
    "--deadline", default=None, help="Finish within this (90m, 2h, 1h30m, [D-]HH:MM:SS): fewest GPUs that do."
)
@click.option(
    "--time",
    "-t",
    "time_limit",
    default=None,
    help="Your own time limit (sbatch's syntax: 90, 10:00:00, 1-12; or 2h, 1h30m) instead of the"
    " plan's: the plan still shows its prediction and what your limit covers; the hold follows it.",
)
@click.option("--priority", type=click.Choice(["prod", "dev", "explore"]), default=None, help="Fairshare tier.")
@click.option(
    "--prefer",
    type=click.Choice(["soonest", "fastest", "cheapest"]),
    default="soonest",
    show_default=True,
    help="With --partition auto: the earliest predicted finish, the shortest predicted run (whatever the queue),"
    " or the least money (the smallest hold where partitions have no cost_per_gpu_hour).",
)
@click.option("--flops-factor", type=float, default=None, help="Model GFLOPs / yolov8n's, for custom models.")
@click.option(
    "--cpus-per-gpu",
    type=click.IntRange(1, 256),
    default=None,
    help="CPUs per GPU, which load the images (default: the plan's: enough to keep the GPU busy, at least"
    " the site's job.cpus_per_gpu, at most what the partition's nodes have per GPU).",
)
@click.option("--dry-run", is_flag=True, help="Plan and print; submit nothing.")
@click.option("--explain", is_flag=True, help="Print the estimate broken down.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--wait", is_flag=True, help="Block until the job ends; exit with its success.")
@click.option(
    "--wait-timeout", default="7d", show_default=True, help="With --wait: give up after this long (the job goes on)."
)
@click.option("--account", "-A", default=None)
@click.option("--job-name", "-J", default=None)
@click.option("--output", "-o", default=None)
@click.option("--error", "-e", default=None)
@click.option("--mail-type", default=None)
@click.option("--mail-user", default=None)
@click.option("--dependency", "-d", default=None)
@click.option("--begin", default=None)
@click.option("--constraint", "-C", default=None)
@click.option(
    "--sbatch-arg", "extra", multiple=True, help="Raw sbatch option (repeatable), e.g. --sbatch-arg=--nice=10."
)
@click.argument("words", nargs=-1, type=click.UNPROCESSED)
@library_errors
def main(
    partition: str | None,
    gpus: int | None,
    deadline: str | None,
    time_limit: str | None,
    priority: str | None,
    prefer: str,
    flops_factor: float | None,
    cpus_per_gpu: int | None,
    dry_run: bool,
    explain: bool,
    as_json: bool,
    wait: bool,
    wait_timeout: str,
    account: str | None,
    job_name: str | None,
    output: str | None,
    error: str | None,
    mail_type: str | None,
    mail_user: str | None,
    dependency: str | None,
    begin: str | None,
    constraint: str | None,
    extra: tuple[str, ...],
    words: tuple[str, ...],
) -> None:
    """Submit an ultralytics training command as a Slurm job sized from its token estimate.

    \b
    yolo-sbatch [OPTIONS] [TASK] train key=value ...
    e.g. yolo-sbatch --partition a100 detect train model=yolo11s.yaml data=ds.yaml epochs=50 imgsz=640
    """
    logs.setup()  # SLURM_YOLO_LOG_LEVEL=DEBUG shows every Slurm command it runs
    config = load_config()
    request = plan.Request(
        partition=partition,
        gpus=gpus,
        deadline_seconds=durations.parse(deadline) if deadline is not None else None,
        priority=priority or config.estimate.default_priority,
        prefer=prefer,
        cpus_per_gpu=cpus_per_gpu or 0,
        time_limit_seconds=durations.parse(time_limit) if time_limit is not None else None,
    )
    options = submission.job_options(
        config,
        job_name=job_name or "yolo",
        account=account,
        output=output,
        error=error,
        mail_type=mail_type,
        mail_user=mail_user,
        dependency=dependency,
        begin=begin,
        constraint=constraint,
        extra=extra,
        cpus_per_gpu=cpus_per_gpu,
    )
    wait_limit = durations.parse(wait_timeout) if wait else None  # a bad value submits nothing
    show = explain and not as_json  # a refused plan's numbers, above its one Error: line
    try:
        prepared = submission.prepare(config, list(words), request, options, flops_factor)
    except SlurmYoloError as e:
        _echo_lines(e.explain if show else ())
        raise
    p = prepared.plan
    submitted_at = time.time() - CLOCK_SKEW_SECONDS  # no earlier than Slurm's submit time of the job's first run
    try:
        submitted = None if dry_run else submission.submit(config, prepared)  # a refusal is its one Error: line
    except SlurmYoloError:
        _echo_lines(p.explain if show else ())
        raise
    job_id = submitted.job_id if submitted else None
    waits_until = submitted.waits_until if submitted else None
    bin_dir = config.bin_dir
    unsure = submission.association_problem(account, bin_dir) if dry_run else ""  # a submission would be refused
    told = () if show else prepared.warnings  # --explain lists them among its lines: once is enough
    for warning in (*told, *filter(None, [unsure and f"{unsure}; a submission would be refused"])):
        click.echo(f"warning: {warning}", err=True)
    q = prepared.quote
    if as_json:
        echo_json(
            {
                **p.to_dict(),
                **q.to_dict(),
                "dataset": prepared.counts._asdict(),
                "script": prepared.script,
                "job_id": job_id,
                "waits_for_credits_until": waits_until,
            }
        )
    else:
        if explain:
            _echo_lines(p.explain)
        starts = max(filter(None, [p.expected_start, waits_until]), default=None)
        start = f", expected start {plan.clock(starts)}" if starts is not None else ""
        summary = (
            f"({p.partition}, {p.gres}, qos {p.qos}, limit {p.time_limit_seconds // 60} min, predicted"
            f" {durations.fmt_minutes(p.predicted_seconds)}, work {fmt_pixels(p.work_pixels)}; holds"
            f" {fmt_tokens(q.hold_tokens)} of budget = {cost.fmt_amount(q.hold_gpu_hours)} GPU-h"
            f"{cost.money_part(q)}{start})"
        )
        if dry_run:  # the line a submission would print, then the script it would send
            click.echo(f"Not submitted (--dry-run) {summary}")
            click.echo(prepared.script, nl=False)
        else:
            click.echo(f"Submitted batch job {job_id} {summary}")
    for line in submitted.told if submitted else []:  # slurmctld's word: e.g. until when the job waits for credits
        click.echo(line, err=as_json)
    if wait and job_id is not None:
        from slurm_yolo.cli.follow import ending_lines, follow  # only when following a job
        from slurm_yolo.login import progress

        state = follow(job_id, timeout=wait_limit) if not as_json else commands.wait_for_end(job_id, timeout=wait_limit)
        if state == "COMPLETED":
            click.echo(f"job {job_id} {state}", err=as_json)
            click.echo(submission.settlement(config, job_id, submitted_at), err=as_json)  # the cost after the hold
        else:
            log = submission.log_file(options, job_id)
            click.echo(f"job {job_id} {state}: its log is {log}", err=as_json)
            end = progress.ended(config, job_id, state, log, p.partition)
            if state in ("TIMEOUT", "FAILED", "OUT_OF_MEMORY"):  # it ran: what it paid
                click.echo(submission.settlement(config, job_id, submitted_at), err=as_json)
            for line in ending_lines(job_id, state, end):
                click.echo(line, err=as_json)
            raise SystemExit(1)


def _echo_lines(lines: Sequence[str]) -> None:
    for line in lines:
        click.echo(line)
