"""Nothing a user drops where the admin commands look can block or slow them: a FIFO, a 1 GB (sparse)
file and 10,000 files in each user-writable place that alerts, report and metrics read (the refusal
drop box earlier releases made, each job's work dir; metrics' textfile dir, which it writes) leave
their output as it was without them. Each command runs in a subprocess whose timeout would kill a hang."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, Slurm

from slurm_yolo.core import config as config_mod
from slurm_yolo.state import ledger

ALICE = pwd.getpwnam("alice")


def plant(folder: Path, name: str, junk: str) -> None:
    """Junk as alice would leave it: ``fifo`` or ``huge`` (1 GB, sparse) at ``name``, or ``many``
    (10,000 files beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name]
    if junk == "fifo":
        os.mkfifo(paths[0])
    elif junk == "huge":
        with open(paths[0], "wb") as f:
            f.truncate(1 << 30)
    else:
        paths = [folder / f"{name}.{i}" for i in range(10_000)]
        for p in paths:
            p.touch()
    for p in (folder, *paths):
        os.chown(p, ALICE.pw_uid, ALICE.pw_gid)


def slurm_yolo(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """This checkout's ``slurm-yolo ARGS``, killed (TimeoutExpired) if it does not finish in 30 s."""
    return subprocess.run(
        [sys.executable, "-m", "slurm_yolo", *args],
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/tmp",
        check=False,
    )


@pytest.fixture
def books(home: Path) -> dict[str, str]:
    """A home with a ledger, three refusals of vision in its refusals.log, a sacct that knows no jobs
    and a sacctmgr that knows alice and bob's accounts (the output depends on nothing else running on
    the cluster)."""
    fake = home / "bin"
    fake.mkdir()
    (fake / "sacct").write_text("#!/bin/sh\nexit 0\n")
    (fake / "sacct").chmod(0o755)
    # alice (uid 1001) may use vision: slurmdbd's word, stood in for (CI runs this while chaos tests
    # kill the bundled cluster's slurmdbd)
    (fake / "sacctmgr").write_text(
        '#!/bin/sh\ncase "$*" in *user=alice*) echo vision ;; *user=bob*) echo research ;; esac\n'
    )
    (fake / "sacctmgr").chmod(0o755)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{fake}"\n')
    with ledger.writer(config_mod.load()) as lg:
        lg.credit("vision", 5 * 10**9, "test", "hostile inputs")
        lg.credit("research", 10**9, "test", "hostile inputs")
    now = int(time.time())
    (home / "private" / "refusals.log").write_text(
        "".join(f"{now - i} vision 1001 7000000000 5000000000\n" for i in range(3))
    )
    return {**os.environ, "SLURM_YOLO_HOME": str(home)}


@pytest.mark.parametrize("junk", ["fifo", "huge", "many"])
def test_alerts(books: dict[str, str], home: Path, junk: str) -> None:
    before = slurm_yolo("alerts", "--json", env=books)
    assert before.returncode == 1 and json.loads(before.stdout) == [
        {"kind": "refusals", "subject": "vision", "message": "3 submissions refused in a row for lack of tokens"}
    ]
    plant(home / "refusals", "note.json", junk)  # the drop box of earlier releases, left on an upgraded host
    after = slurm_yolo("alerts", "--json", env=books)
    assert (after.returncode, after.stdout, after.stderr) == (before.returncode, before.stdout, before.stderr)


@pytest.mark.parametrize("junk", ["fifo", "huge", "many"])
def test_metrics(books: dict[str, str], home: Path, junk: str) -> None:
    """The textfile dir is node_exporter's, not users'; were it theirs, what they leave under the name
    of the file or of a temporary file it might use is neither written through nor waited on."""
    prom = home / "prom"
    assert slurm_yolo("metrics", "--textfile", str(prom), env=books).returncode == 0
    before = (prom / "slurm_yolo.prom").read_text()
    assert 'slurm_yolo_balance_tokens{account="vision"} 5e+09' in before
    shutil.rmtree(prom)
    if junk == "many":
        plant(prom, ".slurm_yolo.prom", junk)  # .slurm_yolo.prom.0 to .9999: earlier releases' temporary names
    else:
        for name in ("slurm_yolo.prom", *(f".slurm_yolo.prom.{pid}" for pid in range(os.getpid(), os.getpid() + 50))):
            plant(prom, name, junk)
    res = slurm_yolo("metrics", "--textfile", str(prom), env=books)
    assert res.returncode == 0, res.stderr
    assert (prom / "slurm_yolo.prom").read_text() == before
    assert os.stat(prom / "slurm_yolo.prom").st_mode & 0o777 == 0o644


@pytest.fixture
def alices_runs(cluster: Slurm) -> Iterator[tuple[dict[str, int], dict[str, Path], str]]:
    """Three finished, billed GPU jobs of alice's, each in a work dir of its own; only ``scored``
    left usage records (its final mAP50-95, 0.42)."""
    root = Path("/var/tmp/slurm-yolo-tests") / f"hostile-{os.getpid()}"
    dirs = {name: root / name for name in ("scored", "fifo", "huge")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, ALICE.pw_uid, ALICE.pw_gid)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    record = '{"kind":"epoch","epoch":1,"seconds":1,"images":4,"metrics":{"metrics/mAP50-95(B)":0.42}}'
    jobs = {}
    for name, d in dirs.items():
        script = f"echo '{record}' > yolo-usage-$SLURM_JOB_ID.jsonl; sleep 2" if name == "scored" else "sleep 2"
        jobs[name] = cluster.sbatch(
            "-A",
            "vision",
            "-p",
            "t4",
            "--gres=gpu:t4:1",
            "-t",
            "1",
            "--chdir",
            str(d),
            "--comment=yolo:tok=1,eff=1,pred_s=2,limit_s=60,k=1,gpus=1",
            script=script,
            user="alice",
        )
    try:
        for job in jobs.values():
            cluster.settled(job)
        yield jobs, dirs, start
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.cluster
def test_report(cluster: Slurm, alices_runs: tuple[dict[str, int], dict[str, Path], str]) -> None:
    """The report reads each yolo job's usage records in its work dir, which its user writes."""
    jobs, dirs, start = alices_runs
    env = {k: v for k, v in os.environ.items() if k != "SLURM_YOLO_HOME"} | {
        "SLURM_YOLO_CONFIG": str(cluster.config_path)
    }

    def roi() -> list[dict]:
        res = slurm_yolo("report", "--json", "--view", "roi", "--since", start, "-u", "alice", "-A", "vision", env=env)
        assert res.returncode == 0, res.stderr
        return [r for r in json.loads(res.stdout)["roi"] if r["job_id"] in jobs.values()]

    before = roi()
    assert [(r["job_id"], r["map50_95"]) for r in before] == [(jobs["scored"], 0.42)]
    plant(dirs["fifo"], f"yolo-usage-{jobs['fifo']}.jsonl", "fifo")
    plant(dirs["huge"], f"yolo-usage-{jobs['huge']}.jsonl", "huge")
    for d in dirs.values():
        plant(d, "junk", "many")
    assert roi() == before
