"""Admin side on the real cluster: reports checked against sacct, recalibration, alerts, metrics, reconcile."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, Slurm, own_ledger_config, poll

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import config as config_mod
from slurm_yolo.slurm import commands
from slurm_yolo.state import ledger

pytestmark = pytest.mark.cluster


@pytest.fixture
def system(hooks_config: config_mod.Config) -> config_mod.Config:
    """The 22.05 cluster's hook config and state (its own, never /var/lib/slurm-yolo)."""
    return hooks_config


def yolo_job(pred_s: int, script: str, *args: str) -> int:
    """A plain sbatch job carrying a yolo-sbatch estimate in its comment."""
    comment = f"yolo:tok=1000000,eff=1000000,pred_s={pred_s},limit_s=120,k=1,gpus=1,cov=0.99"
    return commands.submit(f"#!/bin/bash\n{script}\n", ["-o", "/dev/null", f"--comment={comment}", *args])


def settled(cfg: config_mod.Config, job: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lg = ledger.reader(cfg)
        assert lg is not None
        try:
            if any(r["state"] == "settled" for r in lg.runs(job, commands.cluster_name())):
                return
        finally:
            lg.close()
        time.sleep(0.3)
    pytest.fail(f"job {job} not settled")


@pytest.fixture(scope="module")
def series(cluster: Slurm) -> dict[str, object]:
    """Real jobs of the 'research' account, two of them mispredicted on purpose, all finished."""
    cfg = cluster.config()
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    with ledger.writer(cfg) as lg:
        lg.credit("research", 10**12, "test", "report series")
    cluster.cli("ledger", "enforce", "--account", "research")
    jobs = [
        yolo_job(3, "sleep 3", "-A", "research", "-p", "t4", "--gres=gpu:t4:1", "-t", "2"),
        yolo_job(2, "sleep 2", "-A", "research", "-p", "a100", "--gres=gpu:a100:2", "-t", "2"),
        yolo_job(60, "sleep 1", "-A", "research", "-p", "t4", "--gres=shard:t4:2", "-t", "2"),  # predicted far too long
        yolo_job(
            1, "sleep 4", "-A", "research", "-p", "a100", "--gres=gpu:a100:1", "-t", "2"
        ),  # predicted far too short
        yolo_job(5, "exit 2", "-A", "research", "-p", "t4", "--gres=gpu:t4:1", "-t", "2"),
    ]
    for j in jobs:
        commands.wait_for_end(j, timeout=120)
        settled(cfg, j)
    return {"start": start, "jobs": jobs}


def report_json(start: str, *views: str) -> dict[str, list[dict]]:
    args = ["report", "--json", "--since", start, "-A", "research"] + [f"--view={v}" for v in views]
    res = CliRunner().invoke(admin, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_report_numbers_match_sacct_and_the_ledger(system: config_mod.Config, series: dict) -> None:
    jobs = series["jobs"]
    rows = {int(r["JobIDRaw"]): r for r in commands.sacct_jobs(jobs)}
    got = report_json(series["start"], "usage", "accuracy", "failures")
    usage = {r["Partition"]: r for r in got["usage"]}
    gpus = dict(zip(jobs, (1, 2, 0.5, 1, 1), strict=True))
    lg = ledger.reader(system)
    assert lg is not None
    try:
        charge = {j: sum(r["charge"] for r in lg.runs(j, commands.cluster_name())) for j in jobs}
    finally:
        lg.close()
    for part, mine in (("t4", [jobs[0], jobs[2], jobs[4]]), ("a100", [jobs[1], jobs[3]])):
        assert usage[part]["jobs"] == len(mine) and usage[part]["User"] == "root"
        hours = sum(int(rows[j]["ElapsedRaw"]) * gpus[j] for j in mine) / 3600
        assert usage[part]["gpu_hours"] == pytest.approx(hours)
        assert usage[part]["tokens_charged"] == sum(charge[j] for j in mine) > 0
    acc = {r["Partition"]: r for r in got["accuracy"]}
    for part, done in (("t4", [(jobs[0], 3), (jobs[2], 60)]), ("a100", [(jobs[1], 2), (jobs[3], 1)])):
        errs = sorted(abs(int(rows[j]["ElapsedRaw"]) - p) / p for j, p in done)
        assert acc[part]["completed"] == 2
        assert acc[part]["median_abs_error"] == pytest.approx((errs[0] + errs[1]) / 2)
        assert acc[part]["p90_abs_error"] == pytest.approx(errs[0] + 0.9 * (errs[1] - errs[0]))
    assert acc["t4"]["jobs"] == 3 and acc["t4"]["timeout_share"] == 0
    # The limits' promise (from the comments) against what they kept: t4's 2 completed and 1 failed run
    # ended within their limits (only a TIMEOUT breaks the promise).
    assert acc["t4"]["promised_coverage"] == 0.99 and acc["t4"]["realised_coverage"] == 1.0
    failed = {(r["Partition"], r["state"]): r["runs"] for r in got["failures"]}
    assert failed == {("t4", "COMPLETED"): 2, ("t4", "FAILED"): 1, ("a100", "COMPLETED"): 2}


def test_report_formats_and_html_plots(system: config_mod.Config, series: dict, tmp_path: Path) -> None:
    table = CliRunner().invoke(admin, ["report", "--since", series["start"], "-A", "research"])
    assert table.exit_code == 0 and "== usage" in table.output and "== accuracy" in table.output
    assert (
        " GPU-h" in table.output
        and re.search(r" [GT]Tok", table.output)
        and not re.search(r"\d[eE][+-]?\d", table.output)
    )
    csv = CliRunner().invoke(
        admin, ["report", "--csv", "--since", series["start"], "-A", "research", "--view", "usage"]
    )
    assert csv.output.startswith("# usage\nAccount,User,Partition,jobs,runs,gpu_hours")
    page = tmp_path / "r.html"
    res = CliRunner().invoke(admin, ["report", "--html", str(page), "--since", series["start"], "-A", "research"])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    images = dict(re.findall(r'alt="(\w+)" src="data:image/png;base64,([^"]+)"', html))
    assert {"usage", "accuracy", "budgets"} <= set(images)  # over time, predicted vs actual, the burn-down
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images.values())


@pytest.mark.parametrize("name", ["yo|lo", "yo\nlo"])
def test_any_job_name_reaches_reports_and_ends_a_wait(slurm: Slurm, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A job name with a ``|`` or a newline, and a comment forging a line of sacct output, move no
    field: waiting on the job sees it end, and its report row is there with its own estimate."""
    from slurm_yolo.admin import report

    monkeypatch.delenv("SLURM_YOLO_HOME", raising=False)
    monkeypatch.setenv("SLURM_YOLO_CONFIG", str(slurm.config_path))
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    comment = "yolo:tok=1,eff=1,pred_s=7,limit_s=60,k=1,gpus=1\n999|vision|alice|t4|normal|COMPLETED|"
    job = slurm.sbatch("-J", name, "-A", "vision", "-p", "t4", "-t", "1", f"--comment={comment}", user="alice")
    assert commands.wait_for_end(job, poll=0.3, timeout=60, bin_dir=slurm.bin_dir) == "COMPLETED"
    cfg = slurm.config()

    def row() -> dict | None:
        df = report.parse_jobs(report.fetch_sacct(cfg, report.Filters(since=start, user="alice")))
        rows = df[df["job_id"] == job].to_dict("records")
        return rows[0] if rows and rows[0]["state"] == "COMPLETED" else None

    r = poll(f"job {job} in sacct", row)
    assert (r["Account"], r["User"], r["Partition"], r["pred_s"], r["Comment"]) == ("vision", "alice", "t4", 7, comment)
    assert 999 not in set(report.parse_jobs(report.fetch_sacct(cfg, report.Filters(since=start)))["job_id"])
    res = CliRunner().invoke(
        admin, ["report", "--json", "--view", "accuracy", "--since", start, "-u", "alice", "-A", "vision"]
    )
    assert res.exit_code == 0, res.output
    assert any(a["Partition"] == "t4" and a["jobs"] >= 1 for a in json.loads(res.stdout)["accuracy"])


def test_slurms_gpu_accounting_is_read_from_the_real_sacct_where_it_is_gathered(slurm: Slurm) -> None:
    """The efficiency view's query of the job steps' GPU TRES runs on the real sacct of each release
    (fields and options both accept), and on a cluster that gathers none (device-node GPUs, no NVML)
    it finds none: no figure from nothing (the bundled clusters gather no usage at all,
    jobacct_gather/none). A job with a step of its own (no GPU: the query and its parsing are the
    same, and a GPU job would need a funded account)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    job = slurm.sbatch("-A", "vision", "-p", "t4", "-t", "1", script="srun true", user="alice")
    assert commands.wait_for_end(job, poll=0.3, timeout=60, bin_dir=slurm.bin_dir) == "COMPLETED"

    def steps() -> list[str]:
        out = subprocess.run(
            [str(slurm.bin_dir / "sacct"), "-n", "-P", "-j", str(job), "-o", "JobIDRaw,TRESUsageInMax"],
            capture_output=True,
            text=True,
            check=True,
            env=slurm.env(),
        ).stdout
        return [line for line in out.splitlines() if line.startswith(f"{job}.")]

    assert {line.split("|")[0] for line in poll(f"job {job}'s steps in sacct", steps)} >= {f"{job}.batch", f"{job}.0"}
    assert commands.sacct_step_gpus(["-j", str(job)], bin_dir=slurm.bin_dir) == {}
    assert commands.sacct_step_gpus(["-a", "-S", start, "-E", "now"], bin_dir=slurm.bin_dir) == {}


def test_alerts(
    system: config_mod.Config, series: dict, dataset: Path, site_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Budget and prediction alerts on the real cluster. yolo-sbatch's own refusals go to syslog and
    nowhere the admin side reads (the refusals alerts counts are slurmctld's: test_alerts.py)."""
    import syslog

    cfg = config_mod.load()
    logged: list[tuple[int, str]] = []
    monkeypatch.setattr(syslog, "syslog", lambda priority, message: logged.append((priority, message)))
    state_before = sorted(p.name for p in cfg.state_dir.iterdir())
    with ledger.writer(cfg) as lg:
        row = lg.account("research")
        lg.credit("research", -row["balance"] + 1, "test", "alerts", kind="adjustment")
    try:
        for _ in range(3):
            res = CliRunner().invoke(
                yolo_sbatch,
                ["-A", "research", "-p", "t4", "train", f"data={dataset}", "model=yolo26n.yaml", "epochs=50"],
            )
            assert res.exit_code == 1 and "cannot cover" in res.output
        assert len(logged) == 3 and all(p == syslog.LOG_USER | syslog.LOG_NOTICE for p, _ in logged)
        assert logged[0][1].startswith("yolo-sbatch refused a job: account research uid 0 needs ")
        assert not {p.name for p in cfg.state_dir.iterdir()} - set(state_before) - {"ledger.db-wal", "ledger.db-shm"}
        res = CliRunner().invoke(admin, ["alerts", "--json"])
        assert res.exit_code == 1
        found = {(a["kind"], a["subject"]) for a in json.loads(res.stdout)}
        assert ("budget", "research") in found
        assert any(kind == "prediction" for kind, _ in found)
    finally:
        with ledger.writer(cfg) as lg:
            lg.credit("research", 10**12, "test", "alerts done")
        subprocess.run(
            ["/opt/slurm-yolo/venv/bin/slurm-yolo", "ledger", "enforce", "--account", "research"],
            check=True,
            env={k: v for k, v in os.environ.items() if k != "SLURM_YOLO_HOME"},
        )


def test_metrics_textfile(system: config_mod.Config, series: dict, tmp_path: Path) -> None:
    res = CliRunner().invoke(admin, ["metrics", "--textfile", str(tmp_path)])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "slurm_yolo.prom").read_text()
    assert re.search(r'^slurm_yolo_balance_tokens\{account="research"\} \d', text, re.MULTILINE)
    assert re.search(r'^slurm_yolo_k_seconds_per_mpx\{partition="t4"\} [\d.e+-]+$', text, re.MULTILINE)
    assert "# TYPE slurm_yolo_queue_wait_seconds_median gauge" in text


def test_an_epilog_without_slurmdbd_leaves_the_run_held_for_reconcile(
    cluster: Slurm, system: config_mod.Config
) -> None:
    """slurmdbd is down when a job ends: the epilog's event waits in the inbox and nothing is settled
    from a transitional state; the settler (hookd's, or cron's reconcile) settles it once sacct answers."""
    pid = int(Path("/var/lib/slurm-yolo-cluster/run/slurmdbd.pid").read_text())  # this cluster's, not 24.11's
    os.kill(pid, signal.SIGTERM)
    try:
        job = cluster.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 2")
        poll(
            "job ended",
            lambda: cluster.cmd("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip() == "",
        )
        time.sleep(5)  # the epilog has given up asking sacct by now
        (row,) = cluster.runs(job)
        assert row["state"] == "held"
        res = cluster.cli("ledger", "balance", user="alice")  # a read says what it could not reach, shows the rest
        assert "warning: slurmdbd did not answer" in res.stderr and "vision: balance" in res.stdout
        res = cluster.cli("report", "--view", "budgets", "--view", "usage")
        assert "warning: sacct did not answer" in res.stderr and "vision" in res.stdout
        res = cluster.cli("alerts", "--json", check=False)
        assert res.returncode == 1 and "slurmdbd" in {a["kind"] for a in json.loads(res.stdout)}, res.stderr
        watched = cluster.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", script="sleep 3")
        res = cluster.cli("watch", str(watched), "--interval", "0.5")  # slurmctld alone follows it to its end
        assert res.stdout.splitlines()[-1].startswith("COMPLETED"), res.stdout
    finally:
        subprocess.run([str(REPO / "deploy" / "minicluster"), "up", "22.05"], check=True)
    rec = cluster.ended(job)[0]
    cluster.cli("ledger", "reconcile")  # cron's; the epilog's own child may have settled it already
    row = cluster.settled(job)[0]
    price = row["price"]
    assert row["end_state"] == "COMPLETED" and row["settled_by"] in ("settler", "reconcile")
    assert (row["hold"], row["charge"]) == (60 * price, int(rec["ElapsedRaw"]) * price)
    again = {d["key"] for d in json.loads(cluster.cli("ledger", "reconcile", "--json").stdout)}
    assert row["job_key"] not in again  # settled once


def test_reconcile_holds_and_settles_runs_no_prolog_held(cluster: Slurm, home: Path) -> None:
    """A ledger that saw none of the cluster's runs (every prolog failed): reconcile finds each ended
    GPU run in sacct, holds it at the price of its start and settles it, exactly; runs that started
    before the ledger kept the cluster's (billed by other books, if any) are not its to bill."""
    (home / "config.toml").write_text(own_ledger_config(cluster))
    env = {k: v for k, v in os.environ.items() if k != "SLURM_YOLO_CONFIG"} | {"SLURM_YOLO_HOME": str(home)}
    cfg = config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)})
    before = cluster.sbatch("-p", "a100", "--gres=shard:a100:2", "-t", "1", script="sleep 1")
    cluster.ended(before)
    time.sleep(1.1)  # its start, a whole second before the ledger begins
    with ledger.writer(cfg) as lg:
        joined = lg.join(cluster.name)  # as hookd does at its start
    job = cluster.sbatch("-p", "a100", "--gres=shard:a100:2", "-t", "1", script="sleep 1")
    rec = cluster.ended(job)[0]

    def reconciled() -> list[dict]:
        subprocess.run(
            ["/opt/slurm-yolo/venv/bin/slurm-yolo", "ledger", "reconcile", "--window-days", "0.05"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        lg = ledger.reader(cfg)
        assert lg is not None
        with lg:
            assert lg.check() == []
            return [dict(r) for r in lg.runs(job)]

    (row,) = poll("reconcile to find the run", reconciled, timeout=30)  # sacct's window query can lag -j
    assert (row["held_by"], row["settled_by"], row["end_state"]) == ("reconcile", "reconcile", "COMPLETED")
    assert (row["gpus"], row["hold"], row["charge"]) == (0.5, 30 * 1_000_000, int(rec["ElapsedRaw"]) * 500_000)
    with ledger.reader(cfg) as lg:  # type: ignore[union-attr]
        assert lg.runs(before) == [] and lg.joined_at(cluster.name) == joined


def test_a_failed_prolog_is_an_alert_until_its_run_is_settled(cluster: Slurm, system: config_mod.Config) -> None:
    job = cluster.sbatch("-p", "t4", "--gres=gpu:t4:1", "-t", "1", "--hold", script="true")
    assert cluster.hook("prolog", {"SLURM_JOB_ID": str(job)}) == 0  # no SLURM_CLUSTER_NAME: it cannot key the run
    res = CliRunner().invoke(admin, ["alerts", "--json"])
    hooks = [a for a in json.loads(res.stdout) if a["kind"] == "hook" and a["subject"].endswith(f":{job}")]
    assert hooks and "prolog failed" in hooks[0]["message"]

    # fail closed: a prolog that could not hold cancels its job, which never runs unheld
    # slurmdbd can get a pending job's end before the rest of its record (no partition, QOS Unknown):
    # reconcile takes no partial record, so wait for the whole one, as a later cron run would
    def cancelled() -> bool:
        state, _, partition = cluster.cmd(
            "sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State,Partition"
        ).stdout.partition("|")
        return state.startswith("CANCELLED") and partition.strip() == "t4"

    poll("the job cancelled", cancelled)
    cluster.cli("ledger", "reconcile")  # a job that ended without running holds nothing: the alert ends
    res = CliRunner().invoke(admin, ["alerts", "--json"])
    assert not [a for a in json.loads(res.stdout or "[]") if a["kind"] == "hook" and a["subject"].endswith(f":{job}")]


def test_a_price_for_no_known_cluster_or_the_past_is_refused(cluster: Slurm) -> None:
    """A typo in --cluster would set a price nothing reads, one in --from a price already due: each is
    one Error: line, and the prices stay as they were."""
    before = cluster.cli("ledger", "price", "show", "--json").stdout
    for args, why in (
        (["--cluster", "nosuch"], "no cluster 'nosuch' keeps its runs in this ledger"),
        (["--from", "2020-01-01T00:00"], "is in the past"),
        (["--cluster", "No Such"], "not a plain Slurm name"),
    ):
        res = cluster.cli("ledger", "price", "set", "t4", "5", *args, check=False)
        assert res.returncode != 0 and res.stderr.startswith("Error: ") and why in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    res = cluster.cli("ledger", "tiers", "normal", "9", "--cluster", "nosuch", check=False)
    assert res.returncode != 0 and "no cluster 'nosuch'" in res.stderr
    assert cluster.cli("ledger", "price", "show", "--json").stdout == before


def test_a_tier_is_for_a_qos_slurm_has_and_can_be_removed(cluster: Slurm) -> None:
    """A tier for a QOS Slurm does not have would never apply (a typo): refused. A tier can be
    removed (its jobs pay the price again); removing one that is not there says so."""
    before = cluster.cli("ledger", "tiers").stdout
    for args, why in (
        (["yolo-test", "0.8"], "Slurm has no QOS 'yolo-test' (it has "),
        (["yolo-dev"], "give QOS 'yolo-dev' a RATE, or --remove its tier"),
        (["yolo-dev", "0.5", "--remove"], "give QOS 'yolo-dev' a RATE, or --remove its tier"),
        (["--remove"], "--remove needs the QOS"),
        (["yolo-dev", "--remove"], "no tier for QOS 'yolo-dev' to remove"),
    ):
        res = cluster.cli("ledger", "tiers", *args, check=False)
        assert res.returncode != 0 and res.stderr.startswith(f"Error: {why}"), (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1
    assert cluster.cli("ledger", "tiers").stdout == before
    try:
        assert "yolo-dev: 0.5" in cluster.cli("ledger", "tiers", "yolo-dev", "0.5").stdout
        with cluster.ledger() as lg:
            assert lg.tier_rate("yolo-dev", cluster.name) == 500_000
        res = cluster.cli("ledger", "tiers", "yolo-dev", "--remove")
        assert res.stdout.startswith("yolo-dev: tier removed; its jobs held from now on pay the price\n")
        with cluster.ledger() as lg:
            assert lg.tier_rate("yolo-dev", cluster.name) == 1_000_000
    finally:
        cluster.cli("ledger", "tiers", "yolo-dev", "--remove", check=False)
    assert cluster.cli("ledger", "tiers").stdout == before


def test_a_scheduled_price_can_be_cancelled_and_the_price_in_effect_stays(cluster: Slurm) -> None:
    before = cluster.cli("ledger", "price", "show", "--json").stdout
    res = cluster.cli("ledger", "price", "cancel", "t4", check=False)
    assert res.returncode != 0 and res.stderr == "Error: t4 has no scheduled price to cancel (price show lists them)\n"
    cluster.cli("ledger", "price", "set", "t4", "777", "--from", "2099-01-01T00:00", "--reason", "test: later")
    cluster.cli("ledger", "price", "set", "t4", "778", "--from", "2099-02-01T00:00", "--reason", "test: later")
    assert "777" in cluster.cli("ledger", "price", "show").stdout
    res = cluster.cli("ledger", "price", "cancel", "t4")
    assert res.stdout == (
        "t4: cancelled 777 tokens per GPU-second from 2099-01-01 00:00\n"
        "t4: cancelled 778 tokens per GPU-second from 2099-02-01 00:00\n"
    )
    assert cluster.cli("ledger", "price", "show", "--json").stdout == before


def test_a_users_own_account_without_a_deposit_is_in_her_balances(cluster: Slurm) -> None:
    """bob's list of balances names his account before anyone deposited into it (it used to leave it
    out, as if he had none), and says what that means; nothing is written to the ledger."""
    name = f"nofund{os.getpid() % 100000}"
    cluster.cmd("sacctmgr", "-i", "add", "account", name, f"cluster={cluster.name}")
    cluster.cmd("sacctmgr", "-i", "add", "user", "bob", f"account={name}", f"cluster={cluster.name}")
    line = f"{name}: nothing deposited yet (no ledger entry): GPU jobs are refused until an admin deposits"
    try:
        assert line in cluster.cli("ledger", "balance", user="bob").stdout.splitlines()
        assert cluster.cli("ledger", "balance", name, user="bob").stdout == line + "\n"
        assert {"name": name, "balance": 0, "in_ledger": False} in json.loads(
            cluster.cli("ledger", "balance", "--json", user="bob").stdout
        )
        res = cluster.cli("ledger", "balance", name, user="alice", check=False)  # not hers: as before
        assert res.returncode != 0 and res.stderr.startswith(
            f"Error: account '{name}' has no ledger entry (nothing was ever deposited"
        )
        with cluster.ledger() as lg:
            assert lg.account(name) is None
    finally:
        cluster.cmd(
            "sacctmgr", "-i", "delete", "user", "bob", f"account={name}", f"cluster={cluster.name}", check=False
        )
        cluster.cmd("sacctmgr", "-i", "delete", "account", name, f"cluster={cluster.name}", check=False)


def test_alerts_catch_a_running_jobs_idle_and_overheated_gpu_from_its_usage_records(
    cluster: Slurm, tmp_path: Path
) -> None:
    """A GPU job on the real cluster whose usage records (recorded as the launcher writes them: an
    epoch every 10 minutes, NVML's figures) say its GPU ran at 12% for the last 40 minutes and at
    91 C in its latest epoch: `slurm-yolo alerts` names it twice (gpu-idle, gpu-hot) and exits 1. A
    busy, cool job beside it is not named. The records are alice's, in her job's work dir."""
    now = time.time()
    folders = {}
    for name, util, temp in (("idle", 12.0, 91.0), ("busy", 97.0, 70.0)):
        folder = Path(tempfile.mkdtemp(prefix=f"gpu-{name}-", dir="/tmp"))
        shutil.chown(folder, "alice")
        records = [{"kind": "start", "imgsz": 640, "epochs": 10, "batch": 16, "gpus": 1}] + [
            {
                "kind": "epoch",
                "time": now - (4 - n) * 600,
                "epoch": n,
                "epochs": 10,
                "images": 500,
                "seconds": 600,
                "gpu_util_pct": util,
                "gpu_mem_gb": 3.1,
                "gpu_mem_total_gb": 40.0,
                "gpu_temp_c": temp,
            }
            for n in range(5)
        ]
        (folder / "records").write_text("".join(json.dumps(r) + "\n" for r in records))
        folders[name] = folder
    script = 'cp records "yolo-usage-$SLURM_JOB_ID.jsonl" && sleep 120'
    jobs = {
        name: cluster.sbatch(
            "-A",
            "vision",
            "-p",
            "a100",
            "--gres=gpu:a100:1",
            "-t",
            "3",
            f"--chdir={folder}",
            script=script,
            user="alice",
        )
        for name, folder in folders.items()
    }
    try:

        def named() -> dict[str, set[str]] | None:
            for name, job in jobs.items():
                if not (folders[name] / f"yolo-usage-{job}.jsonl").is_file():
                    return None
            res = cluster.cli("alerts", "--json", check=False)
            found: dict[str, set[str]] = {}
            for a in json.loads(res.stdout):
                if a["kind"].startswith("gpu-"):
                    found.setdefault(a["subject"], set()).add(a["kind"])
            return found if res.returncode == 1 else None

        found = poll("both jobs running with their records", named, 90)
        assert found.get(f"job {jobs['idle']}") == {"gpu-idle", "gpu-hot"}
        assert f"job {jobs['busy']}" not in found
    finally:
        cluster.cmd("scancel", *map(str, jobs.values()), check=False)
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
