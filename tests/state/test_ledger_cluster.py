"""The money path on the real bundled clusters, Slurm 22.05 and 24.11 alike: what slurmctld's own
prolog and epilog hold, charge and refund, to the token.

Every expected amount is worked out here from slurmdbd's own record of the run (``sacct``, read
without slurm-yolo's parsers) and the prices this test set as an admin: time x GPUs x price. The
tests refuse to run on any Slurm the bundled minicluster did not write (``conftest.Slurm``), and the
hooks' ledger is the cluster's own, never /var/lib/slurm-yolo.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import (
    PRICE,
    VENV_BIN,
    Slurm,
    fund,
    last_movement,
    nothing_pending,
    own_ledger_config,
    poll,
    skip_requeue_delay,
)

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.billing import comment
from slurm_yolo.slurm import commands
from slurm_yolo.state import calibration, ledger

pytestmark = pytest.mark.cluster
UNLIMITED_HOLD = 168 * 3600  # ledger.unlimited_hold_hours in deploy/config.toml


def tokens(seconds: int, gpus: Fraction | int, partition: str) -> int:
    return math.ceil(seconds * Fraction(gpus) * PRICE[partition])


def set_balance(slurm: Slurm, account: str, target: int) -> None:
    fund(slurm, (account,), target)


@pytest.fixture
def funded(priced: Slurm) -> Iterator[Slurm]:
    set_balance(priced, "vision", 10**15)
    yield priced
    with priced.ledger() as lg:
        assert lg.check() == []


def elapsed(slurm: Slurm, job: int, run: int = 0) -> tuple[str, int]:
    rec = slurm.ended(job, run + 1)[run]
    return rec["State"].split(" ")[0], int(rec["ElapsedRaw"])


def movements(slurm: Slurm, job: int) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    with slurm.ledger() as lg:
        for m in lg.job_movements(job, slurm.name):  # the other cluster's job of this number is another job
            out.setdefault(m["kind"], []).append(m["amount"])
    return out


def assert_billed(
    slurm: Slurm,
    job: int,
    hold_seconds: int,
    gpus: Fraction | int,
    partition: str,
    state: str | None = None,
    run: int = 0,
    timeout: float = 90,
    limit_at_end: int | None = None,
) -> dict:
    """The run was held and charged exactly what its Slurm record and the price say (a TIMEOUT pays
    at least the limit in force at its end: ``limit_at_end``, else the limit it was held for)."""
    row = slurm.settled(job, run + 1, timeout)[run]
    end, ran = elapsed(slurm, job, run)
    hold = tokens(hold_seconds, gpus, partition)
    charge = tokens(ran, gpus, partition)
    if end == "TIMEOUT":
        charge = max(tokens(hold_seconds if limit_at_end is None else limit_at_end, gpus, partition), charge)
    assert (row["end_state"], row["elapsed"]) == (end, ran) and (state is None or end == state)
    assert (row["hold"], row["charge"], row["refund"]) == (hold, charge, max(0, hold - charge)), row
    assert row["price"] == PRICE[partition] and ledger.run_share(row) == gpus
    return row


def test_complete_pays_its_elapsed_time_at_the_admin_price_whatever_k_says(funded: Slurm) -> None:
    cfg = funded.config()
    model = calibration.load(cfg, "t4").model
    with calibration.Store(cfg) as store:  # k is the time model only: no hold or charge reads it
        store.save("t4", replace(model, k=123.0), "test: k is not a price")
    try:
        before = funded.ledger().account("vision")["balance"]
        job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 2")
        row = assert_billed(funded, job, 120, 1, "t4", "COMPLETED")
    finally:
        with calibration.Store(cfg) as store:  # the demo on this cluster predicts with it
            store.save("t4", model, "test: k restored")
    assert movements(funded, job) == {"hold": [row["hold"]], "charge": [row["charge"]], "refund": [row["refund"]]}
    assert funded.ledger().account("vision")["balance"] == before - row["charge"]
    comment = poll(
        "AdminComment",
        lambda: funded.cmd("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "AdminComment").stdout.strip(),
    )
    assert f"charge={row['charge']}," in comment and "state=completed" in comment.lower()  # sacctmgr lowercases it


def ends_worked_through(slurm: Slurm, job: int) -> bool:
    """The settler has worked through every end of the job the epilog recorded (one at least)."""
    with slurm.ledger() as lg:
        rows = lg.conn.execute(
            "SELECT done_at FROM inbox WHERE cluster = ? AND job_id = ? AND event = 'epilog'", (slurm.name, job)
        ).fetchall()
    return bool(rows) and all(r["done_at"] is not None for r in rows)


def test_exempt_partitions_and_accounts_hold_and_pay_nothing(priced: Slurm) -> None:
    """The bundled config keeps the debug partition and the staff account off the books
    (ledger.exempt_partitions, exempt_accounts). As alice, with 1 token left in vision: her GPU job on
    debug is admitted and runs, holding and paying nothing; the same job on t4 is refused at submit;
    under staff it runs on t4 for nothing. Funded with exactly a minute of one t4 GPU, her t4 job is
    admitted, held that minute and charged its elapsed seconds."""
    led = priced.config().ledger
    assert "debug" in led.exempt_partitions and "staff" in led.exempt_accounts
    for account in ("vision", "staff"):
        nothing_pending(priced, account)
    set_balance(priced, "vision", 1)
    marks = {a: last_movement(priced, a) for a in ("vision", "staff")}
    gpu = ("--gres=gpu:t4:1", "-t", "1")
    free = priced.sbatch("-A", "vision", "-p", "debug", *gpu, user="alice", script="true")
    refused = priced.cmd("sbatch", "-A", "vision", "-p", "t4", *gpu, "--wrap", "true", user="alice", check=False)
    assert refused.returncode != 0 and "account vision cannot cover this job" in refused.stderr
    staff = priced.sbatch("-A", "staff", "-p", "t4", *gpu, user="alice", script="true")
    for job in (free, staff):
        [rec] = priced.ended(job)
        assert rec["State"] == "COMPLETED" and "gres/gpu=1" in rec["AllocTRES"], rec
        poll(f"the end of job {job} worked through", lambda job=job: ends_worked_through(priced, job))
        assert priced.runs(job) == [] and movements(priced, job) == {}
    assert priced.ledger().account("vision")["balance"] == 1
    assert {a: last_movement(priced, a) for a in marks} == marks
    if priced.release == "22.05":  # `slurm-yolo job` (pandas: the host's install) says why nothing was billed
        view = priced.cli("job", f"{free},{staff}", user="alice").stdout
        assert "not billed: partition debug is exempt" in view and "not billed: account staff is exempt" in view
    set_balance(priced, "vision", tokens(60, 1, "t4"))
    job = priced.sbatch("-A", "vision", "-p", "t4", *gpu, user="alice", script="true")
    row = assert_billed(priced, job, 60, 1, "t4", "COMPLETED")
    assert row["hold"] == 60_000 and row["account"] == "vision" and row["user"] == "alice"
    set_balance(priced, "vision", 10**15)


def test_shard_job_pays_its_share_of_a_gpu(funded: Slurm) -> None:
    job = funded.sbatch("-p", "a100", "--gres=shard:a100:2", "-t", "1", script="true")
    assert_billed(funded, job, 60, Fraction(1, 2), "a100", "COMPLETED")


def test_array_tasks_are_held_and_settled_each(funded: Slurm) -> None:
    first = funded.sbatch("-p", "a100", "--array=0-3", "--gres=shard:a100:1", "-t", "1", script="sleep 1")
    ids = poll(
        "array tasks in sacct",
        lambda: (
            len(ids := funded.cmd("sacct", "-X", "-n", "-P", "-j", str(first), "-o", "JobIDRaw").stdout.split()) == 4
            and ids
        ),
    )
    for task in ids:
        assert_billed(funded, int(task), 60, Fraction(1, 4), "a100", "COMPLETED")


def test_each_array_task_and_hetjob_component_gets_its_own_admin_comment(funded: Slurm) -> None:
    """sacctmgr's `jobid=ID` of an array's own id reaches every task (of a hetjob leader, every
    component): each run's AdminComment must carry its own numbers, and the audit find nothing."""
    array = funded.sbatch("-p", "a100", "--array=0-2", "--gres=shard:a100:1", "-t", "1", script="sleep 1")
    het = funded.cmd(
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-p",
        "t4",
        "--gres=gpu:t4:1",
        "-t",
        "1",
        ":",
        "-p",
        "a100",
        "--gres=gpu:a100:1",
        "-t",
        "2",
        input="#!/bin/bash\nsleep 1\n",
    ).stdout.strip()
    ids = poll(
        "5 runs in sacct",
        lambda: (
            len(ids := funded.cmd("sacct", "-X", "-n", "-P", "-j", f"{array},{het}", "-o", "JobIDRaw").stdout.split())
            == 5
            and ids
        ),
    )
    rows = {int(j): funded.settled(int(j))[0] for j in ids}
    for job, row in rows.items():  # each charged its own elapsed time, at its own share
        state, ran = elapsed(funded, job)
        share = 1 if job in (int(het), int(het) + 1) else Fraction(1, 4)  # the hetjob's components: whole GPUs
        assert (row["end_state"], row["charge"]) == (state, tokens(ran, share, row["partition"]))

    def comments() -> dict[int, dict[str, str]] | None:
        out = funded.cmd("sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobIDRaw,AdminComment").stdout
        found = {int(line.split("|", 1)[0]): line.split("|", 1)[1] for line in out.splitlines() if "|" in line}
        parsed = {job: next(iter(comment.parse(text).values()), {}) for job, text in found.items()}
        done = all(parsed.get(job, {}).get("charge") == str(row["charge"]) for job, row in rows.items())
        return parsed if done else None

    poll("every run's own AdminComment", comments, timeout=120)
    findings = json.loads(
        funded.cli("ledger", "audit", "--window-days", "0.05", "--min-age", "0", "--json", check=False).stdout
    )
    assert not [f for f in findings if f["key"].split(":")[1:2] and f["key"].split(":")[1] in ids], findings


def test_cancel_while_pending_moves_nothing(funded: Slurm) -> None:
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "--hold")
    funded.cmd("scancel", str(job))
    assert funded.ended(job)[0]["State"].startswith("CANCELLED")
    time.sleep(2)
    assert funded.runs(job) == [] and movements(funded, job) == {}


def wait_running(slurm: Slurm, job: int) -> None:
    poll(
        f"job {job} running",
        lambda: slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip() == "RUNNING",
        60,
    )


def test_cancel_while_running_pays_the_time_it_ran(funded: Slurm) -> None:
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 120")
    wait_running(funded, job)
    time.sleep(3)
    funded.cmd("scancel", str(job))
    row = assert_billed(funded, job, 300, 1, "t4", "CANCELLED")
    assert row["elapsed"] >= 2


def test_a_run_whose_epilog_never_came_is_settled_once_slurmctld_runs_it_no_more(funded: Slurm) -> None:
    """22.05 SIGKILLs EpilogSlurmctld with the prolog when a job is cancelled while its prolog runs,
    which a user can do at will: the run's hold must not wait for cron's reconcile. Here the
    cluster's epilog does nothing for one job; hookd's settler finds the held run slurmctld runs no
    more and, after the grace a controller's takeover needs (2 x SlurmctldTimeout + 60 s: 2 min
    here), settles it from sacct, to the token."""
    epilog = funded.config_path.parent / "epilog"
    kept, spare = epilog.read_bytes(), epilog.with_name("epilog.test")
    spare.write_text("#!/bin/sh\n# a test's: this epilog never reaches hookd\nexit 0\n")
    spare.chmod(0o755)
    os.replace(spare, epilog)
    try:
        job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 2")
        funded.ended(job)
    finally:
        spare.write_bytes(kept)
        spare.chmod(0o755)
        os.replace(spare, epilog)
    assert_billed(funded, job, 60, 1, "t4", "COMPLETED", timeout=300)
    assert sorted(movements(funded, job)) == ["charge", "hold", "refund"]


def test_failed_job_pays_the_time_it_ran(funded: Slurm) -> None:
    job = funded.sbatch("-p", "a100", "--gres=gpu:a100:2", "-t", "1", script="sleep 1; exit 3")
    assert_billed(funded, job, 60, 2, "a100", "FAILED")


@pytest.fixture(scope="module")
def limit_runs(priced: Slurm) -> dict[str, int]:
    """Three runs that meet a 1-minute time limit, submitted together so that their minute-long waits
    overlap (each alone would hold CI up for a minute and a half, on each release and backend): one
    that times out, one held for 5 minutes whose user lowers its limit to 1 while it runs, one an
    admin extends past its hold. The tests below each check their own."""
    set_balance(priced, "vision", 10**15)
    runs = {
        "timeout": priced.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 300"),
        "lowered": priced.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 600"),
        "extended": priced.sbatch("-p", "a100", "--gres=gpu:a100:1", "-t", "1", script="sleep 68", user="alice"),
    }
    wait_running(priced, runs["lowered"])
    priced.cmd("scontrol", "update", f"jobid={runs['lowered']}", "TimeLimit=1")
    wait_running(priced, runs["extended"])
    priced.cmd("scontrol", "update", f"jobid={runs['extended']}", "TimeLimit=3")
    return runs


def test_timeout_pays_at_least_its_limit(funded: Slurm, limit_runs: dict[str, int]) -> None:
    row = assert_billed(funded, limit_runs["timeout"], 60, 1, "t4", "TIMEOUT", timeout=240)
    assert row["refund"] == 0


def test_timeout_after_a_lowered_limit_pays_the_lower_limit_not_the_hold(
    funded: Slurm, limit_runs: dict[str, int]
) -> None:
    """Held for 5 minutes, lowered to 1 by its user while it runs: its TIMEOUT pays what it ran (at
    least the 1 minute in force at its end), and the rest of the 5-minute hold comes back."""
    row = assert_billed(funded, limit_runs["lowered"], 300, 1, "t4", "TIMEOUT", timeout=240, limit_at_end=60)
    assert row["charge"] < tokens(300, 1, "t4") and row["refund"] > 0


def test_an_admin_time_extension_is_charged_past_the_hold(funded: Slurm, limit_runs: dict[str, int]) -> None:
    job = limit_runs["extended"]
    row = assert_billed(funded, job, 60, 1, "a100", "COMPLETED", timeout=180)
    assert row["charge"] > row["hold"] and row["refund"] == 0
    assert movements(funded, job)["overrun"] == [row["charge"] - row["hold"]]


def test_requeue_settles_each_run_once_under_its_own_key(funded: Slurm) -> None:
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 8")
    wait_running(funded, job)
    time.sleep(1)
    funded.cmd("scontrol", "requeue", str(job))
    first = assert_billed(funded, job, 120, 1, "t4", "REQUEUED")
    skip_requeue_delay(job, funded)
    second = assert_billed(funded, job, 120, 1, "t4", "COMPLETED", run=1, timeout=240)
    assert first["job_key"] != second["job_key"] and first["submit_time"] < second["submit_time"]
    kinds = movements(funded, job)
    assert len(kinds["hold"]) == 2 and len(kinds["charge"]) == 2 and len(kinds["refund"]) == 2


def test_node_failure_is_refunded_in_full(funded: Slurm) -> None:
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "5", "--no-requeue", script="sleep 120")
    wait_running(funded, job)
    time.sleep(2)
    funded.cmd("scontrol", "update", "nodename=gpu-t4-1", "state=down", "reason=ledger-test")
    try:
        row = funded.settled(job)[0]
        assert elapsed(funded, job)[0] == "NODE_FAIL"
        assert (row["end_state"], row["hold"], row["charge"], row["refund"]) == (
            "NODE_FAIL",
            tokens(300, 1, "t4"),
            0,
            tokens(300, 1, "t4"),
        )
    finally:
        funded.cmd("scontrol", "update", "nodename=gpu-t4-1", "state=resume", check=False)
        poll(
            "gpu-t4-1 back",
            lambda: (
                funded.cmd("sinfo", "-h", "-n", "gpu-t4-1", "-o", "%T").stdout.strip() in ("idle", "mixed", "allocated")
            ),
            90,
        )


def test_repeated_prolog_and_epilog_change_nothing(funded: Slurm) -> None:
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="true")
    row = assert_billed(funded, job, 60, 1, "t4", "COMPLETED")
    before = funded.ledger().account("vision")["balance"]
    env = {
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_ACCOUNT": "vision",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_PARTITION": "t4",
        "SLURM_CLUSTER_NAME": funded.name,
        "SLURM_JOB_RESTART_COUNT": "0",
    }
    for hook in ("epilog", "prolog", "epilog"):
        assert funded.hook(hook, env) == 0
    time.sleep(1)  # hookd settles epilogs after answering
    assert funded.ledger().account("vision")["balance"] == before
    assert movements(funded, job) == {"hold": [row["hold"]], "charge": [row["charge"]], "refund": [row["refund"]]}


def test_a_price_change_applies_to_runs_held_after_it(funded: Slurm) -> None:
    early = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 6")
    poll("the early run held", lambda: funded.runs(early))
    funded.cli("ledger", "price", "set", "t4", str(PRICE["t4"] * 2), "--reason", "test: dearer")
    try:
        late = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="true")
        late_row = funded.settled(late)[0]
    finally:
        funded.cli("ledger", "price", "set", "t4", str(PRICE["t4"]), "--reason", "tests")
    assert_billed(funded, early, 120, 1, "t4", "COMPLETED")  # held before the change: the old price
    ran = elapsed(funded, late)[1]
    assert (late_row["price"], late_row["hold"], late_row["charge"]) == (
        2 * PRICE["t4"],
        2 * tokens(120, 1, "t4"),
        2 * tokens(ran, 1, "t4"),
    )


def _hostile_dir(slurm: Slurm, name: str) -> Path:
    """A folder alice owns, visible to the cluster's jobs (the 24.11 chroot shares /tmp)."""
    d = Path("/tmp") / f"yolo-hostile-{slurm.release}-{os.getpid()}" / name
    d.mkdir(parents=True, exist_ok=True)
    for p in (d.parent, d):
        os.chown(p, int(subprocess.run(["id", "-u", "alice"], capture_output=True, text=True).stdout), -1)
        p.chmod(0o755)
    return d


FORGED = " TRES=cpu=1 TimeLimit=00:00:01 QOS=yolo-explore Partition=a100 |x|\nTRES=cpu=2 TimeLimit=1"


def test_hostile_user_text_bills_exactly_from_slurms_facts(funded: Slurm) -> None:
    """alice writes text that poses as scontrol fields everywhere she can, and estimates no parser
    should believe; every run is still held and charged from Slurm's own numbers."""
    base = _hostile_dir(funded, "work")
    workdir = _hostile_dir(funded, f"w{FORGED.replace(chr(10), ' ').replace('/', '_')}")
    gpu = ("-p", "t4", "--gres=gpu:t4:1")
    cases = {  # label: (sbatch arguments, script, hold seconds, estimate the ledger may record)
        "comment": ((*gpu, "-t", "2", f"--comment=x{FORGED}"), "sleep 1", 120, None),
        "job name": ((*gpu, "-t", "2", "-J", f"n{FORGED}"), "sleep 1", 120, None),
        "work dir": ((*gpu, "-t", "2", "-D", str(workdir)), "sleep 1", 120, None),
        "output paths": ((*gpu, "-t", "2", "-o", f"{base}/o{FORGED}", "-e", f"{base}/e{FORGED}"), "sleep 1", 120, None),
        "eff=inf": ((*gpu, "-t", "1", "--comment=yolo:eff=inf"), "sleep 1", 60, None),
        "eff=1e19": ((*gpu, "-t", "1", "--comment=yolo:eff=1e19"), "sleep 1", 60, None),
        "eff=-1": ((*gpu, "-t", "1", "--comment=yolo:eff=-1"), "sleep 1", 60, None),
        "eff=nan": ((*gpu, "-t", "1", "--comment=yolo:eff=nan"), "sleep 1", 60, None),
        "eff=²": ((*gpu, "-t", "1", "--comment=yolo:eff=²"), "sleep 1", 60, None),
        "eff=12 full-width": ((*gpu, "-t", "1", "--comment=yolo:eff=１２"), "sleep 1", 60, None),
        "eff=7 honest": ((*gpu, "-t", "1", "--comment=yolo:eff=7"), "sleep 1", 60, 7),
        "no time limit": (("-p", "a100", "--gres=shard:a100:1"), "sleep 1", UNLIMITED_HOLD, None),
    }
    jobs = {label: funded.sbatch(*args, script=script, user="alice") for label, (args, script, _, _) in cases.items()}
    for label, job in jobs.items():
        args, _, hold_s, estimate = cases[label]
        partition = args[args.index("-p") + 1]
        share = Fraction(1, 4) if "--gres=shard:a100:1" in args else Fraction(1)
        row = assert_billed(funded, job, hold_s, share, partition, "COMPLETED", timeout=180)
        assert (row["user"], row["account"], row["qos"], row["estimate"]) == ("alice", "vision", "normal", estimate), (
            label
        )


def test_time_limits_a_user_sets_are_billed_exactly(funded: Slurm) -> None:
    """Past a year (refused at submit: 22.05's squeue prints INVALID, and a prolog that cannot read a
    limit holds 366 days, which a longer run would outlive), a year, and set to 0 while pending or
    running (refused: such a run would hold nothing while slurmctld takes its time to end it): each
    run is held from its real limit and charged the time it ran."""
    shard = ("-p", "t4", "--gres=shard:t4:1")
    long_job = funded.cmd(
        "sbatch", *shard, "-t", "400-00:00:00", "-o", "/dev/null", "--wrap", "sleep 2", user="alice", check=False
    )
    assert long_job.returncode != 0 and "at most 366 days" in long_job.stderr, long_job.stderr
    year_job = funded.sbatch(*shard, "-t", "365-00:00:00", script="sleep 2", user="alice")
    pending = funded.sbatch(*shard, "-t", "5", "--hold", script="sleep 2", user="alice")
    refused = funded.cmd("scontrol", "update", f"jobid={pending}", "TimeLimit=0", user="alice", check=False)
    assert refused.returncode != 0
    funded.cmd("scontrol", "release", str(pending), user="alice")
    running = funded.sbatch(*shard, "-t", "2", script="sleep 60", user="alice")
    wait_running(funded, running)
    refused = funded.cmd("scontrol", "update", f"jobid={running}", "TimeLimit=0", user="alice", check=False)
    assert refused.returncode != 0
    funded.cmd("scancel", str(running), user="alice")
    assert_billed(funded, year_job, 365 * 86400, Fraction(1, 4), "t4", "COMPLETED")
    assert_billed(funded, pending, 300, Fraction(1, 4), "t4", "COMPLETED", timeout=180)
    assert_billed(funded, running, 120, Fraction(1, 4), "t4", "CANCELLED", timeout=180)


def test_forged_spank_and_comment_values_in_the_hooks_environment(funded: Slurm) -> None:
    """What slurmctld would pass from a user's --yolo-tokens and --comment, at its most hostile:
    the hold is the same and no estimate is recorded."""
    for value in ("²", "１２", "1e19", "inf", "-1", "9" * 19):
        job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", "--hold")
        env = {
            "SLURM_JOB_ID": str(job),
            "SLURM_CLUSTER_NAME": funded.name,
            "SPANK_YOLO_TOKENS": value,
            "SLURM_JOB_COMMENT": f"yolo:eff={value}",
        }
        try:
            assert funded.hook("prolog", env) == 0
            (row,) = poll("held", lambda job=job: funded.runs(job))
            assert (row["hold"], row["estimate"]) == (tokens(60, 1, "t4"), None), value
        finally:
            funded.cmd("scancel", str(job))
        funded.cli("ledger", "reconcile")  # a pending job cancelled: its hand-made hold is settled from sacct


# A summary as the launcher writes it, but with no FLOPs: once a ZeroDivisionError in the feedback
HOSTILE_SUMMARY = (
    "yolo:eff=1;run:at=1,ep=3,s=10,one=1,g=1,c=0,tr=1000,va=640,sz=640,ne=3,b=16,vp=3,m=yolov8n.pt,"
    "f=yolov8,gf=0,ms=table"
)


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "1 GB"])
def test_a_hostile_usage_file_neither_blocks_nor_feeds_the_controller(funded: Slurm, kind: str) -> None:
    """The controller opens no usage file (the feedback reads the job's Comment): a file that would
    block or flood a reader changes nothing, and the forged summary beside it is refused, unblocked."""
    work = _hostile_dir(funded, f"usage-{kind.split()[0]}")
    make = {"symlink to /dev/zero": "ln -s /dev/zero", "fifo": "mkfifo", "1 GB": "truncate -s 1G"}[kind]
    before = calibration.load(funded.config(), "t4").model.k
    job = funded.sbatch(
        "-p",
        "t4",
        "--gres=gpu:t4:1",
        "-t",
        "1",
        "-D",
        str(work),
        user="alice",
        script=f"{make} yolo-usage-$SLURM_JOB_ID.jsonl\n"
        f"scontrol update JobId=$SLURM_JOB_ID Comment='{HOSTILE_SUMMARY}' || exit 3\nsleep 2",
    )
    assert_billed(funded, job, 60, 1, "t4", "COMPLETED")
    log = funded.state_dir / "private" / "hooks.log"

    def feedback_done() -> dict | None:
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("event") == "feedback" and rec.get("job") == job:
                return rec
        return None

    rec = poll("the feedback's verdict", feedback_done, timeout=60)  # the settler's worker, unblocked
    assert rec.get("result") == "no usable summary in its Comment", rec
    assert calibration.load(funded.config(), "t4").model.k == before


def test_dry_account_refused_by_yolo_sbatch_and_held_back_by_slurm(
    request: pytest.FixtureRequest, priced: Slurm, site_config: Path, dataset: Path
) -> None:
    if priced.release != "22.05":
        pytest.skip("yolo-sbatch runs on the login node of the 22.05 cluster")
    request.getfixturevalue("hooks_config")  # only now: on 24.11 it would fund the 22.05 cluster's accounts,
    # which CI's other stream is billing at that moment
    set_balance(priced, "research", 1_000)  # less than a minute of any GPU at this test's prices
    try:
        res = CliRunner().invoke(
            yolo_sbatch,
            ["-A", "research", "-p", "t4", "train", "model=yolov8l.yaml", f"data={dataset}", "epochs=50", "imgsz=640"],
        )
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert res.output.startswith("Error: account research cannot cover this job: needs ")
        assert " tokens/GPU-s x 1; its work is " in res.output  # what its start holds, and the work beside it
        assert "has 1.0 kTok left; no refill covers it" in res.output
        assert priced.ledger().account("research")["balance"] == 1_000
        explained = CliRunner().invoke(
            yolo_sbatch,
            [
                "--explain",
                "-A",
                "research",
                "-p",
                "t4",
                "train",
                "model=yolov8l.yaml",
                f"data={dataset}",
                "epochs=50",
                "imgsz=640",
            ],
        )
        lines = explained.output.strip().splitlines()  # the refused plan's numbers, then the same one line
        assert explained.exit_code == 1 and lines[-1] == res.output.strip(), lines
        assert [line.split(":")[0] for line in lines if line.startswith(("time:", "buffer:", "cost:"))] == [
            "time",
            "buffer",
            "cost",
        ]
        assert priced.ledger().account("research")["balance"] == 1_000

        set_balance(priced, "research", 10**9)
        gpu_job = priced.sbatch("-A", "research", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", "--hold", script="true")
        set_balance(priced, "research", 0)
        limits = priced.cmd(
            "sacctmgr", "-n", "-P", "show", "assoc", "where", "account=research", "format=grptresrunmins"
        )
        assert "gres/gpu=0" in limits.stdout
        refused = priced.cmd(
            "sbatch", "-A", "research", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", "--wrap", "true", check=False
        )
        assert refused.returncode != 0 and "account research cannot cover this job" in refused.stderr  # at submit
        cpu_job = priced.sbatch("-A", "research", "-p", "t4", "-t", "1", script="true")
        assert priced.ended(cpu_job)[0]["State"] == "COMPLETED"  # CPU jobs are not metered
        priced.cmd("scontrol", "release", str(gpu_job))  # admitted while funded: Slurm's own limit holds it back
        reason = poll(
            "pending reason",
            lambda: (
                (r := priced.cmd("squeue", "-h", "-j", str(gpu_job), "-o", "%r").stdout.strip()) not in ("", "None")
                and r
            ),
        )  # "None" until the scheduler has looked at it
        assert reason == "AssocGrpGRESRunMinutes"
        priced.cli("ledger", "deposit", "research", "1G")
        assert priced.ended(gpu_job)[0]["State"] == "COMPLETED"
    finally:
        set_balance(priced, "research", 10**12)


def test_spank_option_reaches_the_ledger(funded: Slurm) -> None:
    if "--yolo-tokens" not in funded.cmd("sbatch", "--help").stdout:
        pytest.skip(f"the SPANK plugin is not loaded on {funded.release}")
    bad = funded.cmd("sbatch", "--yolo-tokens=12abc", "-p", "t4", "--wrap", "true", check=False)
    assert bad.returncode != 0 and "yolo_tokens: --yolo-tokens: '12abc' is not a whole number" in bad.stderr
    for value in ("²", "１２", "-1", "1e19", "inf", "nan", "9" * 20, ""):  # refused before Slurm has a job
        bad = funded.cmd(
            "sbatch", f"--yolo-tokens={value}", "-p", "t4", "--gres=gpu:t4:1", "--wrap", "true", check=False
        )
        assert bad.returncode != 0 and "yolo_tokens: --yolo-tokens: " in bad.stderr, value
    row = assert_billed(
        funded,
        funded.sbatch("--yolo-tokens=777", "-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="true"),
        60,
        1,
        "t4",
        "COMPLETED",
    )
    assert row["estimate"] == 777


def test_users_cannot_write_the_ledger(funded: Slurm) -> None:
    before = funded.ledger().account("vision")["balance"]
    res = funded.cli("ledger", "deposit", "vision", "1000G", user="alice", check=False)
    assert res.returncode == 1 and "permission denied" in res.stderr
    for args in (["tiers", "yolo-explore", "0.001"], ["price", "set", "t4", "1"]):
        res = funded.cli("ledger", *args, user="alice", check=False)
        assert res.returncode == 1 and "permission denied" in res.stderr, args
    assert funded.ledger().account("vision")["balance"] == before
    assert funded.cli("ledger", "balance", "vision", user="alice").returncode == 0  # her own account
    # The bundled clusters set no PrivateData, so she may see any account, as Slurm shows her sshare
    # (PrivateData=accounts: test_visibility.py). Who she is comes from her uid, never from $USER.
    assert funded.cli("ledger", "balance", "research", user="alice").returncode == 0
    names = [
        {r["name"] for r in json.loads(funded.cli("ledger", "balance", "--json", user="alice", extra_env=env).stdout)}
        for env in ({}, {"USER": "slurm", "LOGNAME": "slurm"})
    ]
    assert names[0] == names[1] >= {"vision", "research"}


def test_hundreds_of_concurrent_hooks_with_kills_keep_the_books(cluster: Slurm, home: Path) -> None:
    """250 real prolog/epilog invocations (duplicated, shuffled, 10% killed -9) on real held jobs."""
    (home / "config.toml").write_text(own_ledger_config(cluster))
    jobs = [cluster.sbatch("-p", "a100", "--gres=gpu:a100:1", "--hold", "-t", "5") for _ in range(50)]
    try:
        events = [(j, "prolog") for j in jobs for _ in range(3)] + [(j, "epilog") for j in jobs for _ in range(2)]
        random.Random(7).shuffle(events)
        procs: list[subprocess.Popen[bytes]] = []
        rng = random.Random(11)
        for job, hook in events:
            env = {"SLURM_JOB_ID": str(job), "SLURM_CLUSTER_NAME": cluster.name, "SLURM_YOLO_HOME": str(home)}
            procs.append(subprocess.Popen([str(VENV_BIN / f"slurm-yolo-{hook}")], env=env))
            if rng.random() < 0.1:
                time.sleep(rng.uniform(0, 0.15))
                procs[-1].send_signal(signal.SIGKILL)
            while sum(p.poll() is None for p in procs) >= 24:
                time.sleep(0.02)
        for p in procs:
            p.wait(timeout=120)
        killed = sum(p.returncode == -signal.SIGKILL for p in procs)
        assert all(p.returncode in (0, -signal.SIGKILL) for p in procs)
    finally:
        cluster.cmd("scancel", *map(str, jobs), check=False)
    lg = ledger.reader(config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)}))
    assert lg is not None
    with lg:
        assert lg.check() == [], lg.check()
        holds = [m for m in lg.movements() if m["kind"] == "hold"]
        assert len({m["job_key"] for m in holds}) == len(holds) >= 40  # each run held once
        assert all(m["amount"] == 300 * 1_000_000 for m in holds)  # 5 min x 1 GPU x the default price
    print(json.dumps({"invocations": len(procs), "killed": killed, "runs": len(holds)}))


# alice opens every file and folder she can under the cluster's slurm-yolo tree, and takes every lock
# she can on each: an exclusive flock (shared where refused), and a POSIX lock over the whole file (a
# read lock on what she can only read, as one on a byte of ledger.db-shm once stopped every writer).
LOCKER = r"""
import fcntl, os, sys, time
held = []
for top, dirs, files in os.walk(sys.argv[1]):
    for path in [top] + [os.path.join(top, n) for n in files]:
        fd = None
        for mode in (os.O_RDWR, os.O_RDONLY):
            try:
                fd = os.open(path, mode | os.O_NONBLOCK | os.O_NOCTTY)
                break
            except OSError:
                continue
        if fd is None:
            continue
        got = []
        for how, name in ((fcntl.LOCK_EX, "flock-ex"), (fcntl.LOCK_SH, "flock-sh")):
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                got.append(name)
                break
            except OSError:
                pass
        for how, name in ((fcntl.LOCK_EX, "posix-write"), (fcntl.LOCK_SH, "posix-read")):
            try:
                fcntl.lockf(fd, how | fcntl.LOCK_NB, 0, 0)
                got.append(name)
                break
            except OSError:
                pass
        held.append((path, got, fd))
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write("\n".join(f"{p} {' '.join(g)}" for p, g, _ in held))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(3600)
"""


@pytest.fixture
def alice_locks(funded: Slurm) -> Iterator[dict[str, list[str]]]:
    """alice holding every lock she can on the cluster's slurm-yolo state (until the test ends)."""
    ready = _hostile_dir(funded, "locks") / "held"
    proc = subprocess.Popen(
        [
            "/usr/sbin/runuser",
            "-u",
            "alice",
            "--",
            "/usr/bin/python3",
            "-c",
            LOCKER,
            str(funded.state_dir.parent),
            str(ready),
        ],
        cwd="/tmp",
        start_new_session=True,
    )
    try:
        poll("alice's locks", lambda: ready.exists() or proc.poll() is not None, timeout=60)
        assert proc.poll() is None
        yield {line.split(" ")[0]: line.split(" ")[1:] for line in ready.read_text().splitlines()}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # runuser and alice's python under it (runuser waits for its child)
        proc.wait()


def test_no_lock_a_user_can_take_freezes_the_books(funded: Slurm, alice_locks: dict[str, list[str]]) -> None:
    """alice locks all she can open of the cluster's slurm-yolo folders (its state, its public copies,
    its config); nothing she holds is on the write path:
    root's deposit goes through, her GPU job is held and charged its elapsed time to the token, and
    so is the run she starts again by requeueing her finished job (a requeue passes no admission)."""
    state, copy = funded.state_dir, str(funded.config().public_dir / "ledger.db")
    assert alice_locks.get(copy)  # the published copy
    assert not [p for p in alice_locks if p.startswith(str(state / "private"))]  # the books: out of her reach
    with funded.ledger() as lg:
        before = lg.balance("vision")
    res = funded.cli("ledger", "deposit", "vision", "1000", "--reason", "tests: while alice holds locks")
    assert res.returncode == 0
    job = funded.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 3", user="alice")
    first = assert_billed(funded, job, 120, 1, "t4", "COMPLETED")
    ran = [elapsed(funded, job)[1]]  # before the requeue: slurmdbd then stretches it to the requeue
    funded.cmd("scontrol", "requeue", str(job), user="alice")
    skip_requeue_delay(job, funded)
    second = assert_billed(funded, job, 120, 1, "t4", "COMPLETED", run=1, timeout=240)
    ran.append(int(funded.ended(job, 2)[1]["ElapsedRaw"]))
    with funded.ledger() as lg:
        after = lg.balance("vision")
        assert lg.check() == []
    assert (first["charge"], second["charge"]) == (ran[0] * PRICE["t4"], ran[1] * PRICE["t4"])
    assert after == before + 1000 - ran[0] * PRICE["t4"] - ran[1] * PRICE["t4"]


def _hookd_descendants(slurm: Slurm) -> list[str]:
    """The processes under this cluster's hookd (its own root: the host's, or the 24.11 chroot; and
    this host's mount namespace: the backup-controller test's hosts run hookds of their own)."""
    procs: dict[int, tuple[int, str, str]] = {}
    here = os.readlink("/proc/self/ns/mnt")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                ns = os.readlink(entry / "ns" / "mnt")
                procs[int(entry.name)] = (ppid, cmd, os.readlink(entry / "root") if ns == here else "")
            except OSError:
                continue
    hookd = {
        pid
        for pid, (_, cmd, root) in procs.items()
        if cmd.split()[-1:] == ["hookd"] and "slurm" in cmd and root == str(slurm.root)
    }
    out = []
    for ppid, cmd, _ in procs.values():
        while ppid > 1 and ppid not in hookd and ppid in procs:
            ppid = procs[ppid][0]
        if ppid in hookd:
            out.append(cmd)
    return out


def test_a_big_array_is_held_settled_and_commented_with_few_children(funded: Slurm) -> None:
    """Defect 7: an array's every task is held and settled once at its own elapsed time, every
    AdminComment lands within 2 minutes of the array's end (one sacctmgr for a batch), and hookd
    never runs more than a few children at once (no detached child per settlement)."""
    tasks = 120
    most: list[str] = []
    stop = False

    def sample() -> None:
        nonlocal most
        while not stop:
            now = _hookd_descendants(funded)
            most = now if len(now) > len(most) else most
            time.sleep(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        array = funded.sbatch(
            "-p", "a100", f"--array=0-{tasks - 1}", "--gres=shard:a100:1", "-t", "1", script="sleep 1"
        )
        ids = poll(
            f"{tasks} runs in sacct",
            lambda: (
                len(ids := funded.cmd("sacct", "-X", "-n", "-P", "-j", str(array), "-o", "JobIDRaw").stdout.split())
                == tasks
                and ids
            ),
            300,
        )
        for job in ids:
            assert_billed(funded, int(job), 60, Fraction(1, 4), "a100", "COMPLETED", timeout=300)

        def commented() -> list[list[str]] | None:
            out = funded.cmd("sacct", "-X", "-n", "-P", "-j", str(array), "-o", "JobIDRaw,End,AdminComment").stdout
            rows = [line.split("|", 2) for line in out.splitlines()]
            return rows if all(r[2].lower().startswith("yolo:") for r in rows) else None

        rows = poll("every AdminComment", commented, 300)
        landed = time.time() - max(datetime.fromisoformat(r[1]).timestamp() for r in rows)  # sacct's local time
    finally:
        stop = True
        watcher.join()
    assert landed <= 120, f"the last AdminComment landed {landed:.0f} s after the array's end"
    assert len(most) <= 3, most
    for job, _, text in rows:  # each task's own numbers
        (run,) = comment.parse(text).values()
        assert run["charge"] == str(funded.settled(int(job))[0]["charge"])
    findings = json.loads(
        funded.cli("ledger", "audit", "--window-days", "0.05", "--min-age", "0", "--json", check=False).stdout
    )
    assert not [f for f in findings if f["key"].split(":")[1:2] and f["key"].split(":")[1] in ids], findings


def test_one_sacctmgr_writes_a_batch_of_comments_and_names_each_job(slurm: Slurm) -> None:
    """The batch's sacctmgr exits 1 when any line modified nothing (a job slurmdbd has no record of):
    the others land all the same, and only that one is reported for a sacctmgr of its own."""
    jobs = [slurm.sbatch("-p", "t4", "-t", "1", script="true") for _ in range(3)]
    for job in jobs:
        slurm.ended(job)
    batch = [commands.AdminComment(job, str(job), slurm.name, f"yolo:run=1,charge={job}") for job in jobs]
    unknown = commands.AdminComment(99_999_999, "99999999", slurm.name, "yolo:run=1,charge=7")
    out = commands.set_admin_comments([batch[0], unknown, *batch[1:]], bin_dir=slurm.bin_dir)
    assert out == ["", "sacctmgr named job 99999999 0 time(s)", "", ""]
    text = slurm.cmd("sacct", "-X", "-n", "-P", "-j", ",".join(map(str, jobs)), "-o", "JobIDRaw,AdminComment").stdout
    assert sorted(text.split()) == sorted(f"{job}|yolo:run=1,charge={job}" for job in jobs)


def test_a_gpu_job_may_ask_for_366_days_at_most(priced: Slurm) -> None:
    """22.05's scontrol prints a limit past a year as INVALID, and a prolog that cannot read a limit
    holds 366 days: a longer GPU job would run past its hold (a hostile helper held 7.9 G for a
    1000-day job that needed 21.6 G). job_submit.lua refuses it at submit, on both releases; 366 days
    is admitted."""
    for limit in ("367-0", "1000-0", "4000000000"):
        res = priced.cmd(
            "sbatch",
            "-A",
            "research",
            "-p",
            "t4",
            "--gres=shard:t4:1",
            "-t",
            limit,
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 1",
            user="bob",
            check=False,
        )
        assert res.returncode != 0 and "time limit can be at most 366 days" in res.stderr, (limit, res.stderr)
    job = priced.sbatch("-A", "research", "-p", "t4", "--gres=shard:t4:1", "-t", "366-0", "--hold", user="bob")
    priced.cmd("scancel", str(job))
