"""Slurm's own limits kept in step with the ledger: a dry account's GPU jobs do not start.

The ledger is the source of truth; Slurm enforces it (a ``GrpTRESRunMins`` of 0 for the GPU TRES on
the account's association, see ``slurm.commands.set_run_mins``), so plain ``sbatch`` cannot bypass a
budget. ``sync`` converges rather than fires and forgets: it reads each association's limits, changes
only what differs from what the ledger wants, and reports every account it could not converge, which
the next run (a hook's child, cron's ``ledger enforce``) retries. What the site set stays the site's:
other TRES are never touched, and its GPU values are kept in the ledger (``site_limits``) while a
block replaces them, then put back. Everything is scoped by the ClusterName of the cluster the
configured commands talk to, since one slurmdbd may serve several clusters.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.parsers import format_tres, tres
from slurm_yolo.state import db, ledger

GPU_TRES = ("gres/gpu", "gres/shard")  # what a block sets to 0: whole GPUs and shares of one


class Change(NamedTuple):
    """One association changed: the account's GrpTRESRunMins before and after, as sacctmgr prints it."""

    account: str
    blocked: bool
    before: str
    after: str


class Outcome(NamedTuple):
    """What one ``sync`` did on ``cluster``, and one line for each account it left unconverged."""

    cluster: str
    changes: list[Change]
    errors: list[str]


def plan(
    current: Mapping[str, int], blocked: bool, kept: Mapping[str, int] | None
) -> tuple[dict[str, int], dict[str, int] | None]:
    """What to set on an association whose GrpTRESRunMins is ``current``, and the site's GPU values to
    keep meanwhile (``kept``: those kept so far; None: none are).

    Returns the TRES to set (minutes; -1 clears one) and the site's values to keep (None: nothing to
    keep any more). A 0 reads as a block (ours, or one an earlier release set without keeping
    anything): the site's value behind it is the one kept, else none. Any other GPU value is the
    site's, even under a block (an admin changed it since), and is what a lifted block leaves. An
    association that was never blocked is the site's alone: a funded account without kept values is
    left as it is, whatever its limits.
    """
    site: dict[str, int] = {}
    for name in GPU_TRES:
        value = current.get(name)
        if value == 0:
            value = (kept or {}).get(name)
        if value is not None:
            site[name] = value
    if blocked:
        return {name: 0 for name in GPU_TRES if current.get(name) != 0}, site
    if kept is None:
        return {}, None
    return {name: site.get(name, -1) for name in GPU_TRES if current.get(name) == 0}, None


def applied(current: Mapping[str, int], changes: Mapping[str, int]) -> dict[str, int]:
    """The limits after setting ``changes``: sacctmgr keeps the TRES not named; -1 clears one."""
    return {name: value for name, value in {**current, **changes}.items() if value != -1}


def sync(config: Config, accounts: list[str] | None) -> Outcome:
    """Converge the Slurm limits of these accounts (``None``: every account) on the ledger's state."""
    if not config.ledger.enforce or accounts == []:
        return Outcome("", [], [])
    if not ledger.exists(config):
        raise UsageError(f"no ledger yet at {ledger.where(config)}")
    bin_dir = config.bin_dir
    cluster = commands.cluster_name(bin_dir)
    with _one_at_a_time(config):
        with ledger.writer(config) as lg:  # a writer: it brings the schema up to date
            rows = lg.accounts() if accounts is None else [r for a in accounts if (r := lg.account(a))]
            kept = lg.site_limits(cluster)
        # an exempt account is never blocked: its jobs hold nothing, whatever its balance
        wanted = {r["name"]: bool(r["blocked"]) and not ledger.exempt("", r["name"], config) for r in rows}
        return _converge(config, cluster, wanted, kept, bin_dir)


@contextmanager
def _one_at_a_time(config: Config) -> Iterator[None]:
    """One ``sync`` at a time per ledger: racing hook children that read a block and its lifting in
    turn could otherwise lose the site's kept values (one keeps them, the other forgets them)."""
    with db.as_state_owner(config.state_dir, config.paths.owner):
        lock = db.make_private(config.state_dir) / "enforce.lock"
        db.create_private(lock)  # the owner's, whoever (root too) takes it
    with db.locked(lock, "ledger enforce"):
        yield


def _converge(config: Config, cluster: str, wanted: dict[str, bool], kept: dict[str, str], bin_dir: Path) -> Outcome:
    errors = []
    names = []
    for name in wanted:
        try:
            names.append(commands.plain_name(name))
        except UsageError as e:
            errors.append(f"ledger account {e}")  # "ledger account 'X' is not a plain Slurm name (...)"
    try:
        current = commands.account_run_mins(cluster, names, bin_dir) if names else {}
    except SlurmYoloError as e:
        return Outcome(cluster, [], errors + [_unconverged(cluster, n, wanted[n], e) for n in names])
    changes = []
    for name in names:
        if name not in current:
            continue  # no association on this cluster: none of its jobs run here
        try:
            change = _converge_one(config, cluster, name, wanted[name], current[name], kept.get(name), bin_dir)
        except SlurmYoloError as e:
            errors.append(_unconverged(cluster, name, wanted[name], e))
            continue
        if change:
            changes.append(change)
    return Outcome(cluster, changes, errors)


def _converge_one(
    config: Config,
    cluster: str,
    account: str,
    blocked: bool,
    current: dict[str, int],
    kept_text: str | None,
    bin_dir: Path,
) -> Change | None:
    """Keep the site's values before blocking and forget them only once the block is lifted, so a
    failure at any step leaves what the next run needs to finish the job."""
    kept = None if kept_text is None else tres(kept_text)
    to_set, keep = plan(current, blocked, kept)
    if keep is not None and keep != kept:
        with ledger.writer(config) as lg:
            lg.keep_site_limits(cluster, account, format_tres(keep))
    if to_set:
        commands.set_run_mins(cluster, account, to_set, bin_dir)
    if keep is None and kept is not None:
        with ledger.writer(config) as lg:
            lg.forget_site_limits(cluster, account)
    return Change(account, blocked, format_tres(current), format_tres(applied(current, to_set))) if to_set else None


def _unconverged(cluster: str, account: str, blocked: bool, e: SlurmYoloError) -> str:
    state = "dry" if blocked else "funded"
    return f"account {account}: the ledger says {state}, its limit on cluster {cluster} is not set: {e}"
