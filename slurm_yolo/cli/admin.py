"""``slurm-yolo``: admin commands (config, calibration) and the job-side launcher."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from slurm_yolo import __version__
from slurm_yolo.admin.doctor import ROLES
from slurm_yolo.cli import OneLineGroup, echo_json, library_errors, load_config
from slurm_yolo.cli.job import COMMANDS as JOB_COMMANDS
from slurm_yolo.cli.ledger import ledger_group
from slurm_yolo.cli.report import COMMANDS as REPORT_COMMANDS
from slurm_yolo.cli.stage import stage
from slurm_yolo.core import logs
from slurm_yolo.core.durations import fmt_duration
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model.timemodel import describe, startup_note
from slurm_yolo.state import calibration


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurm-yolo")
@click.option("--debug", is_flag=True, help="Log at DEBUG (every Slurm command run, ...); else SLURM_YOLO_LOG_LEVEL.")
def main(debug: bool) -> None:
    """slurm-yolo: token-budgeted YOLO training on Slurm (admin and job-side commands)."""
    logs.setup(debug)


main.add_command(ledger_group)
main.add_command(stage)
for _command in (*JOB_COMMANDS, *REPORT_COMMANDS):
    main.add_command(_command)


@main.group("config")
def config_group() -> None:
    """The effective configuration."""


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True)
def config_show(as_json: bool) -> None:
    """Print every effective value and where it came from."""
    config = load_config()
    rows = config.flat()
    if as_json:
        echo_json(
            {
                "file": str(config.path) if config.path else None,
                "values": {k: {"value": v, "source": s} for k, v, s in rows},
            }
        )
        return
    click.echo(f"# config file: {config.path or 'none (defaults)'}")
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        shown = json.dumps(list(value)) if isinstance(value, tuple) else repr(value)  # a list as TOML writes it
        click.echo(f"{key:<{width}}  {shown:<30}  {source}")


@main.command()
@click.option("--partition", "-p", default=None, help="Partition the runs stand for (need not be configured).")
@click.option(
    "--probe",
    default=None,
    metavar="PARTITION",
    help="Instead of run folders: submit one short real job there and calibrate from it.",
)
@click.option("--account", "-A", default=None, help="With --probe: the account its job is billed to.")
@click.option(
    "--dir",
    "folder",
    default=".",
    type=click.Path(path_type=Path),
    help="With --probe: the folder its own new folder is made in (default: here); the nodes must see it,"
    " and it must be yours or root's alone.",
)
@click.option("--dry-run", is_flag=True, help="Show the fit beside the current model; save nothing.")
@click.option("--force", is_flag=True, help="Save a fit whose cross-validated error is worse than the current model's.")
@click.option(
    "--exclude-user",
    "exclude_users",
    multiple=True,
    metavar="USER",
    help="Leave this user's runs (her jobs, her run folders) out of this and later fits (repeatable).",
)
@click.option(
    "--exclude-job",
    "exclude_jobs",
    multiple=True,
    type=int,
    metavar="ID",
    help="Leave this job's run out of this and later fits (repeatable).",
)
@click.option("--json", "as_json", is_flag=True)
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@library_errors
def calibrate(
    partition: str | None,
    probe: str | None,
    account: str | None,
    folder: Path,
    dry_run: bool,
    force: bool,
    exclude_users: tuple[str, ...],
    exclude_jobs: tuple[int, ...],
    as_json: bool,
    run_dirs: tuple[Path, ...],
) -> None:
    """Fit k (and the other terms the data supports) from ultralytics run folders, or from a probe job.

    Shows the samples, the fit beside the current model on the same runs and a few reference jobs'
    predictions before saving; a fit that cross-validates worse is not saved without --force.

    \b
    slurm-yolo calibrate -p t4 --dry-run /scratch/runs/detect/train*
    slurm-yolo calibrate --probe a100 -A admin
    slurm-yolo calibrate -p t4 --exclude-user mallory
    """
    config = load_config()
    options = calibration.CalibrateOptions(
        dry_run, force, calibration.uids(exclude_users), tuple(calibration.job_ids(exclude_jobs))
    )
    if probe is not None:
        if partition or run_dirs:
            raise UsageError("--probe calibrates from its own job: give no --partition and no run folders")
        from slurm_yolo.login import probe as probe_mod

        say = functools.partial(click.echo, err=True)
        done = probe_mod.run(config, probe, account, folder, say=say, options=options)
        click.echo(f"probe job {done.job_id} on {probe} completed; its runs are in {done.folder}/runs", err=as_json)
        result = done.result
    elif not partition or not (run_dirs or exclude_users or exclude_jobs):
        raise UsageError("give --partition and run folders, or --probe PARTITION")
    else:
        result = calibration.calibrate_runs(config, partition, list(run_dirs), options)
    if as_json:
        echo_json(result.to_dict())
    else:
        _show_calibration(result, dry_run, force)
    if result.worse and not result.saved and not dry_run:
        raise UsageError(result.worse)


def _percent(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.1%}" if signed else f"{value:.1%}"


def _show_calibration(result: calibration.CalibrationResult, dry_run: bool, force: bool = False) -> None:
    """A calibration's samples, its comparison with the current model, and what was saved."""
    for reason in result.skipped:
        click.echo(f"skipped: {reason}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(calibration.calibrate_summary(result))
    left_out = sum(1 for s in result.samples if s.excluded)
    click.echo(f"samples ({len(result.samples) - left_out} in the fit, {left_out} left out):")
    for s in result.samples:
        what = f"job {s.job}" if s.job is not None else f"run folder {s.key}"
        words = [what, f"user {s.user or '?'}"] + ["new"] * s.new
        if s.excluded:
            words.append(f"left out: {s.excluded}")
        elif s.shared_with:
            shown = ", ".join(map(str, s.shared_with[:5])) + (", ..." if len(s.shared_with) > 5 else "")
            words.append(f"shared its node with {len(s.shared_with)} job(s) ({shown}): weight {s.weight:.2g}")
        click.echo("  " + "; ".join(words))
    click.echo(f"compared on {result.judged_on}:")
    click.echo(f"  {'':<14} {'runs':>5} {'median':>8} {'p90':>8} {'bias':>8}")
    for name, e in (("current model", result.current_errors), ("new fit", result.new_errors)):
        cells = (_percent(e.median), _percent(e.p90), _percent(e.bias, signed=True))
        click.echo(f"  {name:<14} {e.runs:>5} {cells[0]:>8} {cells[1]:>8} {cells[2]:>8}")
    click.echo("reference jobs (1 GPU), predicted: current model -> new fit")
    for job, before, after in result.references:
        click.echo(f"  {job}: {fmt_duration(before)} -> {fmt_duration(after)} ({after / before - 1:+.0%})")
    if result.saved:
        assert result.model is not None
        for line in describe(result.model):
            click.echo(line)
        click.echo(startup_note(result.model))
        click.echo(f"saved; the history names it: {result.source}")
    elif dry_run:
        if result.worse and force:
            click.echo(f"dry run: nothing saved; without --dry-run, --force would save it over: {result.worse}")
        else:
            click.echo("dry run: nothing saved" + (f"; without it: {result.worse}" if result.worse else ""))


@main.command()
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default="auto",
    show_default=True,
    help="What this host is for; auto: a slurmctld host is the controller, a slurmd host compute, else login.",
)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def doctor(role: str, as_json: bool) -> None:
    """Check this host for its role: one line per problem with what to do (exit 1), notes beside."""
    from slurm_yolo.admin import doctor as doctor_mod

    report = doctor_mod.check(load_config(), role)
    if as_json:
        echo_json(
            {
                "role": report.role,
                "slurm": report.release,
                "notes": report.notes,
                "problems": [p._asdict() for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            click.echo(f"problem: {p.what}; do: {p.fix}")
        for note in report.notes:
            click.echo(f"note: {note}")
        found = f"{len(report.problems)} problem(s)" if report.problems else "no problems"
        click.echo(f"doctor: {report.role} host, Slurm {report.release or 'unreachable'}: {found}")
    if report.problems:
        raise SystemExit(1)


@main.command()
@library_errors
def hookd() -> None:
    """Serve the slurmctld hooks from a resident process (the slurm-yolo-hook client's server).

    Started as root it becomes paths.owner (the SlurmUser). SIGTERM stops it after the settlements
    it has queued."""
    from slurm_yolo.controller import hookd as server

    server.serve(load_config())


@main.command("k")
@click.argument("name", required=False, metavar="[PARTITION]")
@click.option("--partition", "-p", default=None, help="The partition (or give it as the argument).")
@click.option("--json", "as_json", is_flag=True)
@library_errors
def show_k(name: str | None, partition: str | None, as_json: bool) -> None:
    """The partition's current time model (readable by every user): slurm-yolo k t4, or -p t4."""
    if name and partition and name != partition:
        raise UsageError(f"two partitions given ({name} and -p {partition}): give one")
    partition = name or partition
    if not partition:
        raise UsageError("give the partition: slurm-yolo k PARTITION (or -p PARTITION)")
    config = load_config()
    if partition not in config.partitions and not calibration.history(config, partition):
        raise UsageError(
            f"partition {partition!r} is neither configured nor calibrated (configured: {', '.join(sorted(config.partitions))})"
        )
    cal = calibration.load(config, partition)
    if as_json:
        echo_json({"partition": partition, "source": cal.source, "model": asdict(cal.model)})
    else:
        click.echo(f"{partition}: k {cal.model.k:.4g} s/Mpx from {cal.source}")
        for line in describe(cal.model):
            click.echo(f"  {line}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("words", nargs=-1, type=click.UNPROCESSED)
@library_errors
def run(words: tuple[str, ...]) -> None:
    """Run ultralytics training inside a job: slurm-yolo run -- [TASK] train key=value ..."""
    from slurm_yolo.job import launcher  # imports ultralytics: job side only

    raise SystemExit(launcher.run(list(words)))


@main.command()
@click.option(
    "--since", default="30days", show_default=True, help="The history's start: 30days, now-7days, or a date (sacct -S)."
)
@click.option(
    "--on",
    type=click.Path(path_type=Path, file_okay=False),
    help="The replay cluster's Slurm commands (deploy/replaycluster's STATE/bin): never this cluster's.",
)
@click.option("--spec", "as_spec", is_flag=True, help="Print a deploy/replaycluster spec of this cluster, and stop.")
@click.option("--scale", type=float, default=1.0, show_default=True, help="Simulated seconds per real second.")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help="Replay the history's first N GPU runs.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="The prediction errors' draw.")
@click.option("--json", "as_json", is_flag=True)
@library_errors
def simulate(
    since: str, on: Path | None, as_spec: bool, scale: float, max_runs: int | None, seed: int, as_json: bool
) -> None:
    """What this cluster's GPU history would have waited with slurm-yolo's limits.

    Replays each GPU run since --since (its submission, partition, GPUs, CPUs, account, how long it
    ran) on a replay cluster's own slurmctld, twice: with the limits its users asked, and with the
    limits yolo-sbatch would have set at the partitions' calibrated accuracy (docs/admins.md)."""
    import time

    from slurm_yolo.admin import simulate as sim
    from slurm_yolo.core.durations import instant

    config = load_config()
    now = time.time()
    start = instant(since, now)
    start = start if start is not None else instant(f"now-{since}", now)  # 30days: now-30days
    if start is None or start >= now:
        raise UsageError(f"--since {since!r}: give 30days, now-7days or a date such as 2026-11-01")
    records = sim.records(config, start, now)
    if as_spec:
        echo_json(sim.spec(config, records, start))
        return
    if on is None:
        raise UsageError("give --on: the replay cluster's Slurm commands (or --spec, to bring one up)")
    say = functools.partial(click.echo, err=True)
    results = [r.figures() for r in sim.simulate(config, records, start, on, scale, seed, say, max_runs)]
    if as_json:
        echo_json({"since": since, "scale": scale, "seed": seed, "arms": {r["arm"]: r for r in results}})
        return
    asked, product = results
    rows: list[tuple[str, str, Callable[[Any], str]]] = [
        ("runs", "jobs", str),
        ("mean wait", "mean_wait_s", fmt_duration),
        ("median wait", "median_wait_s", fmt_duration),
        ("p95 wait", "p95_wait_s", fmt_duration),
        ("makespan", "makespan_s", fmt_duration),
        ("killed at the limit", "killed", str),
        ("went on after a kill", "requeued", str),
        ("GPU-hours allocated", "gpu_hours_allocated", lambda v: f"{v:.2f}"),
        ("GPU-hours lost to kills", "gpu_hours_lost", lambda v: f"{v:.2f}"),
    ]
    click.echo(f"{'':<24}{'as submitted':>16}{'slurm-yolo':>16}")
    for label, key, fmt in rows:
        click.echo(f"{label:<24}{fmt(asked[key]):>16}{fmt(product[key]):>16}")
    click.echo(
        f"since {since}, these runs would have waited {fmt_duration(float(product['mean_wait_s']))} on average"
        f" with slurm-yolo's limits instead of {fmt_duration(float(asked['mean_wait_s']))}"
        f" (p95 {fmt_duration(float(product['p95_wait_s']))} instead of {fmt_duration(float(asked['p95_wait_s']))});"
        " a replay on Slurm's scheduler, one draw of the prediction errors (--seed)"
    )
