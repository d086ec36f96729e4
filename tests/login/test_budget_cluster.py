"""Budgets that hold, on the real bundled clusters (Slurm 22.05 and 24.11): slurmctld's own
job_submit.lua refuses what an account cannot cover, for plain sbatch, srun and salloc; racing
submissions never take an account below zero; runs that end while slurmdbd is down are settled
once it is back, with the refund their end state deserves and their AdminComment.

Every expected amount is worked out here from the prices this test's admin set (``conftest.PRICE``)
and slurmdbd's own record of the run, read without slurm-yolo's parsers. The bound tested: an
account's balance (what it has beyond its holds) never goes below zero through admitted runs; only
a run's overrun past its time limit could take it lower, and these runs end within their limits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PRICE, REPO, VENV_BIN, Slurm, balance_path, fund, last_movement, nothing_pending, poll

from slurm_yolo.core.synthetic import make_dataset
from slurm_yolo.state import ledger

pytestmark = pytest.mark.cluster
A100 = PRICE["a100"]


def wait_running(slurm: Slurm, job: int) -> None:
    poll("job running", lambda: slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip() == "RUNNING", 120)


def gone_from_controller(slurm: Slurm, job: int, timeout: float = 240) -> None:
    poll(
        "job ended in slurmctld",
        lambda: (
            slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip()
            in ("", "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "FAILED")
        ),
        timeout,
    )


@pytest.fixture
def lean(priced: Slurm) -> Iterator[Slurm]:
    """The cluster with a100 priced as PRICE says (no later rise scheduled), vision's jobs gone before and after."""
    prices = json.loads(priced.cli("ledger", "price", "show", "--json").stdout)["prices"]
    later = [p for p in prices if p["partition"] == "a100" and p.get("effective_at", 0) > time.time()]
    assert not later, f"an a100 price rise is scheduled on this cluster: {later}"
    nothing_pending(priced, "vision")
    yield priced
    priced.cmd("scancel", "-A", "vision", check=False)
    fund(priced, ("vision",), 10**15)
    with priced.ledger() as lg:
        assert lg.check() == []


def test_plain_submissions_beyond_what_is_left_are_refused_at_submit(lean: Slurm) -> None:
    day = 86400 * 1 * A100  # what a one-day one-GPU a100 job may cost
    fund(lean, ("vision",), day - 1)
    before = last_movement(lean, "vision")
    for argv in (["sbatch", "-o", "/dev/null", "--wrap", "true"], ["srun", "true"], ["salloc", "true"]):
        res = lean.cmd(
            argv[0],
            "-A",
            "vision",
            "-p",
            "a100",
            "--gres=gpu:a100:1",
            "-t",
            "1-0",
            *argv[1:],
            user="alice",
            check=False,
        )
        assert res.returncode != 0, res.stdout
        assert (
            f"account vision cannot cover this job: its worst case is {day:,} tokens" in res.stderr
            and f"the account has {day - 1:,} left" in res.stderr
        ), res.stderr
    refusals = [line.split() for line in (lean.state_dir / "private" / "refusals.log").read_text().splitlines()[-3:]]
    assert [(r[1], r[3], r[4]) for r in refusals] == [("vision", str(day), str(day - 1))] * 3  # account, need, left
    assert all(r[2].isdigit() and r[2] != "0" for r in refusals)  # alice's uid
    # two GPUs for a minute fit; it starts, holds exactly its worst case, and pays what it ran
    job = lean.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:2", "-t", "1", script="sleep 1", user="alice")
    row = lean.settled(job)[0]
    ran = int(lean.ended(job)[0]["ElapsedRaw"])
    assert (row["hold"], row["charge"], row["end_state"]) == (60 * 2 * A100, ran * 2 * A100, "COMPLETED")
    assert min(balance_path(lean, "vision", before)) >= 0


def test_a_pending_job_cannot_be_made_dearer_by_its_user(lean: Slurm) -> None:
    fund(lean, ("vision",), 10**12)
    job = lean.sbatch(
        "-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "5", "--hold", script="true", user="alice"
    )
    before = lean.cmd("squeue", "-h", "-j", str(job), "-O", "tres-alloc:|,Partition:|,NumNodes:|").stdout
    for change in ("gres=gpu:a100:2", "partition=t4", "numnodes=2"):
        res = lean.cmd("scontrol", "update", f"jobid={job}", change, user="alice", check=False)
        assert res.returncode != 0 and "denied" in res.stderr.lower(), (change, res.stderr)
    assert lean.cmd("squeue", "-h", "-j", str(job), "-O", "tres-alloc:|,Partition:|,NumNodes:|").stdout == before
    assert lean.cmd("scontrol", "update", f"jobid={job}", "timelimit=2", user="alice", check=False).returncode == 0
    lean.cmd("scancel", str(job))


def test_what_slurm_grants_beyond_the_request_is_counted_too(lean: Slurm) -> None:
    """--exclusive gets every GPU of its node, an array spec in brackets every task, a job without a
    time limit the hold's: each worst case as the prolog will hold it, refused beyond the balance."""
    fund(lean, ("vision",), 2 * 60 * A100 - 1)  # less than one minute of the node's two GPUs
    for args, worst in ((["--exclusive"], 2 * 60 * A100), (["--gres=gpu:a100:1", "--array=[0-9]"], 10 * 60 * A100)):
        res = lean.cmd(
            "sbatch", "-A", "vision", "-p", "a100", "-t", "1", *args, "--wrap", "true", user="alice", check=False
        )
        assert res.returncode != 0 and f"its worst case is {worst:,} tokens" in res.stderr, (args, res.stderr)
    fund(lean, ("vision",), 10**15)
    job = lean.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "--hold", script="true", user="alice")
    limit = lean.cmd("squeue", "-h", "-j", str(job), "-o", "%l").stdout.strip()
    assert limit == "7-00:00:00"  # ledger.unlimited_hold_hours, 168
    for longer in ("TimeLimit=UNLIMITED", "TimeLimit=8-00:00:00"):
        assert lean.cmd("scontrol", "update", f"jobid={job}", longer, user="alice", check=False).returncode != 0
    assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%l").stdout.strip() == limit
    lean.cmd("scancel", str(job))


def test_twenty_submissions_racing_for_the_last_tokens_never_overdraw(lean: Slurm) -> None:
    worst = 60 * 1 * A100  # -t 1 on one a100 GPU
    fund(lean, ("vision",), 4 * worst + worst // 2)  # four fit, with half a fifth to spare
    time.sleep(3)  # admission counts its own admissions of the last two seconds (the last test's too)
    before = last_movement(lean, "vision")
    results: list[subprocess.CompletedProcess[str]] = []
    lock = threading.Lock()

    def submit() -> None:
        res = lean.cmd(
            "sbatch",
            "--parsable",
            "-o",
            "/dev/null",
            "-A",
            "vision",
            "-p",
            "a100",
            "--gres=gpu:a100:1",
            "-t",
            "1",
            user="alice",
            input="#!/bin/bash\nsleep 2\n",
            check=False,
        )
        with lock:
            results.append(res)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [int(r.stdout.strip().split(";")[0]) for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode != 0]
    assert 1 <= len(admitted) <= 4 and len(refused) == 20 - len(admitted)
    assert all("account vision cannot cover this job" in r.stderr for r in refused)
    charged = 0
    for job in admitted:
        row = lean.settled(job, timeout=240)[0]
        ran = int(lean.ended(job)[0]["ElapsedRaw"])
        assert (row["hold"], row["charge"]) == (worst, ran * A100)
        charged += ran * A100
    path = balance_path(lean, "vision", before)
    assert min(path) >= 0  # the stated bound: never below zero (no run outlived its limit)
    assert lean.ledger().account("vision")["balance"] == 4 * worst + worst // 2 - charged


def test_a_run_its_account_no_longer_covers_is_cancelled_at_start(lean: Slurm) -> None:
    fund(lean, ("vision",), 10**12)
    job = lean.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "10", "--hold", script="sleep 60")
    fund(lean, ("vision",), 600 * A100 // 2)  # admitted; then half its worst case is all that is left
    lean.cmd("scontrol", "release", str(job))
    row = lean.settled(job, timeout=120)[0]
    rec = lean.ended(job)[0]
    assert rec["State"].startswith("CANCELLED") and int(rec["ElapsedRaw"]) < 30
    assert (row["hold"], row["charge"]) == (600 * A100, int(rec["ElapsedRaw"]) * A100)


def test_a_job_the_refill_covers_soon_waits_for_credits_then_starts_by_itself(lean: Slurm) -> None:
    """An account short of a GPU job's worst case whose quota refills the rest within the config's
    ``credit_wait_minutes`` (60 on the bundled clusters): plain sbatch is accepted and told when, the
    job pends on BeginTime until the refill covers it, starts by itself, and pays its elapsed time as
    any run; the account never goes below zero. A job the bucket could never hold is refused with its
    numbers, as before; yolo-sbatch on a login node, behind the waiting job, says until when it waits."""
    worst = 60 * A100  # -t 1 on one a100, QOS normal (rate 1)
    fund(lean, ("vision",), worst // 2)
    per_day = worst // 2 * 86400 // 40  # the other half in about 40 s from now
    refilling = time.time()  # the bucket refills from its quota's start, not from the submission (seconds later
    with ledger.writer(lean.config()) as lg:  # when the machine is busy)
        lg.set_quota("vision", per_day, 10 * worst, "test")
    before = last_movement(lean, "vision")
    res = lean.cmd(
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-A",
        "vision",
        "-p",
        "a100",
        "--gres=gpu:a100:1",
        "-t",
        "1",
        user="alice",
        input="#!/bin/bash\nsleep 1\n",
    )
    job = int(res.stdout.strip().split(";")[0])
    assert "slurm-yolo: account vision waits for credits: its refill covers this job by " in res.stderr, res.stderr
    assert "starts by itself (squeue: BeginTime)" in res.stderr
    assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%T %r").stdout.split() == ["PENDING", "BeginTime"]
    sooner = lean.cmd("scontrol", "update", f"jobid={job}", "StartTime=now", user="alice", check=False)
    # a hostile helper's: started early, it ran uncovered until the prolog cancelled it (22.05's scontrol
    # prints only "Access/permission denied", 24.11's the script's reason)
    assert sooner.returncode != 0 and (
        "begin time can only move later" in sooner.stderr or "Access/permission denied" in sooner.stderr
    ), sooner
    assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%T %r").stdout.split() == ["PENDING", "BeginTime"]
    never = lean.cmd(
        "sbatch",
        "-A",
        "vision",
        "-p",
        "a100",
        "--gres=gpu:a100:2",
        "-t",
        "10",
        "--wrap",
        "true",
        user="alice",
        check=False,
    )
    assert never.returncode != 0 and f"cannot cover this job: its worst case is {20 * worst:,}" in never.stderr
    work = Path(tempfile.mkdtemp(dir="/tmp/slurm-yolo-users"))  # yolo-sbatch on a login node, behind that job
    try:
        work.chmod(0o755)
        data = make_dataset(work, train=8, val=4, size=64)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        words = ["-A", "vision", "-p", "t4", "train", "model=yolov8n.yaml", f"data={data}", "epochs=1", "imgsz=64"]
        res = on_a_login_node(lean, work, "--json", *words)
        assert res.returncode == 0, res.stderr
        behind = json.loads(res.stdout)
        assert behind["waits_for_credits_until"] > time.time() + 30, behind  # the begin time slurmctld gave it
        assert (
            "slurm-yolo: account vision waits for credits: its refill covers this job by " in res.stderr
        )  # slurmctld's
        lean.cmd("scancel", str(behind["job_id"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row = lean.settled(job, timeout=240)[0]
    rec = lean.ended(job)[0]
    start = time.mktime(time.strptime(rec["Start"], "%Y-%m-%dT%H:%M:%S"))
    assert rec["State"] == "COMPLETED" and start >= int(refilling) + 38, (rec, refilling)  # not before the refill
    assert (row["hold"], row["charge"]) == (worst, int(rec["ElapsedRaw"]) * A100)
    assert min(balance_path(lean, "vision", before)) >= 0


def _cluster_state(slurm: Slurm) -> Path:
    """The cluster's own state folder (its daemons' pid files), from its marker."""
    marker = json.loads(Path(f"/var/lib/slurm-yolo-cluster/clusters/{slurm.release}.json").read_text())
    return Path(marker["state_dir"]).parent.parent  # <cluster state>/slurm-yolo/state


def _slurmdbd_pid(slurm: Slurm) -> int:
    return int((_cluster_state(slurm) / "run" / "slurmdbd.pid").read_text())


def _up(slurm: Slurm) -> None:
    """Bring back whatever is down (the daemons killed here are gone first: ``_stop``)."""
    res = subprocess.run(
        [str(REPO / "deploy" / "minicluster"), "up", slurm.release], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, f"minicluster up {slurm.release}: {res.stdout}{res.stderr}"


def _stop(pid: int, sig: signal.Signals) -> None:
    """Signal a daemon and wait until it is gone (a zombie is gone): ``deploy/minicluster up`` takes a
    daemon still exiting for one that runs, and would not start it again."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)

    def gone() -> bool:
        try:
            return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
        except OSError:
            return True

    poll(f"process {pid} gone", gone, timeout=60)


@pytest.mark.parametrize("cause", ["NODE_FAIL", "PREEMPTED", "TIMEOUT"])
def test_a_run_that_ends_while_slurmdbd_is_down_is_settled_once_it_is_back(lean: Slurm, cause: str) -> None:
    fund(lean, ("vision",), 10**12)
    limit = 1 if cause == "TIMEOUT" else 5
    job = lean.sbatch(
        "-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", str(limit), "--no-requeue", script="sleep 400"
    )
    wait_running(lean, job)
    hold = limit * 60 * A100
    _stop(_slurmdbd_pid(lean), signal.SIGTERM)
    preemptor = None
    try:
        if cause == "NODE_FAIL":
            lean.cmd("scontrol", "update", "nodename=gpu-a100-1", "state=down", "reason=budget-test")
        elif cause == "PREEMPTED":
            preemptor = lean.sbatch(
                "-A", "vision", "-p", "a100", "--qos=yolo-preempt", "--gres=gpu:a100:2", "-t", "1", script="sleep 1"
            )
        gone_from_controller(lean, job)

        def asked() -> bool:  # the settler has asked sacct (down) for the epilog's row, and waits
            with lean.ledger() as lg:
                return any(r["attempts"] >= 1 for r in lg.due(None, 10, job=(lean.name, job)))

        poll(f"job {job}'s epilog waiting for sacct", asked, timeout=60)
        assert [r["state"] for r in lean.runs(job)] == ["held"]
    finally:
        if cause == "NODE_FAIL":
            lean.cmd("scontrol", "update", "nodename=gpu-a100-1", "state=resume", check=False)
        _up(lean)
    rec = lean.ended(job)[0]
    assert rec["State"].split(" ")[0] == cause
    lean.cli("ledger", "reconcile")  # cron's (the epilog's own child may have been first)
    row = lean.settled(job)[0]
    ran = int(rec["ElapsedRaw"])
    due = {"NODE_FAIL": 0, "PREEMPTED": ran * A100, "TIMEOUT": max(hold, ran * A100)}[cause]  # policy.charge's rules
    refund = max(0, hold - due)  # a TIMEOUT run ends some seconds past its limit: those are its overrun
    assert (row["end_state"], row["hold"], row["charge"], row["refund"]) == (cause, hold, due, refund)
    with lean.ledger() as lg:
        kinds = [m["kind"] for m in lg.job_movements(job, lean.name)]
    assert sorted(kinds) == ["charge", "hold", *(["overrun"] if due > hold else []), "refund"]  # once
    lean.cli("ledger", "comments", check=False)
    comment = poll(
        "AdminComment",
        lambda: (
            (c := lean.cmd("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "AdminComment").stdout.strip()).startswith(
                "yolo:"
            )
            and c
        ),
        60,
    )
    assert f"run={row['submit_time']},".lower() in comment.lower()
    assert f",hold={hold},charge={due},refund={refund}," in comment and f"state={cause}".lower() in comment.lower()
    if preemptor:
        lean.settled(preemptor)


def _kill(pidfile: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        _stop(int(pidfile.read_text()), signal.SIGKILL)


def _kill_hooks_of(slurm: Slurm, patterns: tuple[str, ...]) -> None:
    """SIGKILL this cluster's processes whose command line holds one of ``patterns``: those started
    with its hooks' config (the other cluster's hooks, and the unit tests' that ``deploy/test`` runs
    alongside, are left alone)."""
    mine = f"SLURM_YOLO_CONFIG={slurm.config_path}".encode()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(p in cmdline for p in patterns) and mine in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue  # not a process, or gone meanwhile


def submit_through_restarts(slurm: Slurm, *args: str, script: str) -> int:
    """sbatch, again while a shared ledger's admission cannot answer (hookd killed, not yet back): a GPU
    job is then refused, never admitted unchecked, and a user tries again. So does a user whose sbatch
    lost slurmctld's answer (slurmctld held up past MessageTimeout on a busy 2-core machine while
    slurmdbd comes and goes): a job created all the same is not in the returned list, but still in
    the queue the test waits to empty and in the audit, which covers every job since the start."""

    def submitted() -> int | None:
        res = slurm.cmd("sbatch", "--parsable", "-o", "/dev/null", *args, input=f"#!/bin/bash\n{script}\n", check=False)
        if res.returncode == 0:
            return int(res.stdout.strip().split(";")[0])
        assert any(
            why in res.stderr
            for why in (
                "the shared token ledger did not answer",
                "Zero Bytes were transmitted or received",
                "Socket timed out on send/recv operation",
            )
        ), res.stderr
        return None

    return poll("the submission admitted", submitted, timeout=120)


def test_chaos_over_200_jobs_leaves_sacct_and_the_ledger_in_agreement(lean: Slurm) -> None:
    """slurmdbd, hookd and epilogs (with the children they leave) killed at random points while 200
    real GPU jobs run; once everything is back, cron's reconcile and comments, then the audit finds
    no difference between sacct and the ledger, and the ledger's own books balance."""
    import random

    fund(lean, ("vision",), 10**15)
    rng = random.Random(int(time.time()))
    since = int(time.time()) - 2
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    stop = threading.Event()
    done: list[str] = []
    state = _cluster_state(lean)

    def chaos() -> None:
        first = rng.sample(["slurmdbd", "hookd", "epilog"], 3)  # each at least once, in a random order
        while not stop.wait(rng.uniform(1.0, 4.0)):
            what = first.pop() if first else rng.choice(["slurmdbd", "hookd", "epilog", "epilog"])
            if what == "slurmdbd":
                _kill(state / "run" / "slurmdbd.pid")
                stop.wait(rng.uniform(1.0, 6.0))
                _up(lean)
            elif what == "hookd":
                _kill(state / "run" / "hookd.pid")
                stop.wait(rng.uniform(0.5, 3.0))
                _up(lean)
            else:  # the epilogs running now, and the children they left to finish their work
                _kill_hooks_of(
                    lean,
                    (
                        "slurm-yolo-hook epilog",
                        "slurm_yolo.controller.hook_entry import epilog_main",
                        "slurm_yolo ledger reconcile --job",
                        "slurm_yolo ledger comments",
                    ),
                )
            done.append(what)

    chaos_thread = threading.Thread(target=chaos)
    chaos_thread.start()
    jobs = []
    try:
        for _ in range(200):
            gres = rng.choice(["--gres=shard:a100:1", "--gres=shard:t4:1", "--gres=gpu:a100:1", "--gres=gpu:t4:1"])
            part = "a100" if "a100" in gres else "t4"
            script = rng.choice(["sleep 1", "sleep 2", "true", "exit 3"])
            jobs.append(submit_through_restarts(lean, "-A", "vision", "-p", part, gres, "-t", "1", script=script))
            time.sleep(rng.uniform(0, 0.2))
        poll(
            "the 200 jobs gone from slurmctld, every kind of failure done",
            lambda: (
                {"slurmdbd", "hookd", "epilog"} <= set(done)
                and not lean.cmd("squeue", "-h", "-A", "vision", "-o", "%i", check=False).stdout.strip()
            ),
            900,
        )
    finally:
        stop.set()
        chaos_thread.join()
        _up(lean)
    assert {"slurmdbd", "hookd", "epilog"} <= set(done), done
    for job in jobs:
        lean.ended(job, timeout=300)

    def runs() -> list[dict[str, Any]]:  # this test's (a job id may have come before, under another submit time)
        with lean.ledger() as lg:
            return [dict(r) for j in jobs for r in lg.runs(j, lean.name) if r["submit_time"] >= since]

    def audited() -> bool:
        """cron's reconcile and comments, then the audit; and every run settled: a run whose end
        slurmdbd has not recorded yet (it was down) is rightly still held, and the audit agrees."""
        lean.cli("ledger", "reconcile", "--window-days", "1", check=False)
        lean.cli("ledger", "comments", check=False)
        clean = lean.cli("ledger", "audit", "--since", start, "--min-age", "0", check=False).returncode == 0
        return clean and all(r["state"] == "settled" for r in runs())

    poll("an audit without differences, every run settled", audited, 300)
    res = lean.cli("ledger", "audit", "--since", start, "--min-age", "0", "--json")
    assert json.loads(res.stdout) == []
    with lean.ledger() as lg:
        assert lg.check() == []
    settled = runs()
    assert all(r["state"] == "settled" for r in settled)
    assert {r["job_id"] for r in settled} == set(jobs)  # every job started a GPU run and paid for it


# A "login node": the cluster's slurm-yolo folder replaced, in a mount namespace of its own, by one
# that holds only what a site gives a login node: the config and the published copies (shared
# read-only); no state dir, no books, no ledger credentials, no hooks.
LOGIN_NODE = r"""
yolo=$1; shift
keep=$(mktemp -d)
mount --bind "$yolo" "$keep" && mount -t tmpfs -o mode=0755,size=1m login-node "$yolo" || exit 99
mkdir "$yolo/public" && touch "$yolo/config.toml" || exit 99
mount --bind -o ro "$keep/public" "$yolo/public" && mount --bind -o ro "$keep/config.toml" "$yolo/config.toml" || exit 99
umount -l "$keep"
[ -e "$yolo/state" ] && exit 98
exec "$@"
"""


def on_a_login_node(slurm: Slurm, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``yolo-sbatch ARGS`` as alice on a login node (``LOGIN_NODE``). On 24.11 it runs as root with
    MINICLUSTER_USER=alice: the cluster's commands there are wrappers that chroot, as alice."""
    yolo = slurm.config_path.parent
    user = ["/usr/sbin/runuser", "-u", "alice", "--"] if slurm.root == Path("/") else []
    argv = [
        "/usr/bin/unshare",
        "-m",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        LOGIN_NODE,
        "sh",
        str(yolo),
        *user,
        str(VENV_BIN / "yolo-sbatch"),
        *args,
    ]
    return subprocess.run(argv, env=slurm.env("alice"), capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_login_node_without_the_state_dir_plans_as_the_controller_does_and_is_refused(
    lean: Slurm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The plan (k, GPUs, limit, the hold at the site's price) on a login node that sees only the
    config and the published copies is the one a host with the state dir makes; a submission goes
    through, and one the account cannot cover is refused in one line, with nothing queued."""
    users = Path("/tmp/slurm-yolo-users")  # deploy/minicluster's users' file system: login and compute see it
    work = Path(tempfile.mkdtemp(dir=users))
    try:
        work.chmod(0o755)
        data = make_dataset(work, train=16, val=8, size=96)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        words = ["-A", "vision", "-p", "t4", "train", "model=yolov8n.yaml", f"data={data}", "epochs=1", "imgsz=64"]
        full = subprocess.run(
            [str(VENV_BIN / "yolo-sbatch"), "--dry-run", "--json", *words],
            env=lean.env(),
            capture_output=True,
            text=True,
            cwd=work,
            timeout=120,
        )
        login = on_a_login_node(lean, work, "--dry-run", "--json", *words)
        assert full.returncode == 0 and login.returncode == 0, full.stderr + login.stderr
        assert login.stderr == "", login.stderr  # no warning: it found all it plans with
        here, there = json.loads(full.stdout), json.loads(login.stdout)
        keys = ("k", "gres", "time_limit_seconds", "qos", "hold_tokens", "price_tokens_per_gpu_second", "hold_money")
        assert {k: there[k] for k in keys} == {k: here[k] for k in keys}
        assert there["price_tokens_per_gpu_second"] == PRICE["t4"]  # the site's price, not the default

        res = on_a_login_node(lean, work, "--json", *words)
        assert res.returncode == 0, res.stderr
        job = int(json.loads(res.stdout)["job_id"])
        assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%a").stdout.strip() == "vision"
        lean.cmd("scancel", str(job))
        lean.at_rest(job)  # its refund lands before the balance is set below the next hold

        fund(lean, ("vision",), there["hold_tokens"] - 1)
        before = last_movement(lean, "vision")
        res = on_a_login_node(lean, work, *words)
        lines = res.stderr.strip().splitlines()
        assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("Error:"), res.stderr
        assert "vision" in lines[0] and "cannot cover" in lines[0], lines[0]
        assert lean.cmd("squeue", "-h", "-A", "vision", "-o", "%i").stdout.strip() == ""
        with lean.ledger() as lg:  # no token moved: the cancelled job's own hold may settle only now
            theirs = {m["id"] for m in lg.job_movements(job, lean.name)}
            moved = [dict(m) for m in lg.movements() if m["account"] == "vision" and m["id"] > before]
        assert [m for m in moved if m["id"] not in theirs] == []
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_teammates_pending_comment_is_no_claim_on_the_budget(lean: Slurm) -> None:
    """A hostile helper's finding: yolo-sbatch subtracted the ``eff=`` of the account's pending jobs,
    their users' own text, from the balance, so one member could refuse every teammate's job. A
    pending job's comment claiming 10^18 tokens changes nothing now; slurmctld's admission counts
    pending jobs from their own limits and GPUs."""
    users = Path("/tmp/slurm-yolo-users")
    work = Path(tempfile.mkdtemp(dir=users))
    try:
        work.chmod(0o755)
        data = make_dataset(work, train=16, val=8, size=96)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        lean.sbatch(
            "-A", "vision", "-p", "t4", "-t", "1", "--hold", "--comment=yolo:eff=999999999999999999", user="alice"
        )
        res = subprocess.run(
            [
                str(VENV_BIN / "yolo-sbatch"),
                "--json",
                "-A",
                "vision",
                "-p",
                "t4",
                "train",
                "model=yolov8n.yaml",
                f"data={data}",
                "epochs=1",
                "imgsz=64",
            ],
            env=lean.env(),
            capture_output=True,
            text=True,
            cwd=work,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        job = int(json.loads(res.stdout)["job_id"])
        lean.cmd("scancel", str(job))
    finally:
        lean.cmd("scancel", "-A", "vision", check=False)
        shutil.rmtree(work, ignore_errors=True)


def _refusal_alerts(slurm: Slurm, account: str) -> list[str]:
    """What ``slurm-yolo alerts`` says of the account's refusals (each streak, from its first refusal):
    the host's, with the cluster's config (Debian 13's and sid's roots have no pandas for the report)."""
    argv = [str(VENV_BIN / "slurm-yolo"), "alerts", "--json", "--refusals", "1"]
    res = subprocess.run(argv, env=slurm.env(), capture_output=True, text=True, cwd="/tmp", timeout=300)
    assert res.returncode in (0, 1), res.stderr  # 1: alerts found
    return [a["message"] for a in json.loads(res.stdout) if a["kind"] == "refusals" and a["subject"] == account]


def counts_nothing_pending(slurm: Slurm, account: str) -> bool:
    """Whether slurmctld's admission counts nothing for the account's pending jobs here, as a marked
    trial it cannot cover is told (a trial counts nowhere and notes nothing). Right after a cancel,
    26.05's script counted the cancelled job for its next call (stale upward, then gone)."""
    res = slurm.cmd(
        "sbatch",
        "--test-only",
        "--comment=slurm-yolo:trial",
        *("-A", account, "-p", "a100", "--gres=gpu:a100:2", "-t", "3-0"),  # more than these tests fund
        user="alice",
        input="#!/bin/bash\ntrue\n",
        check=False,
    )
    assert res.returncode != 0 and "cannot cover this job" in res.stderr, res.stderr
    return " minus 0 for its pending and starting GPU jobs" in res.stderr


def test_auto_partition_trials_are_no_claim_on_the_budget(lean: Slurm) -> None:
    """Issue 49: ``-p auto`` asks ``sbatch --test-only`` of each partition, and slurmctld runs
    job_submit.lua for those too; each admitted trial counted against the next trial and the real
    submission, so an account that covered the job once was refused on every partition, each time
    a line in refusals.log. yolo-sbatch marks its trials: they count nowhere. An account funded with
    one worst case (the dearest partition's) but not two is admitted; one short of every partition's
    worst case is still refused by the trials, with the true numbers, and nothing is noted."""
    seconds = 3 * 86400  # -t 3-00:00:00, one GPU (device=0), the dev tier at rate 1
    worst = {partition: seconds * 1 * price for partition, price in PRICE.items()}
    lean.cli("ledger", "tiers", "yolo-dev", "1")
    refusals = lean.state_dir / "private" / "refusals.log"
    work = Path(tempfile.mkdtemp(dir="/tmp/slurm-yolo-users"))
    try:
        work.chmod(0o755)
        data = make_dataset(work, train=16, val=8, size=96)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        words = ["-A", "vision", "-p", "auto", "-t", "3-00:00:00", "--begin", "now+1hour", "--priority", "dev"]
        words += ["train", "model=yolov8x.yaml", f"data={data}", "epochs=20", "imgsz=128", "device=0"]
        fund(lean, ("vision",), max(worst.values()))
        poll("admission counts nothing pending", lambda: counts_nothing_pending(lean, "vision"), 30)
        logged, alerts = refusals.read_text() if refusals.exists() else "", _refusal_alerts(lean, "vision")
        res = on_a_login_node(lean, work, "--json", *words)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)
        job = int(got["job_id"])
        assert got["partition"] in worst and got["qos"] == "yolo-dev", got
        assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%T|%r|%a|%l|%b").stdout.strip().split("|")[:4] == [
            "PENDING",
            "BeginTime",
            "vision",
            "3-00:00:00",
        ]
        assert (refusals.read_text() if refusals.exists() else "") == logged  # no refusal, true or false
        assert _refusal_alerts(lean, "vision") == alerts
        lean.cmd("scancel", str(job))
        nothing_pending(lean, "vision")

        short = min(worst.values()) - 1  # no partition's worst case fits
        fund(lean, ("vision",), short)
        poll("admission counts nothing pending", lambda: counts_nothing_pending(lean, "vision"), 30)
        res = on_a_login_node(lean, work, *words)
        lines = res.stderr.strip().splitlines()
        assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith("Error:"), res.stderr
        for partition, need in worst.items():
            why = f"{need:,} tokens ({seconds} s x 1 GPU x {PRICE[partition]} tokens/GPU-s on {partition} x rate 1)"
            assert f"account vision cannot cover this job: its worst case is {why}" in lines[0], lines[0]
        assert f"the account has {short:,} left" in lines[0], lines[0]
        assert lean.cmd("squeue", "-h", "-A", "vision", "-o", "%i").stdout.strip() == ""
        assert (refusals.read_text() if refusals.exists() else "") == logged  # trials are noted nowhere
        assert _refusal_alerts(lean, "vision") == alerts
    finally:
        lean.cmd("scancel", "-A", "vision", check=False)
        lean.cli("ledger", "tiers", "yolo-dev", "--remove", check=False)  # the ledger may be the clusters' shared one
        shutil.rmtree(work, ignore_errors=True)


def test_a_job_bearing_the_trial_mark_stays_held_and_a_held_trial_is_told_the_same_start(lean: Slurm) -> None:
    """A user can forge yolo-sbatch's trial mark on a real job: it is admitted as any (counted
    nowhere in its first second), so it is held at submission and its user can neither release it
    nor take the mark off; it stays pending, counted among the account's jobs, until cancelled. The
    hold changes no trial's answer: ``sbatch --test-only`` tells a marked job the start it tells an
    unmarked one, behind a running job and after a --begin."""
    mark = "--comment=slurm-yolo:trial"  # commands.TRIAL_MARK, as a user would type it
    fund(lean, ("vision",), 10**12)
    busy = lean.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:2", "-t", "5", script="sleep 300", user="alice")
    try:
        wait_running(lean, busy)
        for begin in ([], ["--begin=now+1hour"]):
            told = []
            for extra in ([], [mark]):
                res = lean.cmd(
                    "sbatch",
                    "--test-only",
                    "-A",
                    "vision",
                    "-p",
                    "a100",
                    "--gres=gpu:a100:1",
                    "-t",
                    "10",
                    *begin,
                    *extra,
                    user="alice",
                    input="#!/bin/bash\n#SBATCH --comment=yolo:eff=1\ntrue\n",
                )
                told.append(res.stderr)
            starts = [
                time.mktime(time.strptime(t.split(" to start at ")[1].split()[0], "%Y-%m-%dT%H:%M:%S")) for t in told
            ]
            assert starts[0] == starts[1] and starts[0] >= time.time() + (3000 if begin else 60), told
    finally:
        lean.cmd("scancel", str(busy))
    job = lean.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", mark, script="true", user="alice")
    try:
        assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%T|%r|%Q").stdout.strip() == "PENDING|JobHeldUser|0"
        for change in (["release", str(job)], ["update", f"jobid={job}", "comment=mine"]):
            res = lean.cmd("scontrol", *change, user="alice", check=False)
            assert res.returncode != 0 and ("trial mark" in res.stderr or "Access/permission denied" in res.stderr), (
                change,
                res.stderr,
            )  # 22.05's scontrol prints only the latter
        time.sleep(2)
        assert lean.cmd("squeue", "-h", "-j", str(job), "-o", "%T|%r|%k").stdout.strip() == (
            "PENDING|JobHeldUser|slurm-yolo:trial"
        )
    finally:
        lean.cmd("scancel", str(job), user="alice")
