"""``slurm-yolo ledger ...``: budgets, quotas and the books."""

from __future__ import annotations

import getpass
import os
import time
from pathlib import Path

import click

from slurm_yolo.cli import echo_json, library_errors, load_config
from slurm_yolo.controller import enforcement
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.billing import policy
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.login import admission
from slurm_yolo.slurm import commands, visibility
from slurm_yolo.state import availability, books, calibration, ledger
from slurm_yolo.state.ledger import store


def _actor() -> str:
    return os.environ.get("SUDO_USER") or getpass.getuser()


def _read(config: Config) -> ledger.Ledger:
    """The ledger read-only (a context manager), or a clear error when there is none yet."""
    lg = ledger.reader(config)
    if lg is None:
        hint = config_mod.missing(config)
        raise UsageError(f"no ledger yet at {ledger.where(config)}" + (f" ({hint})" if hint else ""))
    return lg


def _entry(lg: ledger.Ledger, account: str) -> store.Row:
    """ACCOUNT's ledger row, or one error line: an account the ledger never saw is not an empty answer."""
    row = lg.account(account)
    if row is None:
        raise UsageError(
            f"account {account!r} has no ledger entry (nothing was ever deposited into it: an admin's"
            f" slurm-yolo ledger deposit {account} AMOUNT makes one)"
        )
    return row


def _fail_unconverged(outcome: enforcement.Outcome) -> None:
    """One ``Error:`` line for each account whose Slurm limit is not what the ledger says, and exit 1
    (the ledger's change stands; cron's ``ledger enforce`` retries)."""
    for line in outcome.errors:
        click.echo(f"Error: {line}", err=True)
    if outcome.errors:
        click.get_current_context().exit(1)


def _row(a: store.Row) -> dict[str, object]:
    return {k: a[k] for k in a.keys()}  # noqa: SIM118 - a Row is no dict: iterating it gives values


@click.group("ledger")
def ledger_group() -> None:
    """Token budgets: deposits, quotas, balances, the books."""


@ledger_group.command(context_settings={"ignore_unknown_options": True})
@click.argument("account")
@click.argument("amount")
@click.option("--reason", default="", help="Why (kept with the movement).")
@click.option("--adjust", is_flag=True, help="An adjustment (may be negative) instead of a deposit.")
@library_errors
def deposit(account: str, amount: str, reason: str, adjust: bool) -> None:
    """Add AMOUNT tokens to ACCOUNT: 50G, 120M, 1.5GTok or 1500 (k, M, G, T: powers of 1000)."""
    config = load_config()
    value = admission.parse_tokens(amount, allow_negative=adjust)
    with ledger.writer(config) as lg:
        lg.credit(account, value, _actor(), reason, kind="adjustment" if adjust else "deposit")
        balance = lg.account(account)["balance"]  # type: ignore[index]  # credit() created it
    outcome = enforcement.sync(config, [account])
    click.echo(f"{account}: {'adjusted' if adjust else 'deposited'} {fmt_tokens(value)}, balance {fmt_tokens(balance)}")
    _fail_unconverged(outcome)


@ledger_group.command()
@click.argument("account", required=False)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def balance(account: str | None, as_json: bool) -> None:
    """Balance, held, charged and quota of ACCOUNT, or of every account you may see (Slurm's PrivateData rule)."""
    config = load_config()
    viewer = visibility.viewer(config)
    if viewer.unreached:
        click.echo(f"warning: {viewer.unreached}: showing the accounts Slurm's rule shows without it", err=True)
    if account:
        visibility.require(viewer, account)
    own = visibility.own_accounts(config, viewer)
    with _read(config) as lg:
        if account and account in own and lg.account(account) is None:
            rows = []
        else:
            rows = [_entry(lg, account)] if account else lg.accounts()
    shown = visibility.visible(viewer, [r["name"] for r in rows])
    rows = [r for r in rows if r["name"] in shown]
    shown_names = {r["name"] for r in rows}
    unfunded = sorted({account} - shown_names if account else own - shown_names)  # theirs, nothing deposited yet
    if as_json:
        echo_json(
            [{**_row(r), "in_ledger": True} for r in rows]
            + [{"name": n, "balance": 0, "in_ledger": False} for n in unfunded]
        )
        return
    for r in rows:
        click.echo(
            f"{r['name']}: balance {fmt_tokens(r['balance'])}, held {fmt_tokens(r['held'])}, charged "
            f"{fmt_tokens(r['charged'])}, {_quota_text(r['rate_per_day'], r['capacity'])}"
            + (" [blocked: GPU jobs do not start]" if r["blocked"] else "")
        )
    for name in unfunded:
        click.echo(f"{name}: nothing deposited yet (no ledger entry): GPU jobs are refused until an admin deposits")


@ledger_group.command()
@click.argument("account")
@click.option("--limit", default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def history(account: str, limit: int, as_json: bool) -> None:
    """The newest movements of ACCOUNT."""
    config = load_config()
    visibility.require(visibility.viewer(config), account)
    with _read(config) as lg:
        _entry(lg, account)
        rows = lg.history(account, limit)
    if as_json:
        echo_json([_row(r) for r in rows])
        return
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["at"]))
        click.echo(
            f"{when}  {r['kind']:<10} {fmt_tokens(r['amount']):>12}  {r['job_key'] or ''}  {r['actor']}  {r['reason']}"
        )


@ledger_group.group()
def quota() -> None:
    """Token-bucket quotas."""


@quota.command("set")
@click.argument("account")
@click.option("--rate", required=True, help="Tokens refilled per day, e.g. 120G.")
@click.option("--burst", required=True, help="Bucket capacity: refills stop at this balance.")
@library_errors
def quota_set(account: str, rate: str, burst: str) -> None:
    """Set ACCOUNT's bucket: --rate tokens a day, up to --burst."""
    config = load_config()
    with ledger.writer(config) as lg:
        per_day, capacity = admission.parse_tokens(rate), admission.parse_tokens(burst)
        lg.set_quota(account, per_day, capacity, _actor())
    click.echo(f"{account}: {_quota_text(per_day, capacity)}")  # as `balance` shows it


def _quota_text(per_day: int, capacity: int) -> str:
    """``quota 120 GTok/day up to 600 GTok``, or what a zero rate means: only deposits add tokens."""
    if per_day == 0:
        return "no quota (only deposits add tokens)"
    return f"quota {fmt_tokens(per_day)}/day up to {fmt_tokens(capacity)}"


_CLUSTER = click.option(
    "--cluster",
    default="",
    metavar="NAME",
    help="Only on this cluster (its ClusterName), where several share the ledger; default: every cluster"
    " without its own.",
)


def _cluster(lg: ledger.Ledger, config: Config, name: str) -> str:
    """``--cluster``'s name, once it is this cluster's or one whose runs this ledger keeps: a typo
    would set a price or tier nothing ever reads."""
    if not name:
        return ""
    known = set(lg.clusters()) | {commands.cluster_name(config.bin_dir)}
    if commands.plain_name(name) not in known:
        raise UsageError(f"no cluster {name!r} keeps its runs in this ledger (known: {', '.join(sorted(known))})")
    return name


@ledger_group.command()
@click.argument("qos", required=False)
@click.argument("rate", required=False)
@click.option("--remove", is_flag=True, help="Drop QOS's tier: its jobs held from now on pay the price.")
@_CLUSTER
@library_errors
def tiers(qos: str | None, rate: str | None, remove: bool, cluster: str) -> None:
    """Charge rate per QOS, at most 6 decimals (tiers yolo-prod 0.8: its jobs pay 80%); without
    arguments, list them. Runs already held keep the rate they were held at."""
    config = load_config()
    if qos is not None and (rate is None) != remove:
        raise UsageError(f"give QOS {qos!r} a RATE, or --remove its tier (not both)")
    if qos is None and remove:
        raise UsageError("--remove needs the QOS whose tier to drop")
    if rate is not None:
        policy.parse_rate(rate)  # a bad rate is refused before Slurm is asked about the QOS
    if qos is not None:
        with ledger.writer(config) as lg:
            only = _cluster(lg, config, cluster)
            if remove:
                if not lg.remove_tier(qos, only):
                    raise UsageError(f"no tier for QOS {qos!r}{f' on {only}' if only else ''} to remove")
                click.echo(
                    f"{qos}: tier removed{f' on {only}' if only else ''}; its jobs held from now on pay the price"
                )
            else:
                bin_dir = config.bin_dir
                if not only or only == commands.cluster_name(bin_dir):  # another cluster's QOS: its slurmdbd knows
                    known = commands.qos_names(bin_dir)
                    if qos not in known:
                        raise UsageError(f"Slurm has no QOS {qos!r} (it has {', '.join(known) or 'none'})")
                lg.set_tier(qos, rate or "", only)
    with _read(config) as lg:
        rows = lg.tiers()
    for r in rows:
        where = f" (on {r['cluster']})" if r["cluster"] else ""
        click.echo(f"{r['qos']}: {policy.rate_text(r['rate_ppm'])}{where}")
    click.echo(f"{'any other QOS' if rows else 'every QOS (no tiers set)'}: 1 (the partition's price)")


@ledger_group.group()
def price() -> None:
    """What a GPU-second costs, per partition: the only number money is charged at (k only predicts)."""


@price.command("set")
@click.argument("partition")
@click.argument("tokens_per_gpu_second", metavar="TOKENS")
@click.option(
    "--from",
    "effective",
    default="now",
    show_default=True,
    help="When it takes effect (ISO time, e.g. 2026-12-01T00:00); never before now.",
)
@click.option("--reason", default="", help="Why (kept with the price).")
@_CLUSTER
@library_errors
def price_set(partition: str, tokens_per_gpu_second: str, effective: str, reason: str, cluster: str) -> None:
    """Bill runs of PARTITION held from --from on at TOKENS per GPU-second (1M, 2500); a shard pays its
    share. Runs held before keep the price they were held at."""
    config = load_config()
    amount = admission.parse_tokens(tokens_per_gpu_second)
    at = ledger.parse_when(effective)
    if effective.strip().lower() != "now" and at < time.time() - 60:
        raise UsageError(f"--from {effective} is in the past: a price never applies backwards (leave --from out: now)")
    bin_dir = config.bin_dir
    with ledger.writer(config) as lg:
        only = _cluster(lg, config, cluster)
        if not only or only == commands.cluster_name(bin_dir):  # another cluster's partitions: its Slurm knows
            known = commands.partitions(bin_dir)
            if partition not in known:
                raise UsageError(f"Slurm has no partition {partition!r} (it has {', '.join(known) or 'none'})")
        lg.set_price(partition, amount, at, _actor(), reason, only)
    click.echo(f"{partition}: {amount:,} tokens per GPU-second from {_when(at)}{f' on {only}' if only else ''}")


@price.command("cancel")
@click.argument("partition")
@_CLUSTER
@library_errors
def price_cancel(partition: str, cluster: str) -> None:
    """Drop PARTITION's scheduled prices (those whose --from is still ahead); the price in effect
    stays (runs were held at it)."""
    config = load_config()
    with ledger.writer(config) as lg:
        only = _cluster(lg, config, cluster)
        dropped = lg.cancel_prices(partition, only)
    where = f" on {only}" if only else ""
    if not dropped:
        raise UsageError(f"{partition}{where} has no scheduled price to cancel (price show lists them)")
    for r in dropped:
        click.echo(
            f"{partition}{where}: cancelled {int(r['price']):,} tokens per GPU-second from {_when(float(r['effective_at']))}"
        )


def _when(at: float) -> str:
    return "now" if at <= time.time() else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


@price.command("show")
@click.option("--json", "as_json", is_flag=True)
@library_errors
def price_show(as_json: bool) -> None:
    """Every price version, the default for partitions without one (ledger.default_price), and the
    partitions and accounts off the books (ledger.exempt_partitions, exempt_accounts)."""
    config = load_config()
    lg = ledger.reader(config)
    rows = []
    if lg is not None:
        with lg:
            rows = [_row(r) for r in lg.prices()]
    led = config.ledger
    if as_json:
        exempt = {"partitions": list(led.exempt_partitions), "accounts": list(led.exempt_accounts)}
        echo_json({"default": led.default_price, "prices": rows, "exempt": exempt})
        return
    click.echo(f"default: {led.default_price:,} tokens per GPU-second (partitions without a price)")
    for kind, names, whose in (
        ("partition", led.exempt_partitions, "on it"),
        ("account", led.exempt_accounts, "of it"),
    ):
        for name in names:
            click.echo(f"{kind} {name}: exempt, GPU jobs {whose} hold and pay nothing (ledger.exempt_{kind}s)")
    now = time.time()
    for cluster, partition in sorted({(str(r["cluster"]), str(r["partition"])) for r in rows}):
        versions = [r for r in rows if (r["cluster"], r["partition"]) == (cluster, partition)]
        current = [r for r in versions if float(str(r["effective_at"])) <= now][-1:]
        where = f" on {cluster}" if cluster else ""
        for r in current + [r for r in versions if float(str(r["effective_at"])) > now]:
            since = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(str(r["effective_at"]))))
            label = f"since {since}" if r in current else f"from {since}"
            why = f"{r['actor']}: {r['reason']}" if r["reason"] else f"set by {r['actor']}, no reason given"
            click.echo(f"{partition}{where}: {int(str(r['price'])):,} tokens per GPU-second {label} ({why})")
    priced = {str(r["partition"]) for r in rows if float(str(r["effective_at"])) <= now}
    for partition in sorted(set(config.partitions) - priced - set(led.exempt_partitions)):
        click.echo(
            f"{partition}: {led.default_price:,} tokens per GPU-second, the default (no price set:"
            f" slurm-yolo ledger price set {partition} TOKENS_PER_GPU_SECOND)"
        )


@ledger_group.command()
@library_errors
def check() -> None:
    """Prove the books: credited = balance + held + charged + expired, from the movements."""
    with _read(load_config()) as lg:
        problems = lg.check()
    for p in problems:
        click.echo(p)
    if problems:
        raise SystemExit(1)
    click.echo("ledger consistent")


@ledger_group.command()
@click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="json")
@library_errors
def export(fmt: str) -> None:
    """Every movement of the accounts you may see (all, for admins), for audits."""
    import csv
    import sys

    config = load_config()
    viewer = visibility.viewer(config)
    with _read(config) as lg:
        rows = [_row(r) for r in lg.movements()]
    shown = visibility.visible(viewer, {str(r["account"]) for r in rows})
    rows = [r for r in rows if r["account"] in shown]
    if fmt == "json":
        echo_json(rows)
    elif rows:
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@ledger_group.command()
@library_errors
def refill() -> None:
    """Expire stale tokens (ledger.expire_days), apply every bucket's refill, and lift the blocks of
    accounts that have tokens again (cron)."""
    config = load_config()
    days = config.ledger.expire_days
    with ledger.writer(config) as lg:
        expired = lg.expire(days) if days > 0 else {}
        changed = lg.refill_all()
    outcome = enforcement.sync(config, list(changed))
    for name, amount in expired.items():
        click.echo(f"{name}: {fmt_tokens(amount)} expired (unspent for {days:g} days)")
    for name, blocked in changed.items():
        click.echo(f"{name}: {'blocked' if blocked else 'unblocked'}")
    if not expired and not changed:
        click.echo("buckets refilled: no tokens expired, no account blocked or unblocked")
    _fail_unconverged(outcome)


@ledger_group.command()
@click.option(
    "--window-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="How far back to look in sacct (config: ledger.reconcile_days).",
)
@click.option(
    "--min-age", default=0.0, show_default=True, help="Leave holds younger than this many seconds to their epilog."
)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def reconcile(window_days: float | None, min_age: float, as_json: bool) -> None:
    """The settler, from cron: settle every epilog event still in the inbox (hookd down or killed,
    sacct late), then hold and settle, from sacct, every GPU run the hooks missed (a failed prolog, an
    epilog lost to a slurmctld outage)."""
    from slurm_yolo.controller import settler

    config = load_config()
    done, unread = settler.reconcile(config, window_days, min_age)
    if as_json:
        echo_json(done)
    else:
        _print_reconciled(done)
    for day in unread:
        click.echo(f"Error: sacct did not answer for the day from {day}; the other days were reconciled", err=True)
    if unread:
        click.get_current_context().exit(1)


def _print_reconciled(done: list[dict[str, object]]) -> None:
    for d in done:
        if d["state"] == "RUNNING":
            click.echo(f"{d['key']}: running without a hold, held {fmt_tokens(float(str(d['hold'])))}")
            continue
        click.echo(
            f"{d['key']}: {d['state']}, charged {fmt_tokens(float(str(d['charge'])))}, refunded {fmt_tokens(float(str(d['refund'])))}"
        )
    click.echo(f"{len(done)} run(s) reconciled")


@ledger_group.command()
@click.argument("key")
@click.option("--charge", default="0", show_default=True, help="What the run pays (e.g. 120M); the rest is refunded.")
@click.option("--reason", required=True, help="Why (kept with the movements).")
@library_errors
def release(key: str, charge: str, reason: str) -> None:
    """End the hold of run KEY (cluster:job:submit, as `ledger audit` lists it) that Slurm's records can
    no longer settle: charge --charge of it and refund the rest, recorded as movements with --reason."""
    config = load_config()
    with ledger.writer(config) as lg:
        done = lg.release(key, admission.parse_tokens(charge), _actor(), reason)
    outcome = enforcement.sync(config, [done.account])
    click.echo(
        f"{key}: released, charged {fmt_tokens(done.charge)}, refunded {fmt_tokens(done.refund)}, "
        f"{done.account} balance {fmt_tokens(done.balance)}"
    )
    _fail_unconverged(outcome)


@ledger_group.command()
@click.option("--account", "accounts", multiple=True, help="Only these accounts (default: all).")
@library_errors
def enforce(accounts: tuple[str, ...]) -> None:
    """Make Slurm's limits match the ledger: dry accounts' GPU jobs do not start, funded ones get the
    site's own limits back. Only what differs is changed; run it again (cron) until no error is left."""
    config = load_config()
    outcome = enforcement.sync(config, list(accounts) or None)
    for c in outcome.changes:
        click.echo(
            f"{c.account}: {'blocked' if c.blocked else 'unblocked'} on {outcome.cluster}, "
            f"GrpTRESRunMins {c.before or '(none)'} -> {c.after or '(none)'}"
        )
    if not config.ledger.enforce:
        click.echo("nothing done: ledger.enforce is false in the config (Slurm's limits are the site's alone)")
    elif not outcome.changes and not outcome.errors:
        which = ", ".join(accounts) if accounts else "every account"
        click.echo(f"Slurm's limits on {outcome.cluster} already match the ledger ({which})")
    _fail_unconverged(outcome)


@ledger_group.command()
@library_errors
def publish() -> None:
    """Rewrite the balances slurmctld's admission reads, and the copies of the books and the time
    models users and login nodes read (every write does this too; cron and a new install use it)."""
    config = load_config()
    ledger.publish(config)
    calibration.publish(config)
    click.echo(f"published in {config.public_dir}: availability, ledger.db, calibration.db")


@ledger_group.command()
@click.option("--to", "backend", type=click.Choice(["mariadb"]), required=True, help="Where the books go.")
@click.option(
    "--options",
    "options",
    type=click.Path(path_type=Path, resolve_path=True, readable=False),
    required=True,
    help="The MariaDB option file of the ledger's database (the SlurmUser's, mode 600).",
)
@library_errors
def migrate(backend: str, options: Path) -> None:
    """Move the books from the SQLite file to the site's MariaDB (a new, empty database): copied
    while no hook can write, checked (ledger check on both, every account's totals equal), then
    kept; the SQLite file is marked so that no writer or reader uses it again. Then set
    ledger.backend and ledger.mariadb_options on every controller and restart hookd."""
    from slurm_yolo.core.config import config_path
    from slurm_yolo.state.ledger import transfer

    config = load_config()
    done = transfer.to_mariadb(config, options)
    copied = ", ".join(f"{table} {n}" for table, n in sorted(done.rows.items()) if n)
    click.echo(f"copied and checked ({copied}): ledger check clean on both sides, every account's totals equal")
    click.echo(f"{ledger.db_path(config)} is retired: it refuses every reader and writer from now on")
    click.echo(f"now put under [ledger] in {config.path or config_path()}, then restart slurm-yolo-hookd:")
    click.echo(f'backend = "{backend}"\nmariadb_options = "{options}"')


@ledger_group.command("admission-script")
@click.option("--cluster", default="", help="The cluster's ClusterName (default: asked of its running slurmctld).")
@library_errors
def admission_script(cluster: str) -> None:
    """Print job_submit.lua for this config (install as /etc/slurm/job_submit.lua with
    JobSubmitPlugins=lua): every GPU submission is checked against the account's tokens."""
    config = load_config()
    cluster = cluster or commands.cluster_name(config.bin_dir)
    click.echo(availability.script(config, cluster), nl=False)


@ledger_group.command()
@library_errors
def comments() -> None:
    """Write the AdminComments of settled jobs that slurmdbd has not taken yet (after each settlement,
    and cron: a comment stays queued until sacctmgr takes it)."""
    config = load_config()
    visibility.require_admin(visibility.viewer(config), "slurm-yolo ledger comments")
    done = books.write_comments(config)
    for line in done.failed:
        click.echo(f"Error: {line}", err=True)
    click.echo(f"{done.written} AdminComment(s) written, {done.left} still queued")
    if done.failed:
        raise SystemExit(1)


@ledger_group.command()
@click.option(
    "--window-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="How far back to compare (config: ledger.reconcile_days).",
)
@click.option("--since", default=None, help="Compare from this time on instead (ISO local time, or now-7days).")
@click.option(
    "--min-age",
    type=click.FloatRange(min=0),
    default=900.0,
    show_default=True,
    help="Leave runs that ended less than this many seconds ago to their hooks.",
)
@click.option("--json", "as_json", is_flag=True)
@library_errors
def audit(window_days: float | None, since: str | None, min_age: float, as_json: bool) -> None:
    """Compare sacct (every run of every job in the window) with the ledger: runs missing on either
    side, amounts that differ, runs settled twice, AdminComments missing (cron; exit 1 when any)."""
    config = load_config()
    window = config.ledger.reconcile_days if window_days is None else window_days
    if since is not None:
        window = (time.time() - ledger.parse_when(since)) / 86400
    viewer = visibility.viewer(config)
    visibility.require_admin(viewer, "slurm-yolo ledger audit")
    findings = books.audit(config, window, min_age)
    if viewer.uid == 0 or viewer.user == viewer.owner:
        books.requeue_comments(config, findings)  # lost AdminComments: `ledger comments` writes them again
        if window_days is None and since is None:  # cron's audit is what alerts and the metrics report
            books.save(config, findings, window)
    if as_json:
        echo_json([f._asdict() for f in findings])
    else:
        for f in findings:
            click.echo(f"{f.kind}: {f.key}: {f.detail}")
        click.echo(f"{len(findings)} difference(s) between sacct and the ledger over {window:g} day(s)")
    if findings:
        raise SystemExit(1)
