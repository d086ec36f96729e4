"""Refusal alerts from slurmctld's refusals.log, read as a file that could be hostile (no cluster needed)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import REPO

from slurm_yolo.admin import alerts
from slurm_yolo.core import config as config_mod
from slurm_yolo.state import calibration, ledger


def refusals(home: Path) -> Path:
    """slurmctld's refusals.log in the home's private folder (made as slurmctld's writer would)."""
    folder = home / "private"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / "refusals.log"


def test_parse_refusals_keeps_well_formed_lines_only() -> None:
    text = "\n".join(
        [
            "1796000000 vision 1001 5000 -20",  # available is negative when pending jobs promise more than the balance
            "1796000001 vision 1001 5000",  # a field short
            "1796000002 vision 1001 5000 20 extra",
            "1796000003.5 vision 1001 5000 20",  # epoch seconds are whole
            "1796000004  vision 1001 5000 20",  # two spaces: an empty field
            "1796000005\tvision 1001 5000 20",
            "1796000006 vis\x07ion 1001 5000 20",
            "1796000007 vision 1001 " + "9" * 30 + " 20",
            "x vision 1001 5000 20",
            "",
            "1796000008 research 1002 7 0",
        ]
    )
    assert alerts.parse_refusals(text) == [
        alerts.Refusal(1796000000, "vision", 1001, 5000, -20),
        alerts.Refusal(1796000008, "research", 1002, 7, 0),
    ]


def test_streaks_count_refusals_since_the_last_charge() -> None:
    refusals = [
        alerts.Refusal(t, a, 1001, 10, 0)
        for t, a in ((100, "vision"), (200, "vision"), (300, "vision"), (150, "research"))
    ]
    assert alerts.refusal_streaks(refusals, {}, since=0) == {"vision": 3, "research": 1}
    assert alerts.refusal_streaks(refusals, {"vision": 250}, since=0) == {"vision": 1, "research": 1}
    assert alerts.refusal_streaks(refusals, {}, since=160) == {"vision": 2}


def refusal_alerts(config: config_mod.Config) -> list[alerts.Alert]:
    return [a for a in alerts.check(config, refusals=3) if a.kind == "refusals"]


def test_alerts_count_the_logs_refusals(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # alice (1001) may use vision, bob (1002) research: slurmdbd's word, stood in for (CI runs this
    # while chaos tests kill the bundled cluster's slurmdbd)
    mine = {"alice": ["vision"], "bob": ["research"]}
    monkeypatch.setattr(alerts.commands, "accounts_of", lambda user, bin_dir=None: mine.get(user, []))
    config = config_mod.load()
    now = int(time.time())
    lines = [f"{now - 60 + i} vision 1001 5000 {i}\n" for i in range(3)] + [f"{now} research 1002 5 0\n", "garbage\n"]
    (refusals(home)).write_text("".join(lines))
    assert refusal_alerts(config) == [
        alerts.Alert("refusals", "vision", "3 submissions refused in a row for lack of tokens")
    ]
    (refusals(home)).write_text(f"{now - 8 * 86400} vision 1001 5000 0\n" * 5)  # older than a week
    assert refusal_alerts(config) == []


def test_a_log_past_its_bound_is_read_from_its_tail(home: Path) -> None:
    """A 1 GB log (sparse here) costs the read of its last few MiB, whose cut first line is dropped."""
    now = int(time.time())
    with open(refusals(home), "wb") as f:
        f.truncate(1 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"".join(f"\n{now} vision 1001 5000 0".encode() for _ in range(4)) + b"\n")
    assert alerts.read_refusals(config_mod.load()) == [alerts.Refusal(now, "vision", 1001, 5000, 0)] * 4


@pytest.mark.parametrize("kind", ["fifo", "link", "alice"])
def test_a_log_that_is_not_the_trusted_sides_file_is_not_read(home: Path, kind: str) -> None:
    """A FIFO (it would block a plain open), a link (to /dev/zero, or to a file of the log's form) or a
    file of another owner: not read, and said so, at once."""
    log = refusals(home)
    good = home / "elsewhere.log"
    good.write_text(f"{int(time.time())} vision 1001 5000 0\n" * 3)
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "link":
        log.symlink_to(good)
    else:
        good.rename(log)
        os.chown(log, pwd.getpwnam("alice").pw_uid, -1)
    with pytest.raises(OSError):
        alerts.read_refusals(config_mod.load())
    found = refusal_alerts(config_mod.load())
    assert [(a.subject, a.message.split(":")[0]) for a in found] == [(str(log), "not read")]


@pytest.mark.cluster
def test_alerts_from_the_command_line_never_wait_on_a_fifo(cluster: object, home: Path) -> None:
    """`slurm-yolo alerts` answers at once with a FIFO for its log (subprocess: a hang would be killed)."""
    os.mkfifo(refusals(home))
    res = subprocess.run(
        [sys.executable, "-m", "slurm_yolo", "alerts", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert res.returncode == 1 and '"not read: not a regular file"' in res.stdout, res.stdout + res.stderr


def test_an_account_spending_past_its_weekly_amount_is_an_alert(home: Path) -> None:
    """Money alerts from the runs settled in the last 7 days: their GPU-hours (Slurm's elapsed x the
    GPU share) at each partition's cost_per_gpu_hour, worked out here by hand."""
    (home / "config.toml").write_text(
        '[ledger]\nenforce = false\ncurrency = "EUR"\n[partitions.t4]\ncost_per_gpu_hour = 0.5\n'
        "[partitions.a100]\ncost_per_gpu_hour = 2.5\n"
    )
    config = config_mod.load()
    now = int(time.time())
    runs = [  # account, partition, GPU share, elapsed seconds: 2 GPU-h of t4, 1/4 GPU-h of a100, 0.1 GPU-h of t4
        ("vision", "t4", Fraction(1), 7200),
        ("vision", "a100", Fraction(1, 4), 3600),
        ("research", "t4", Fraction(1), 360),
    ]
    with ledger.writer(config) as lg:
        for account in ("vision", "research"):
            lg.credit(account, 10**15, "test", "money alerts")
        for job, (account, partition, share, elapsed) in enumerate(runs, 1):
            run = ledger.Run("c", job, now, 0, account, "u", partition, "normal", share, 86400, 86400, 1, 10**6)
            lg.hold(run, 86400, None, "test")
            lg.settle(run.key, elapsed, "COMPLETED", elapsed, "test")
    spent = {"vision": 2 * 0.5 + 0.25 * 2.5, "research": 0.1 * 0.5}  # 1.625 and 0.05 EUR
    assert alerts.check(config, spend_per_week=1.6) == [
        alerts.Alert(
            "money",
            "vision",
            "its runs of the last 7 days cost 1.62 EUR, over the 1.60 EUR a week alerts allows (--spend-per-week)",
        )
    ]
    assert [a.subject for a in alerts.check(config, spend_per_week=0.04) if a.kind == "money"] == sorted(spent)
    assert not [a for a in alerts.check(config) if a.kind == "money"]  # no amount set: no money alert


def test_a_job_that_hit_its_limit_is_an_alert_of_its_own(home: Path) -> None:
    """A TIMEOUT, or a requeue for time, is an alert (the loop of issue 38 said nothing, or "predicted
    63 s, ran 13 s" of its last run alone); the job's runs together are what it ran."""
    config = config_mod.load()
    found = alerts.check(
        config,
        predictions=[(7, "t4", 63.0, 1050.0, True), (8, "t4", 100.0, 400.0, False), (9, "t4", 100.0, 110.0, False)],
    )
    assert [(a.kind, a.subject) for a in found if a.kind in ("limit", "prediction")] == [
        ("limit", "job 7"),
        ("prediction", "job 8"),
    ]
    assert next(a for a in found if a.kind == "limit").message == (
        "on t4: hit its time limit (a TIMEOUT or a requeue for time); predicted 63 s, ran 1050 s in all"
    )


def test_a_limit_its_user_set_below_the_prediction_is_named_as_hers(home: Path) -> None:
    """A job whose user gave -t 5 (min) for a run predicted at 20 minutes hit its limit: the alert says
    the limit was hers, not the model's miss; one whose limit was the plan's says nothing of it."""
    found = alerts.check(
        config_mod.load(),
        predictions=[
            alerts.Prediction(11, "t4", 1200.0, 300.0, True, 300.0),
            alerts.Prediction(12, "t4", 1200.0, 1500.0, True, 1500.0),
        ],
    )
    limits = {a.subject: a.message for a in found if a.kind == "limit"}
    assert limits["job 11"] == (
        "on t4: hit its time limit (a TIMEOUT or a requeue for time); predicted 1200 s, ran 300 s in all; its user"
        " set its limit (-t 5 min) below the 20 min predicted: the limit was hers, not the time model's"
    )
    assert limits["job 12"].endswith("predicted 1200 s, ran 1500 s in all")


def _save(config: config_mod.Config, k: float, source: str, uid: int | None = None) -> None:
    from dataclasses import replace

    from slurm_yolo.state import calibration

    with calibration.Store(config) as store:
        store.save("t4", replace(calibration.prior(config, "t4"), k=k), source, uid)


def test_k_drift_names_the_calibrate_that_moved_k(home: Path) -> None:
    """The issue's "[k-drift] t4: k moved -52% in a week (0.9636 -> 0.4596)" did not say that the
    admin's own calibrate did it."""
    config = config_mod.load()
    _save(config, 0.9636, "recalibrate")
    _save(config, 0.4596, "calibrate")
    (drift,) = [a for a in alerts.check(config) if a.kind == "k-drift"]
    assert drift.subject == "t4"
    assert drift.message.startswith("k moved -52% in a week (0.9636 -> 0.4596): by calibrate at 20")
    assert drift.message.endswith("(k 0.9636 -> 0.4596)")


def test_k_drift_names_the_jobs_whose_feedback_moved_k(home: Path) -> None:
    config = config_mod.load()
    _save(config, 1.0, "calibrate")
    for job, k in ((41, 1.1), (42, 1.21), (43, 1.331), (44, 1.4641)):
        _save(config, k, f"job {job}", uid=1000)
    (drift,) = [a for a in alerts.check(config) if a.kind == "k-drift"]
    assert drift.message == (
        "k moved +46% in a week (1 -> 1.464): by the feedback of jobs 41, 42, 43, 44 (k x1.464 together)"
    )


def test_k_drift_over_a_week_names_the_saves_inside_it_alone() -> None:
    """Entries older than the week are the baseline, not a cause: a recalibrate a month ago is not
    named, the week's calibrate and jobs are, each with its own move."""
    from dataclasses import replace

    from slurm_yolo.core.model.timemodel import TimeModel
    from slurm_yolo.state import calibration

    now = time.time()

    def at(days: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now - days * 86400))

    tm = TimeModel(k=1.0, overhead_seconds=5.0, val_weight=0.5, iteration_seconds=0.02, startup_seconds=20.0)
    history = [
        calibration.HistoryEntry("a100", at(30), "recalibrate", replace(tm, k=2.0)),
        calibration.HistoryEntry("a100", at(3), "calibrate", replace(tm, k=1.0)),
        calibration.HistoryEntry("a100", at(2), "job 7", replace(tm, k=1.1)),
    ]
    (drift,) = alerts.drift_alerts(history, 0.3, now)
    assert drift.message == (
        f"k moved -45% in a week (2 -> 1.1): by calibrate at {at(3)} (k 2 -> 1); the feedback of jobs 7 (k x1.100"
        " together)"
    )


def test_a_drift_alert_names_the_largest_saves_and_counts_the_others() -> None:
    """Many admin saves in a week: the alert stays one line an admin reads."""
    base = replace(calibration.prior(config_mod.load(None), "t4"), k=1.0)
    entries = [calibration.HistoryEntry("t4", "2026-12-01T00:00:00", "calibrate by root: 3 runs", base)]
    for i, k in enumerate([1.1, 1.0, 3.0, 2.9, 0.9, 0.95, 1.2]):
        entries.append(
            calibration.HistoryEntry("t4", f"2026-12-0{2 + i % 5}T00:00:0{i}", f"test: save {i}", replace(base, k=k))
        )
    why = alerts.drift_causes(entries)
    assert why.count("test: save") == 3 and "test: save 2 " in why and "test: save 4 " in why
    assert "; 4 other saves (k x" in why
