"""Published copies follow Slurm's PrivateData, on the real bundled Slurm 22.05: where it hides jobs or
usage, no file a user can read names another user's jobs, and a user still learns her own job's charge
from Slurm, which shows its AdminComment only to those it lets see the job.

The bundled clusters set no PrivateData; this test's home asks a scontrol that reports
``PrivateData = accounts,jobs,usage`` (slurm-yolo learns PrivateData from ``scontrol show config``
alone). Its books are the home's own SQLite ledger, with a real job of alice's held and settled in it
and that job's summary fed back into the home's time model, as the hooks would.
"""

from __future__ import annotations

import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import REPO, Slurm, records, report_private_data

from slurm_yolo.controller import feedback
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import visibility
from slurm_yolo.state import calibration, db, ledger

pytestmark = pytest.mark.cluster


@pytest.fixture
def shared_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A SLURM_YOLO_HOME that other users can enter (pytest's own folders are root's alone), and none
    can rename or replace (sticky /var/tmp)."""
    home = Path(tempfile.mkdtemp(prefix="slurm-yolo-private-", dir="/var/tmp"))
    home.chmod(0o755)
    monkeypatch.setenv("SLURM_YOLO_HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def alices_job(cluster: Slurm, home: Path) -> int:
    """A real job of alice's (held, then cancelled), held, settled and fed back in this home's books."""
    job = cluster.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", "--hold", script="true", user="alice")
    cluster.cmd("scancel", str(job))
    cfg = config_mod.load()
    run = ledger.Run(
        cluster.name, job, int(time.time()), 0, "vision", "alice", "t4", "", Fraction(1), 60, 60, 1000, 1_000_000
    )
    with ledger.writer(cfg) as lg:
        lg.credit("vision", 10**9, "test")
        assert lg.hold(run, 60_000, None, "prolog")[0]
        assert lg.settle(run.key, 5_000, "COMPLETED", 5, "settler") is not None
    usage = home / f"yolo-usage-{job}.jsonl"
    usage.write_text(records([1.0, 1.5]))
    posted = beacon.from_records(usage, int(time.time()))
    assert posted is not None
    summary = beacon.decode(beacon.summary_text(beacon.with_beacon("yolo:eff=1", posted)))
    fb = feedback.job_feedback(cfg, "t4", job, summary, cluster.name, pwd.getpwnam("alice").pw_uid, 5)
    assert fb is not None
    usage.unlink()
    return job


def as_bob(path: Path) -> bytes:
    res = subprocess.run(["/usr/sbin/runuser", "-u", "bob", "--", "cat", str(path)], capture_output=True, check=True)
    return res.stdout


def published(cfg: config_mod.Config) -> list[Path]:
    return [cfg.public_dir / n for n in (*db.PUBLISHED, "availability")]


@pytest.mark.parametrize("private", ["accounts,jobs,usage", "none"])
def test_published_copies_name_no_other_users_jobs_where_slurm_hides_them(
    cluster: Slurm, shared_home: Path, private: str
) -> None:
    home = shared_home
    report_private_data(home, private)
    cfg = config_mod.load()
    assert visibility.hides_jobs(cfg) == (private != "none")
    job = alices_job(cluster, home)
    key = f"{cluster.name}:{job}:".encode()
    seen = b"".join(as_bob(p) for p in published(cfg))  # bob reads every published file
    if private == "none":  # as Slurm shows anyone's jobs: the copies say whose this one was
        assert b"alice" in seen and key in seen
        return
    assert b"alice" not in seen and key not in seen and f"job {job}".encode() not in seen
    copy = sqlite3.connect(f"file:{cfg.public_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        assert copy.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
        assert copy.execute(
            "SELECT count(*) FROM movements WHERE user IS NOT NULL OR job_key IS NOT NULL"
        ).fetchone() == (0,)
        # the balance a login node plans with stays: the deposit, less the charge
        assert copy.execute("SELECT balance FROM accounts WHERE name = 'vision'").fetchone() == (10**9 - 5_000,)
    finally:
        copy.close()
    copy = sqlite3.connect(f"file:{cfg.public_dir / 'calibration.db'}?mode=ro", uri=True)
    try:
        assert copy.execute("SELECT (SELECT count(*) FROM samples) + (SELECT count(*) FROM moves)").fetchone() == (0,)
        assert copy.execute("SELECT count(*) FROM history WHERE uid IS NOT NULL").fetchone() == (0,)
    finally:
        copy.close()
    assert calibration.load(cfg, "t4").model.k != 1.0  # the model the feedback moved is published, without whose it was
    lg = ledger.reader(cfg)  # root reads the books themselves: everything is there
    assert lg is not None
    with lg:
        assert [r["user"] for r in lg.runs(job, cluster.name)] == ["alice"]


def test_alice_learns_her_own_charge_from_slurm_where_the_copy_has_no_jobs(cluster: Slurm) -> None:
    """A job billed by the cluster's own hooks; alice (not root) reads its settlement the way
    ``yolo-sbatch --wait`` does where the published ledger has no job rows: from its AdminComment."""
    job = cluster.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 1", user="alice")
    (run,) = cluster.settled(job)
    code = (
        "import sys, time; from slurm_yolo.core import config; from slurm_yolo.login import submission\n"
        "print(submission.settlement_from_slurm(config.load(), int(sys.argv[1]), sys.argv[2], 0,"
        " time.monotonic() + 60, 0.5))"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": str(REPO),
        "SLURM_YOLO_CONFIG": str(cluster.config_path),
    }
    res = subprocess.run(
        ["/usr/sbin/runuser", "-u", "alice", "--", sys.executable, "-c", code, str(job), cluster.name],
        env=env,
        capture_output=True,
        text=True,
        cwd="/tmp",
        timeout=120,
        check=True,
    )
    assert res.stdout.strip() == (
        f"job {job}: charged {fmt_tokens(run['charge'])} of budget, {fmt_tokens(run['refund'])} of its"
        f" {fmt_tokens(run['hold'])} hold back (its AdminComment: this cluster's PrivateData keeps jobs out of the"
        " published ledger)"
    ), res.stderr
