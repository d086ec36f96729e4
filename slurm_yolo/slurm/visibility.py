"""Who may see which account's balance, history and usage: Slurm's own rule, from the real uid.

Root, the SlurmUser (``paths.owner``) and Slurm operators and administrators see every account; an
account's coordinators see it (and its sub-accounts, which sacctmgr lists with it). When Slurm's
``PrivateData`` holds ``accounts`` or ``usage``, other users see only the accounts they have an
association with; without it anyone sees any account, as Slurm shows ``sshare`` to all.

This is the CLI's courtesy, not a secret: the ledger's published copy is world-readable, since every
user's yolo-sbatch reads balances from it on the login nodes. Jobs are kept out of it, and out of
calibration.db's copy, where PrivateData hides jobs or usage (``hides_jobs``). When slurmdbd does not answer (an
outage), a user is treated as holding no coordinator or operator role and no association, says so
(``Viewer.unreached``), and sees what the rule shows without them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError, UsageError
from slurm_yolo.slurm import commands

PRIVATE = frozenset({"accounts", "usage"})  # the PrivateData that hide other accounts
JOBS_PRIVATE = frozenset({"jobs", "usage"})  # the PrivateData that hide other users' jobs and what they used
ASKED_EVERY = 60.0  # seconds a process trusts the PrivateData it asked for (hookd publishes many times a minute)
_asked: dict[str, tuple[float, bool]] = {}
OPERATORS = frozenset({"operator", "administrator"})  # AdminLevels that see every account


class Viewer(NamedTuple):
    """Whoever runs this command, as far as the rule asks (``viewer`` leaves out what cannot matter)."""

    uid: int  # the real uid: never $USER, which anyone sets
    user: str
    owner: str  # the SlurmUser (paths.owner)
    admin_level: str = "None"
    private_data: frozenset[str] = frozenset()
    coordinated: frozenset[str] = frozenset()
    associated: frozenset[str] = frozenset()
    unreached: str = ""  # what could not be asked (slurmdbd down), for the command to say


def is_admin(v: Viewer) -> bool:
    """Root, the SlurmUser, or a Slurm operator or administrator: sees every account, always."""
    return v.uid == 0 or v.user == v.owner or v.admin_level.lower() in OPERATORS


def may_see(v: Viewer, account: str) -> bool:
    """Slurm's rule for one account (pure)."""
    return is_admin(v) or not (v.private_data & PRIVATE) or account in v.coordinated or account in v.associated


def visible(v: Viewer, accounts: Iterable[str]) -> set[str]:
    """The ones of ``accounts`` that ``v`` may see."""
    return {a for a in accounts if may_see(v, a)}


def require(v: Viewer, account: str) -> None:
    """UsageError unless ``v`` may see ``account``."""
    if not may_see(v, account):
        raise UsageError(
            f"account {account!r} is not one you may see ({v.user}: Slurm's PrivateData hides other accounts)"
        )


def require_admin(v: Viewer, what: str) -> None:
    """UsageError unless ``v`` sees every account: ``what`` is an admin's command."""
    if not is_admin(v):
        raise UsageError(f"{what} is for root, the SlurmUser and Slurm operators and administrators, not {v.user}")


def current_user() -> str:
    """Who runs this, from the real uid."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def viewer(config: Config) -> Viewer:
    """The facts the rule needs about whoever runs this. Slurm is asked only what can still change the
    answer: nothing for root and the SlurmUser, and no associations unless PrivateData hides accounts."""
    v = Viewer(os.getuid(), current_user(), config.paths.owner)
    if is_admin(v):
        return v
    bin_dir = config.bin_dir
    try:
        level, coordinated = commands.admin_level_and_coordinated(v.user, bin_dir)
        v = v._replace(admin_level=level, coordinated=coordinated)
    except SlurmError as e:
        v = v._replace(unreached=f"slurmdbd did not answer ({e})")
    if is_admin(v):
        return v
    v = v._replace(private_data=commands.private_data(bin_dir))
    if v.private_data & PRIVATE and not v.unreached:
        try:
            v = v._replace(associated=frozenset(commands.accounts_of(v.user, bin_dir)))
        except SlurmError as e:
            v = v._replace(unreached=f"slurmdbd did not answer ({e})")
    return v


def own_accounts(config: Config, v: Viewer) -> frozenset[str]:
    """The Slurm accounts ``v`` submits to (none asked for an admin, who sees every account anyway,
    nor when slurmdbd did not answer): a user's own account belongs in her list of balances even
    before the ledger has an entry for it."""
    if v.associated or is_admin(v) or v.unreached:
        return v.associated
    try:
        return frozenset(commands.accounts_of(v.user, config.bin_dir))
    except SlurmError:
        return frozenset()


def hides_jobs(config: Config) -> bool:
    """Whether the published copies (world-readable) must leave out each job's rows, users and
    summaries: Slurm's PrivateData hides jobs or usage from other users. When Slurm does not say
    (scontrol fails), they are left out: a copy never shows more than Slurm would."""
    bin_dir = str(config.slurm.bin_dir)
    at, hidden = _asked.get(bin_dir, (-ASKED_EVERY, True))
    if time.monotonic() - at >= ASKED_EVERY:
        try:
            hidden = bool(commands.private_data(Path(bin_dir)) & JOBS_PRIVATE)
        except SlurmError:
            hidden = True
        _asked[bin_dir] = (time.monotonic(), hidden)
    return hidden
