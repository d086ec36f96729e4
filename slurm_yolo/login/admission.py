"""Submit-time admission: refuse a job the account's tokens cannot cover (read-only on the ledger).

A job needs what its prolog will hold (its time limit x GPUs x the partition's price x the tier's
rate), not its estimate. What an account has left is its balance (running jobs' holds are already
out of it) minus the estimates of its pending jobs. Accounts without a ledger entry are not metered,
nor are the partitions and accounts the site exempts (``ledger.exempt_partitions``, ``exempt_accounts``).
"""

from __future__ import annotations

import os
import re

from slurm_yolo.core.billing import bucket, policy
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import QuotaError, UsageError
from slurm_yolo.core.model.estimate import fmt_pixels
from slurm_yolo.core.model.timemodel import UNCALIBRATED
from slurm_yolo.login.plan import Plan
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.visibility import current_user
from slurm_yolo.state import ledger
from slurm_yolo.state.cost import Quote

_AMOUNT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([kmgt]?)(?:tok)?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_tokens(text: str, allow_negative: bool = False) -> int:
    """``50G``, ``120M``, ``1.5GTok``, ``2000000`` as a whole number of tokens."""
    m = _AMOUNT.match(text.strip())
    if not m:
        raise UsageError(f"token amount {text!r} not understood (e.g. 50G, 120M, 1.5GTok)")
    value = round(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 0 and not allow_negative:
        raise UsageError(f"token amount {text!r} must not be negative")
    if abs(value) > 10**18:
        raise UsageError(f"token amount {text!r} is absurd")
    return value


def check(config: Config, plan: Plan, account: str | None, q: Quote) -> float:
    """Raise QuotaError when the job's hold (``q``, ``cost.quote``) does not fit, now or after the
    account's refill within ``ledger.credit_wait_minutes``; how many seconds it waits for that refill
    (0: it fits now, or the account is not metered). slurmctld's admission decides the same with the
    account's pending jobs counted, and sets the job's begin time."""
    lg = ledger.reader(config)
    if lg is None:
        return 0.0
    bin_dir = config.bin_dir
    try:
        name = account or commands.default_account(current_user(), bin_dir)
        row = lg.account(name)
        if row is None or ledger.exempt(plan.partition, name, config):
            return 0.0
    finally:
        lg.close()
    # The balance alone: the account's pending jobs are slurmctld's admission's to reckon, from their
    # own limits and GPUs (job_submit.lua); their comments are their users' text, never evidence here.
    need, left = q.hold_tokens, row["balance"]
    wait = bucket.seconds_to_cover(need, left, row["capacity"], row["rate_per_day"])
    max_wait = float(config.ledger.credit_wait_minutes) * 60
    if wait is not None and wait <= max_wait:
        return wait
    if need > left:
        _log_refusal(name, need, left)
        if wait is not None:
            refill = (
                f"refills {fmt_tokens(row['rate_per_day'])}/day, enough in {wait / 3600:.1f} h, longer than"
                f" a job may wait for credits here ({max_wait / 60:.0f} min): submit it then, or ask for a deposit"
            )
        elif row["rate_per_day"] > 0:
            refill = (
                f"its quota holds at most {fmt_tokens(row['capacity'])}, less than this hold: ask for a"
                " deposit, or a quota with a larger --burst"
            )
        else:
            refill = "no refill covers it: ask for a deposit"
        doubled = (
            f"; {plan.partition} is uncalibrated, so the limit is the prediction doubled (-t sets your own)"
            if plan.buffer_reason == UNCALIBRATED
            else ""
        )
        raise QuotaError(
            f"account {name} cannot cover this job: needs {fmt_tokens(need)} (what its start holds: "
            f"{plan.time_limit_seconds // 60} min x {q.gpu_share} GPU x {q.price:,} tokens/GPU-s x {policy.rate_text(q.rate_ppm)};"
            f" its work is {fmt_pixels(plan.work_pixels)}), has {fmt_tokens(max(0, left))} left; {refill}{doubled}"
        )
    return 0.0


def _log_refusal(account: str, need: int, left: int) -> None:
    """Tell syslog, best effort, and nothing else: this runs as the user, so what it writes is theirs to
    forge. The refusals ``slurm-yolo alerts`` counts are those slurmctld's job_submit.lua records."""
    import syslog

    try:
        syslog.openlog("slurm-yolo", 0, syslog.LOG_USER)
        syslog.syslog(
            syslog.LOG_USER | syslog.LOG_NOTICE,
            f"yolo-sbatch refused a job: account {account} uid {os.getuid()} needs {need} tokens, has {left}",
        )
    except (OSError, ValueError):  # no syslog socket; a NUL in the name
        pass
