"""Slurm's own limits kept in step with the ledger: a dry account's GPU jobs do not start.

The ledger is the source of truth; Slurm enforces it (``GrpTRESRunMins`` of 0 on the account's
association, see ``slurm.commands.set_gpu_block``), so plain ``sbatch`` cannot bypass a budget.
"""

from __future__ import annotations

from pathlib import Path

from . import ledger
from .config import Config
from .errors import SlurmYoloError, UsageError
from .slurm import commands


def sync(config: Config, accounts: list[str] | None) -> None:
    """Set or lift each account's block from its ledger state (``None``: every account)."""
    if not config["ledger"]["enforce"] or accounts == []:
        return
    lg = ledger.reader(config)
    if lg is None:
        raise UsageError(f"no ledger yet at {ledger.db_path(config)}")
    with lg:
        rows = lg.accounts() if accounts is None else [r for a in accounts if (r := lg.account(a))]
    for r in rows:
        try:
            commands.set_gpu_block(r["name"], bool(r["blocked"]), Path(config["slurm"]["bin_dir"]))
        except SlurmYoloError as e:
            state = "dry" if r["blocked"] else "funded"
            raise SlurmYoloError(f"account {r['name']}: ledger says {state}, Slurm not updated: {e}") from None
