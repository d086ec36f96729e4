"""Alerts an admin acts on: budgets nearly spent, users refused again and again, k drifting, bad predictions.

yolo-sbatch drops one small file per refusal into ``refusals/`` under the state dir (a sticky,
write-only drop box, like /tmp): users cannot read or remove others' files, and a forged file can
only raise an alert.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from . import books, calibration, ledger
from .config import Config
from .parse import read_bytes

MAX_NOTES = 10_000  # the newest refusal notes read (the box is users' to fill)


@dataclass(frozen=True)
class Alert:
    kind: str  # budget, hook, refusals, k-drift, prediction
    subject: str
    message: str


def record_refusal(config: Config, account: str, user: str, need: int, left: int) -> None:
    """Drop a refusal note (best effort: a full or missing drop box must not break yolo-sbatch)."""
    box = config.state_dir / "refusals"
    try:
        fd = os.open(box / f"{time.time():.6f}-{os.getpid()}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"at": time.time(), "account": account, "user": user, "need": need, "left": left}, f)
    except OSError:
        pass


def refusal_streaks(config: Config, since: float) -> dict[str, int]:
    """Per account, how many refusals in a row since ``since`` (a job charged later breaks a streak)."""
    box = config.state_dir / "refusals"
    notes = []
    for p in sorted(box.glob("*.json"))[-MAX_NOTES:] if box.is_dir() else []:
        try:  # users write this box: a note is read bounded, never through a link, FIFO or device
            note = json.loads(read_bytes(p, 4096)[0])
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(note, dict) and isinstance(note.get("at"), (int, float)) and isinstance(note.get("account"), str):
            notes.append(note)
    last_charge: dict[str, float] = {}
    lg = ledger.reader(config)
    if lg:
        try:
            for r in lg.conn.execute("SELECT account, max(at) FROM movements WHERE kind = 'charge' GROUP BY account"):
                last_charge[r[0]] = r[1]
        finally:
            lg.close()
    streaks: dict[str, int] = {}
    for n in notes:
        if n["at"] >= max(since, last_charge.get(n["account"], 0)):
            streaks[str(n["account"])] = streaks.get(str(n["account"]), 0) + 1
    return streaks


def check(config: Config, budget_share: float = 0.8, refusals: int = 3, drift: float = 0.3, error_bound: float = 0.5,
          predictions: list[tuple[int, str, float, float]] | None = None) -> list[Alert]:  # fmt: skip
    """All current alerts. ``predictions`` are recent (job, partition, predicted s, actual s)."""
    alerts = []
    lg = ledger.reader(config)
    if lg:
        try:
            for a in lg.accounts():
                if a["credited"] > 0 and a["charged"] + a["held"] >= budget_share * a["credited"]:
                    used = (a["charged"] + a["held"]) / a["credited"]
                    alerts.append(Alert("budget", a["name"], f"{used:.0%} of its tokens used or held"))
            for i in lg.open_incidents():
                alerts.append(Alert("hook", f"job {i['cluster']}:{i['job_id']}",
                                    f"{i['event']} failed: {i['error']} (ledger reconcile settles its runs from sacct)"))  # fmt: skip
            stuck = [c for c in lg.unwritten_comments() if c["queued_at"] < time.time() - 3600]
            if stuck:
                alerts.append(Alert("books", "AdminComment", f"{len(stuck)} settled job(s) without their AdminComment"
                                    f" for over an hour (ledger comments): {stuck[0]['error'] or 'not tried yet'}"))  # fmt: skip
        finally:
            lg.close()
    audit = books.last(config)
    if audit and audit.get("findings"):
        found = audit["findings"]
        kinds = sorted({str(f.get("kind")) for f in found if isinstance(f, dict)})
        alerts.append(Alert("audit", "sacct vs ledger", f"{len(found)} difference(s) ({', '.join(kinds)}) in the last"
                            " audit (slurm-yolo ledger audit)"))  # fmt: skip
    for account, n in refusal_streaks(config, time.time() - 7 * 86400).items():
        if n >= refusals:
            alerts.append(Alert("refusals", account, f"{n} submissions refused in a row for lack of tokens"))
    week = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 7 * 86400))
    by_partition: dict[str, list[calibration.HistoryEntry]] = {}
    for h in calibration.history(config):
        by_partition.setdefault(h.partition, []).append(h)
    for part, entries in by_partition.items():
        old = [h for h in entries if h.at <= week] or entries[:1]
        k0, k1 = old[-1].model.k, entries[-1].model.k
        if k0 > 0 and abs(k1 / k0 - 1) > drift:
            alerts.append(Alert("k-drift", part, f"k moved {k1 / k0 - 1:+.0%} in a week ({k0:.4g} -> {k1:.4g})"))
    for job, part, pred, actual in predictions or []:
        if pred > 0 and abs(actual - pred) / pred > error_bound:
            alerts.append(Alert("prediction", f"job {job}", f"on {part}: predicted {pred:.0f} s, ran {actual:.0f} s"))
    return alerts


def to_dicts(alerts: list[Alert]) -> list[dict[str, str]]:
    return [asdict(a) for a in alerts]


def mail(alerts: list[Alert], to: str, sendmail: str = "/usr/sbin/sendmail") -> None:
    """Send the alerts through the local MTA."""
    import subprocess

    body = "\n".join(f"[{a.kind}] {a.subject}: {a.message}" for a in alerts)
    msg = f"To: {to}\nSubject: slurm-yolo: {len(alerts)} alert(s)\n\n{body}\n"
    subprocess.run([sendmail, "-t"], input=msg, text=True, check=True, timeout=60)



