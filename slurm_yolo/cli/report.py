"""Admin commands over Slurm's accounting: report, recalibrate, alerts, metrics (pandas lives here)."""

from __future__ import annotations

import socket
import time
from functools import partial
from pathlib import Path

import click

from slurm_yolo.admin import alerts as alerts_mod
from slurm_yolo.admin import recalibrate as recal_mod
from slurm_yolo.cli import echo_json, library_errors, load_config
from slurm_yolo.core.errors import SlurmError, UnreachableError, UsageError
from slurm_yolo.core.model.timemodel import describe
from slurm_yolo.slurm import commands, visibility

FILTERS = [
    click.option("--since", default="now-7days", show_default=True, help="sacct -S (e.g. 2026-11-01, now-30days)."),
    click.option("--until", default="now", show_default=True),
    click.option("--account", "-A", default=None),
    click.option("--user", "-u", default=None),
    click.option("--partition", "-p", default=None),
    click.option("--qos", "-q", default=None),
    click.option("--jobs", "-j", default=None, help="These jobs (JOBID[,JOBID...]), whenever they ran."),
]


def job_ids(text: str) -> tuple[int, ...]:
    """``-j 12,13``: the job ids, or one Error line."""
    words = [w.strip() for w in text.split(",")]
    if not words or not all(w.isdigit() and 0 < len(w) <= 10 for w in words):
        raise UsageError(f"-j {text[:60]!r}: give job ids, such as 1234 or 1234,1240")
    return tuple(dict.fromkeys(int(w) for w in words))


@click.command()
@click.option(
    "--view",
    "views",
    multiple=True,
    type=click.Choice(["usage", "accuracy", "waits", "failures", "preemptions", "k", "roi", "efficiency", "budgets"]),
    help="Views to show (repeatable; default: all).",
)
@click.option("--csv", "as_csv", is_flag=True, help="Raw numbers: tokens, seconds, GPU-hours, shares as fractions.")
@click.option("--json", "as_json", is_flag=True, help="Raw numbers, as --csv (a missing value: null).")
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Write an HTML page with plots: usage over time, burn-downs, predicted vs actual run time, images/s "
    "against GPU memory per batch size.",
)
@click.option(
    "--sacct-file",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Read saved `sacct -X -D -n -p -o JobIDRaw,Account,User,Partition,QOS,State,Submit,Start,End,"
    "ElapsedRaw,TimelimitRaw,AllocTRES,Comment,AdminComment,WorkDir` output instead of calling sacct.",
)
@click.option(
    "--delimiter",
    default="|",
    show_default=True,
    help="With --sacct-file: the sacct --delimiter it was saved with (one no job name or comment holds).",
)
@library_errors
def report(
    views: tuple[str, ...],
    as_csv: bool,
    as_json: bool,
    html_file: Path | None,
    sacct_file: Path | None,
    delimiter: str,
    **filters: str | None,
) -> None:
    """Tokens, GPU-hours, prediction accuracy, waits, failures, preemptions per tier, k, ROI, GPU efficiency (utilisation, memory,
    temperature, from the jobs' usage records; thresholds in [efficiency]) and budgets from sacct + the ledger
    (of the accounts you may see: Slurm's PrivateData rule). The table and --html show human units
    (MTok/GTok, GPU-hours, durations, days); --csv and --json raw numbers (tokens, seconds, fractions)."""
    from slurm_yolo.admin import report as report_mod
    from slurm_yolo.admin.report import output

    config = load_config()
    viewer = visibility.viewer(config)
    asked = filters.pop("jobs")
    jobs = job_ids(asked) if asked else ()
    f = report_mod.Filters(**{k: v for k, v in filters.items() if v is not None}, jobs=jobs)  # type: ignore[arg-type]
    if sacct_file:
        rows, unreached = report_mod.read_saved(sacct_file.read_text(), delimiter), ""
    else:
        rows, unreached = report_mod.fetch_or_unreached(config, f)
    for missing in (viewer.unreached, unreached and f"sacct did not answer ({unreached}): no runs in the job views"):
        if missing:
            click.echo(f"warning: {missing}", err=True)
    visible = partial(visibility.visible, viewer)
    runs = report_mod.jobs(config, f, rows, visible)
    tables = report_mod.build(config, f, views or report_mod.VIEWS, visible=visible, df=runs)
    currency = config.ledger.currency
    money = currency or "cost_per_gpu_hour's units"
    window = f"jobs {','.join(map(str, jobs))}" if jobs else f"--since {f.since} --until {f.until} (sacct -S/-E)"
    heading = (
        f"report: runs of {window}; budgets as of now; cost in {money}"
        f" (GPU-hours x cost_per_gpu_hour); made {time.strftime('%Y-%m-%d %H:%M')} on {socket.gethostname()}"
    )
    if html_file:
        html_file.write_text(
            output.html_page(tables, report_mod.series(config, f, runs, tables), heading=heading, currency=currency)
        )
        click.echo(f"wrote {html_file}")
    elif as_csv:
        click.echo(output.csv(tables), nl=False)
    elif as_json:
        click.echo(output.as_json(tables))
    else:
        click.echo(output.table(tables, heading, currency), nl=False)


for _option in reversed(FILTERS):
    report = _option(report)


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Raw numbers: seconds, tokens, GPU-hours.")
@library_errors
def job(job_id: str, as_json: bool) -> None:
    """One job as seff and jobstats show it: each run's time against its limit and the prediction,
    tokens held, charged and refunded, its GPUs' utilisation and memory, and advice (a job you may see:
    yours, or any where Slurm's PrivateData hides no jobs)."""
    from slurm_yolo.admin import jobview

    config = load_config()
    ids = job_ids(job_id)
    found = jobview.summaries(config, list(ids), visibility.viewer(config))
    if as_json:
        echo_json(found)
        return
    click.echo("".join(jobview.text(s, config.ledger.currency) for s in found), nl=False)


@click.command()
@click.option("--partition", "-p", "partitions", multiple=True, help="Only these (default: every partition with runs).")
@click.option("--window-days", default=30.0, show_default=True)
@click.option("--min-samples", default=5, show_default=True)
@click.option("--max-step", default=0.5, show_default=True, help="Largest relative change of k per refit.")
@click.option("--dry-run", is_flag=True, help="Show old vs new and the evidence; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@library_errors
def recalibrate(
    partitions: tuple[str, ...], window_days: float, min_samples: int, max_step: float, dry_run: bool, as_json: bool
) -> None:
    """Refit each partition's time model from its recent runs (cron)."""
    config = load_config()
    results = recal_mod.recalibrate(config, list(partitions) or None, window_days, min_samples, max_step, dry_run)
    if as_json:
        echo_json([r.to_dict() for r in results])
        return
    try:  # a price is set for a partition Slurm has: calibration may hold others (a folder's, a removed one)
        in_slurm: list[str] | None = commands.partitions(config.bin_dir)
    except SlurmError:
        in_slurm = None  # not known here: the suggestion stands, price set checks it
    for r in results:
        click.echo(
            f"{r.partition}: k {r.old.k:.4g} -> {r.new.k:.4g} ({'applied' if r.applied else 'not applied'}: {r.reason})"
        )
        for line in describe(r.new):
            click.echo(f"  {line}")
        click.echo(
            f"  buffer its cross-validation justifies for a 1-hour run: {r.buffer_justified:.2f}"
            f" (configured {r.buffer_configured:.2f})"
        )
        if r.proposed_price and (in_slurm is None or r.partition in in_slurm):
            click.echo(
                f"  price at this throughput: {r.proposed_price} tokens per GPU-second "
                f"(an admin applies it: slurm-yolo ledger price set {r.partition} {r.proposed_price})"
            )
        elif r.proposed_price:
            click.echo(
                f"  price at this throughput: {r.proposed_price} tokens per GPU-second "
                f"(Slurm has no partition {r.partition}: nothing to set)"
            )


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--mail", "mail_to", default=None, help="Also mail the alerts through the local MTA.")
@click.option("--budget-share", default=0.8, show_default=True)
@click.option("--refusals", default=3, show_default=True)
@click.option("--drift", default=0.3, show_default=True)
@click.option("--error-bound", default=0.5, show_default=True)
@click.option(
    "--spend-per-week",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Money (ledger.currency) an account's runs of the last 7 days may cost; 0: no money alert.",
)
@library_errors
def alerts(
    as_json: bool,
    mail_to: str | None,
    budget_share: float,
    refusals: int,
    drift: float,
    error_bound: float,
    spend_per_week: float,
) -> None:
    """Budgets nearly spent, accounts spending past a weekly amount, repeated refusals, drifting k,
    badly predicted jobs, running jobs whose GPUs idle or overheat (their usage records; thresholds in
    [efficiency]) (exit 1 when any)."""
    from slurm_yolo.admin.report import recent_predictions

    config = load_config()
    visibility.require_admin(visibility.viewer(config), "slurm-yolo alerts")
    try:
        predictions, unreached = recent_predictions(config), ""
    except UnreachableError as e:
        predictions, unreached = [], str(e)
    found = alerts_mod.check(config, budget_share, refusals, drift, error_bound, predictions, unreached, spend_per_week)
    found += alerts_mod.gpu_alerts(config)
    if as_json:
        echo_json(alerts_mod.to_dicts(found))
    else:
        for a in found:
            click.echo(f"[{a.kind}] {a.subject}: {a.message}")
    if found and mail_to:
        alerts_mod.mail(found, mail_to)
    if found:
        raise SystemExit(1)


@click.command()
@click.option(
    "--textfile",
    "directory",
    default=None,
    type=click.Path(path_type=Path),
    help="node_exporter's textfile-collector directory: write slurm_yolo.prom there (default: print them).",
)
@library_errors
def metrics(directory: Path | None) -> None:
    """Prometheus metrics (balances, holds, burn, k, prediction error, waits): printed, or written for
    node_exporter's textfile collector (--textfile, as cron does)."""
    from slurm_yolo.admin.report import metrics as metrics_mod

    config = load_config()
    visibility.require_admin(visibility.viewer(config), "slurm-yolo metrics")
    if directory is None:
        click.echo(metrics_mod.text(config), nl=False)
    else:
        click.echo(f"wrote {metrics_mod.write_textfile(config, directory)}")


COMMANDS = (report, job, recalibrate, alerts, metrics)
