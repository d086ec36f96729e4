"""Alerts an admin acts on: budgets nearly spent, users refused again and again, k drifting, bad predictions,
GPUs of running jobs that idle or overheat.

Refusals are recorded by the trusted side alone: slurmctld's job_submit.lua appends one line per
refused submission to ``refusals.log`` in the state dir, a file of the state's owner (the SlurmUser):
``<epoch-seconds> <account> <uid> <need-tokens> <available-tokens>``. Nothing a user writes is read
here (yolo-sbatch's own, advisory refusals go to syslog), and the log is read as if it were hostile
anyway: no link, FIFO or device, only its owner's or root's, its tail alone.
"""

from __future__ import annotations

import errno
import itertools
import math
import pwd
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.admin import efficiency
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.parse import read_bytes
from slurm_yolo.parse.records import job_records
from slurm_yolo.slurm import commands
from slurm_yolo.state import availability, books, calibration, cost, ledger
from slurm_yolo.state.ledger import store

REFUSALS_TAIL_BYTES = 4 * 1024 * 1024  # ~40 bytes a refusal: the newest 100,000, weeks of them
_REFUSAL = re.compile(r"(\d{1,12}) (\S{1,200}) (\d{1,10}) (-?\d{1,20}) (-?\d{1,20})")


@dataclass(frozen=True)
class Alert:
    # budget, money, hook, books, audit, refusals, k-drift, limit, prediction, slurmdbd, gpu-idle, gpu-hot, slurmctld
    kind: str
    subject: str
    message: str


class Prediction(NamedTuple):
    """A recent job's prediction against its run: a requeued job's runs together."""

    job: int
    partition: str
    predicted: float  # seconds
    actual: float  # seconds, every run together
    missed: bool  # hit its limit: a TIMEOUT or a requeue for time
    limit: float | None = None  # its first run's limit, seconds (None: unknown)


class Refusal(NamedTuple):
    """One submission slurmctld refused for lack of tokens."""

    at: int  # epoch seconds
    account: str
    uid: int
    need: int  # tokens
    available: int  # tokens (negative when pending jobs already promise more than the balance)


def parse_refusals(text: str) -> list[Refusal]:
    """The well-formed lines of ``refusals.log`` text, in order; anything else is skipped."""
    out = []
    for line in text.split("\n"):
        m = _REFUSAL.fullmatch(line)
        if m and m.group(2).isprintable():
            out.append(Refusal(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5))))
    return out


def _trusted_uids(config: Config) -> frozenset[int]:
    """Who may have written the log: root and the state's owner (the SlurmUser slurmctld runs as)."""
    try:
        return frozenset({0, pwd.getpwnam(config.paths.owner).pw_uid})
    except KeyError:
        return frozenset({0})


def read_refusals(config: Config) -> list[Refusal]:
    """The refusals of the log's last ``REFUSALS_TAIL_BYTES`` (none when there is no log yet).
    OSError when the log is there but not the trusted side's regular file (it is then not read)."""
    try:
        data, size = read_bytes(availability.refusals_path(config), REFUSALS_TAIL_BYTES, _trusted_uids(config))
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace")
    if size > len(data):
        text = text.partition("\n")[2]  # the tail starts inside a line
    return parse_refusals(text)


def _members_only(refusals: list[Refusal], bin_dir: Path) -> list[Refusal]:
    """The refusals of users who may submit to the account: admission runs before Slurm checks the
    association, so anyone can be refused for anyone's account (one sacctmgr call per user)."""
    accounts: dict[int, set[str]] = {}
    for r in refusals:
        if r.uid not in accounts:
            try:
                accounts[r.uid] = set(commands.accounts_of(pwd.getpwuid(r.uid).pw_name, bin_dir))
            except (KeyError, SlurmYoloError):
                accounts[r.uid] = set()
    return [r for r in refusals if r.account in accounts[r.uid]]


def refusal_streaks(refusals: Iterable[Refusal], last_charge: Mapping[str, float], since: float) -> dict[str, int]:
    """Per account, how many refusals in a row since ``since``: a job charged later breaks a streak."""
    streaks: dict[str, int] = {}
    for r in refusals:
        if r.at >= max(since, last_charge.get(r.account, 0)):
            streaks[r.account] = streaks.get(r.account, 0) + 1
    return streaks


def check(
    config: Config,
    budget_share: float = 0.8,
    refusals: int = 3,
    drift: float = 0.3,
    error_bound: float = 0.5,
    predictions: Iterable[tuple[int, str, float, float, bool] | Prediction] | None = None,
    unreached: str = "",
    spend_per_week: float = 0.0,
) -> list[Alert]:
    """All current alerts. ``predictions`` are recent ``Prediction``s (a 5-tuple: no limit known);
    ``unreached``: why sacct gave none (slurmdbd down), itself an alert; ``spend_per_week``: the
    money (the partitions' cost_per_gpu_hour) an account's runs of the last 7 days may cost before
    it is an alert (0: no money alert)."""
    alerts = [Alert("slurmdbd", "sacct", f"did not answer: {unreached} (no prediction alerts)")] if unreached else []
    last_charge: dict[str, float] = {}
    lg = ledger.reader(config)
    if lg:
        try:
            last_charge.update(lg.last_charges())
            if spend_per_week > 0:
                alerts += money_alerts(config, lg.settled_since(time.time() - 7 * 86400), spend_per_week)
            for a in lg.accounts():
                if a["credited"] > 0 and a["charged"] + a["held"] >= budget_share * a["credited"]:
                    used = (a["charged"] + a["held"]) / a["credited"]
                    alerts.append(Alert("budget", a["name"], f"{used:.0%} of its tokens used or held"))
            for i in lg.open_incidents():
                alerts.append(
                    Alert(
                        "hook",
                        f"job {i['cluster']}:{i['job_id']}",
                        f"{i['event']} failed: {i['error']} (ledger reconcile settles its runs from sacct)",
                    )
                )
            stuck = [c for c in lg.unwritten_comments() if c["queued_at"] < time.time() - 3600]
            if stuck:
                alerts.append(
                    Alert(
                        "books",
                        "AdminComment",
                        f"{len(stuck)} settled job(s) without their AdminComment"
                        f" for over an hour (ledger comments): {stuck[0]['error'] or 'not tried yet'}",
                    )
                )
        finally:
            lg.close()
    audit = books.last(config)
    if audit and audit.findings:
        kinds = sorted({f.get("kind", "") for f in audit.findings})
        alerts.append(
            Alert(
                "audit",
                "sacct vs ledger",
                f"{len(audit.findings)} difference(s) ({', '.join(kinds)}) in the last audit (slurm-yolo ledger audit)",
            )
        )
    try:
        found = _members_only(read_refusals(config), config.bin_dir)
    except OSError as e:
        alerts.append(
            Alert(
                "refusals",
                str(availability.refusals_path(config)),
                f"not read: {e.strerror or errno.errorcode.get(e.errno or 0, e)}",
            )
        )
        found = []
    for account, n in refusal_streaks(found, last_charge, time.time() - 7 * 86400).items():
        if n >= refusals:
            alerts.append(Alert("refusals", account, f"{n} submissions refused in a row for lack of tokens"))
    alerts += drift_alerts(calibration.history(config), drift, time.time())
    for p in (Prediction(*t) for t in predictions or []):
        if p.missed:
            alerts.append(Alert("limit", f"job {p.job}", f"on {p.partition}: {_limit_line(p)}"))
        elif p.predicted > 0 and abs(p.actual - p.predicted) / p.predicted > error_bound:
            alerts.append(
                Alert(
                    "prediction",
                    f"job {p.job}",
                    f"on {p.partition}: predicted {p.predicted:.0f} s, ran {p.actual:.0f} s",
                )
            )
    return alerts


def _limit_line(p: Prediction) -> str:
    """Why a job hit its limit, in words: a limit its user set below the prediction is hers, not the
    model's miss."""
    line = f"hit its time limit (a TIMEOUT or a requeue for time); predicted {p.predicted:.0f} s, ran {p.actual:.0f} s in all"
    if p.limit is not None and 0 < p.limit < p.predicted:
        line += (
            f"; its user set its limit (-t {p.limit / 60:.0f} min) below the {p.predicted / 60:.0f} min predicted:"
            " the limit was hers, not the time model's"
        )
    return line


def _is_feedback(source: str) -> bool:
    """A save by a job's feedback (``job N``; a published copy says "a job's feedback")."""
    return source.startswith("job ") or source == "a job's feedback"


DRIFT_SAVES_NAMED = 3  # a k-drift alert names the admin saves that moved k most; the others it counts


def drift_causes(entries: list[calibration.HistoryEntry]) -> str:
    """What moved k over ``entries`` (a partition's history, oldest first, the first one the model
    before): each admin save (calibrate, recalibrate) with its own move, then the jobs' feedback
    together, the jobs named."""
    moves: list[tuple[float, int, str, float]] = []  # (how far, when, what, factor) of each admin save
    jobs, fed = [], 1.0
    for i, (before, h) in enumerate(itertools.pairwise(entries)):
        k0, k1 = before.model.k, h.model.k
        factor = k1 / k0 if k0 > 0 else 1.0
        if _is_feedback(h.source):
            fed *= factor
            jobs.append(h.source.removeprefix("job "))
        elif factor > 0 and factor != 1.0:
            moves.append((abs(math.log(factor)), i, f"{h.source} at {h.at} (k {k0:.4g} -> {k1:.4g})", factor))
    named_saves = sorted(sorted(moves, reverse=True)[:DRIFT_SAVES_NAMED], key=lambda m: m[1])
    saves = [m[2] for m in named_saves]
    rest = [m for m in moves if m not in named_saves]
    if rest:  # one line an admin reads: the largest saves named, the others counted
        saves.append(f"{len(rest)} other saves (k x{math.prod(m[3] for m in rest):.3f} together)")
    if jobs and fed != 1.0:
        named = [j for j in jobs if j.isdigit()]
        which = f"jobs {', '.join(named[:8])}{', ...' if len(named) > 8 else ''}" if named else f"{len(jobs)} jobs"
        saves.append(f"the feedback of {which} (k x{fed:.3f} together)")
    return "; ".join(saves) or "no save in the window changed k"


def drift_alerts(history: list[calibration.HistoryEntry], drift: float, now: float) -> list[Alert]:
    """A partition whose k moved by more than ``drift`` in the last 7 days, with what moved it."""
    week = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 7 * 86400))
    by_partition: dict[str, list[calibration.HistoryEntry]] = {}
    for h in history:
        by_partition.setdefault(h.partition, []).append(h)
    out = []
    for part, entries in by_partition.items():
        old = [i for i, h in enumerate(entries) if h.at <= week]
        start = old[-1] if old else 0
        k0, k1 = entries[start].model.k, entries[-1].model.k
        if k0 > 0 and abs(k1 / k0 - 1) > drift:
            why = drift_causes(entries[start:])
            out.append(Alert("k-drift", part, f"k moved {k1 / k0 - 1:+.0%} in a week ({k0:.4g} -> {k1:.4g}): by {why}"))
    return out


def gpu_alerts(config: Config, now: float | None = None) -> list[Alert]:
    """Running jobs whose GPUs idle or overheat, by their usage records (``efficiency.running_alerts``,
    thresholds in ``[efficiency]``); a job whose records say nothing of its GPUs is none. squeue not
    answering is itself an alert."""
    t = efficiency.thresholds(config)
    now = time.time() if now is None else now
    try:
        running = commands.running_jobs(bin_dir=config.bin_dir)
    except SlurmYoloError as e:
        return [Alert("slurmctld", "squeue", f"did not answer: {e} (no GPU alerts)")]
    out = []
    for row in running:
        if row["JobID"].isdigit():
            records = job_records(row["WorkDir"], int(row["JobID"]), row["UserName"])
            for kind, message in efficiency.running_alerts(records, now, t):
                out.append(Alert(kind, f"job {row['JobID']}", f"{row['UserName']}'s: {message}"))
    return out


def money_alerts(config: Config, runs: Iterable[store.Row], per_week: float) -> list[Alert]:
    """An alert per account whose runs settled in the last 7 days cost more than ``per_week``, in the
    config's currency. Runs of another cluster of a shared ledger cost at this config's partition
    costs only where this cluster has a partition of that name."""
    costs = {name: config.partition(name).cost_per_gpu_hour for name in config.partitions}
    rows = [(str(r["account"]), str(r["partition"]), float(r["gpus"]), int(r["elapsed"] or 0)) for r in runs]
    currency = config.ledger.currency
    return [
        Alert(
            "money",
            account,
            f"its runs of the last 7 days cost {cost.fmt_money(spent, currency)}, over the"
            f" {cost.fmt_money(per_week, currency)} a week alerts allows (--spend-per-week)",
        )
        for account, spent in sorted(cost.spend(rows, costs).items())
        if spent > per_week
    ]


def to_dicts(alerts: list[Alert]) -> list[dict[str, str]]:
    return [asdict(a) for a in alerts]


def mail(alerts: list[Alert], to: str, sendmail: str = "/usr/sbin/sendmail") -> None:
    """Send the alerts through the local MTA."""
    import subprocess

    body = "\n".join(f"[{a.kind}] {a.subject}: {a.message}" for a in alerts)
    msg = f"To: {to}\nSubject: slurm-yolo: {len(alerts)} alert(s)\n\n{body}\n"
    subprocess.run([sendmail, "-t"], input=msg, text=True, check=True, timeout=60)
