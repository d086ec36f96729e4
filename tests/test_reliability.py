"""The reliability suite: conservation under chaos, Slurm faults, hostile input, privilege boundaries."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, Slurm, fund

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.synthetic import make_dataset
from slurm_yolo.state import ledger

VENV_BIN = Path("/opt/slurm-yolo/venv/bin")
WORKER = """
import json, os, random, sys
from fractions import Fraction
from slurm_yolo.core import config
from slurm_yolo.state import ledger
cfg = config.load()
for line in sys.stdin:
    op, job, amount = json.loads(line)
    run = ledger.Run("chaos", job, 1, 0, f"acct{job % 3}", "u", "p", "", Fraction(1), 60, 60, 1000000, 1_000_000)
    with ledger.writer(cfg) as lg:
        if op == "hold":
            lg.hold(run, amount, None, "chaos")
        else:
            lg.settle(run.key, amount, "COMPLETED", 1, "chaos")
"""


def test_conservation_under_chaos(home: Path) -> None:
    """3000 hold/settle events for 600 runs: duplicated, reordered, 24 processes at once, some killed -9."""
    rng = random.Random(3)
    cfg = config_mod.load()
    with ledger.writer(cfg) as lg:
        for a in range(3):
            lg.credit(f"acct{a}", 10**9, "chaos")
    events = []
    for job in range(600):
        hold = rng.randint(1, 10**6)
        events += [("hold", job, hold)] * rng.randint(1, 3) + [("settle", job, rng.randint(0, hold * 2))] * rng.randint(
            1, 2
        )
    rng.shuffle(events)
    chunks = [events[i::24] for i in range(24)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, text=True) for _ in chunks]
    for p, chunk in zip(procs, chunks, strict=True):
        assert p.stdin is not None
        p.stdin.write("".join(json.dumps(e) + "\n" for e in chunk))
        p.stdin.close()
    time.sleep(0.5)
    victims = rng.sample(procs, 4)
    for p in victims:
        time.sleep(rng.uniform(0, 0.3))
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=300)
    assert all(p.returncode == 0 for p in procs if p not in victims)
    lg = ledger.reader(cfg)
    assert lg is not None
    try:
        assert lg.check() == []
        for kind in ("hold", "charge", "refund", "overrun"):
            dup = lg.conn.execute(
                f"SELECT count(*) FROM (SELECT job_key FROM movements WHERE kind = '{kind}' GROUP BY job_key HAVING count(*) > 1)"
            ).fetchone()[0]
            assert dup == 0, kind
        for r in lg.conn.execute("SELECT hold, charge, refund FROM jobs WHERE state = 'settled'"):
            assert r["refund"] == max(0, r["hold"] - r["charge"]) and r["charge"] >= 0  # past the hold: an overrun
        assert lg.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] > 400
    finally:
        lg.close()


BAD = [
    (["train", "data={tmp}/missing.yaml"], "not found"),
    (["train", "data={tmp}/cyclic.yaml"], "0 images"),
    (["train", "data={tmp}/empty.yaml"], "0 images"),
    (["train", "data={tmp}/notyaml.yaml"], "not readable YAML"),
    (["train", "data={ds}", "epochs=1000000000"], "absurd"),
    (["train", "data={ds}", "imgsz=100000"], "up to 8192"),
    (["train", "data={ds}", "batch=-5"], "'batch=-5'"),
    (["train", "data={ds}", "epochs=1.5"], "must be an integer"),
    (["train", "data={ds}", "näme=x"], "unknown key 'näme'"),
    (["train", "data={ds}", "name=" + "x" * 5000], "longer than 4096"),
    (["train", "data={ds}", "name=a\nb"], "control character"),
    (["train", "data={ds}", "$(touch {tmp}/pwned)=1"], "unknown key"),
    (["train", "data={ds}; touch {tmp}/pwned"], "not found"),
    (["--partition", "a\nb", "train", "data={ds}"], "control character"),
    (["--deadline", "-5m", "train", "data={ds}"], "not understood"),
    (["--deadline", "9999d", "train", "data={ds}"], "between 1 second and a year"),
    (["--flops-factor", "nan", "train", "data={ds}", "model=custom.pt"], "--flops-factor"),
    (["--sbatch-arg", "--nice=$(id)`x`;y", "--job-name", "q'\"", "train", "data={ds}"], "both kinds of quote"),
    (["--sbatch-arg=--time=1", "train", "data={ds}"], "yolo-sbatch sets --time from its plan"),
    (["--sbatch-arg=-t5", "train", "data={ds}"], "yolo-sbatch sets --time from its plan"),
    (["--sbatch-arg=--gres=gpu:a100:2", "train", "data={ds}"], "yolo-sbatch sets --gres from its plan"),
    (["--sbatch-arg=--qos=yolo-short", "train", "data={ds}"], "yolo-sbatch sets --qos from its plan"),
    (["--sbatch-arg=--comm=yolo:eff=1", "train", "data={ds}"], "yolo-sbatch sets --comment from its plan"),
    (["--sbatch-arg=--wrap=true", "train", "data={ds}"], "yolo-sbatch sets --wrap from its plan"),
    (["--wait", "--wait-timeout", "soon", "train", "data={ds}"], "duration 'soon' not understood"),
    (
        ["-A", "x'; DROP TABLE accounts; --", "--dry-run", "--sbatch-arg", "no-dash", "train", "data={ds}"],
        "--sbatch-arg",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_hostile_and_malformed_input(
    args: list[str],
    message: str,
    tmp_path: Path,
    dataset: Path,
    site_config: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One Error: line, nothing run, nothing written, no job: a job would have this test's folder as its
    work dir (other tests' jobs come and go meanwhile: CI runs a cluster's money tests beside this)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").mkdir()
    os.symlink(tmp_path / "loop", tmp_path / "loop" / "again")
    (tmp_path / "cyclic.yaml").write_text("train: loop\nval: loop\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.yaml").write_text("train: empty\nval: empty\n")
    (tmp_path / "notyaml.yaml").write_bytes(b"\x00\xff{[: :")
    before = sorted(p.name for p in home.rglob("*"))
    res = CliRunner().invoke(yolo_sbatch, ["-p", "a100", *[a.format(tmp=tmp_path, ds=dataset) for a in args]])
    assert res.exit_code != 0
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], res.output
    assert not (tmp_path / "pwned").exists()
    assert sorted(p.name for p in home.rglob("*") if p.name != "cache" and "datasets" not in p.name) == [
        n for n in before if n != "cache" and "datasets" not in n
    ]
    if Path("/usr/bin/squeue").exists():
        dirs = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%Z"], capture_output=True, text=True).stdout
        assert str(tmp_path) not in dirs.split()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ledger", "deposit", "acct", "lots"], "not understood"),
        (["ledger", "deposit", "acct", "-5G"], "must not be negative"),
        (["ledger", "quota", "set", "acct", "--rate", "1e999", "--burst", "1G"], "not understood"),
        (["ledger", "tiers", "q", "0"], "must be positive"),
        (["ledger", "tiers", "q", "0.1234567"], "more than 6 decimals"),
        (["ledger", "tiers", "q", "nan"], "not a number"),
        (["calibrate", "--partition", "p", "/nonexistent"], "no usable run"),
        (["parse", "/nonexistent/x.log"], "does not exist"),
        (["parse", "runs/detect/train2"], "does not exist"),  # a run folder mistyped: no partial result
        (["report", "--sacct-file", "/nonexistent"], "does not exist"),
        (["recalibrate", "--max-step", "abc"], "not a valid float"),
    ],
)
def test_admin_commands_refuse_bad_input(args: list[str], message: str, home: Path) -> None:
    res = CliRunner().invoke(admin, args)
    assert res.exit_code != 0 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and res.output.startswith("Error: "), res.output
    assert not (home / "ledger.db").exists() or "deposit" not in args[:2]


def test_a_slurm_conf_that_is_not_there_is_said_at_once(
    site_config: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A wrong ``SLURM_CONF`` made every Slurm command retry reading it for 60 s; yolo-sbatch gave up at
    30 s saying Slurm refused the job on every partition, hiding Slurm's ``cannot stat file``."""
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    started = time.monotonic()
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "auto", "train", f"data={dataset}", "model=yolov8n.yaml"])
    assert res.exit_code == 1 and time.monotonic() - started < 10, res.output
    assert res.output == (
        f"Error: SLURM_CONF={tmp_path / 'slurm.conf'} is no file: Slurm's commands cannot read their"
        " configuration (unset SLURM_CONF, or point it at the cluster's slurm.conf)\n"
    )


@pytest.mark.cluster
def test_a_controller_that_does_not_answer_is_not_a_refusal(
    cluster: None, site_config: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """slurmctld on a port nothing listens on (a wrong slurm.conf): ``-p auto`` asks each partition and
    hears nothing, which is no refusal; the error says Slurm did not answer, not that it refused."""
    conf = tmp_path / "slurm.conf"
    text = re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", Path("/etc/slurm/slurm.conf").read_text())
    conf.write_text(
        text + "PlugStackConfig=/etc/slurm/plugstack.conf\n"
    )  # else looked for beside it: --yolo-tokens unknown
    monkeypatch.setenv("SLURM_CONF", str(conf))
    site_config.write_text(site_config.read_text().replace("[slurm]\n", "[slurm]\ntimeout_seconds = 3.0\n"))
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "auto", "train", f"data={dataset}", "model=yolov8n.yaml"])
    assert res.exit_code == 1 and res.output.startswith("Error: sbatch: no answer from Slurm within 3s"), res.output
    assert "refuses" not in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.cluster
def test_slurmctld_down_during_submit_is_one_clear_error(
    cluster: None, site_config: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    site_config.write_text(site_config.read_text().replace("[slurm]\n", "[slurm]\ntimeout_seconds = 8.0\n"))
    pid = int(Path("/var/lib/slurm-yolo-cluster/run/slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    try:
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        res = CliRunner().invoke(yolo_sbatch, ["-p", "t4", "train", f"data={dataset}", "model=yolov8n.yaml"])
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert res.output.startswith("Error: job not submitted: sbatch")
    finally:
        subprocess.run([str(REPO / "deploy" / "minicluster"), "up"], check=True)


@pytest.mark.cluster
def test_users_cannot_change_k_or_forge_a_refund(
    cluster: Slurm, hooks_config: config_mod.Config, run_dir_for_alice: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "SLURM_YOLO_CONFIG": str(cluster.config_path)}

    def as_alice(*argv: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/usr/sbin/runuser", "-u", "alice", "--", *argv],
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
            cwd="/tmp",
        )

    res = as_alice(str(VENV_BIN / "slurm-yolo"), "calibrate", "--partition", "t4", str(run_dir_for_alice))
    assert res.returncode == 1 and "permission denied" in res.stderr
    cfg = hooks_config
    lg = ledger.reader(cfg)
    assert lg is not None
    try:
        before = [dict(r) for r in lg.conn.execute("SELECT * FROM accounts ORDER BY name")]
        last = lg.conn.execute("SELECT job_id FROM jobs ORDER BY held_at DESC LIMIT 1").fetchone()
    finally:
        lg.close()
    forged = {
        "SLURM_JOB_ID": str(last["job_id"] if last else 1),
        "SLURM_JOB_ACCOUNT": "vision",
        "SLURM_CLUSTER_NAME": "yolo",
        "SLURM_JOB_RESTART_COUNT": "0",
    }
    assert as_alice(str(VENV_BIN / "slurm-yolo-epilog"), extra=forged).returncode == 0  # never fails Slurm...
    lg = ledger.reader(cfg)
    assert lg is not None
    try:
        assert [
            dict(r) for r in lg.conn.execute("SELECT * FROM accounts ORDER BY name")
        ] == before  # ...and moved nothing
    finally:
        lg.close()


@pytest.fixture
def run_dir_for_alice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder alice can read (the refusal must come from the state, not from her input)."""
    d = Path("/var/tmp/slurm-yolo-tests")
    d.mkdir(mode=0o755, exist_ok=True)
    run = Path(os.path.join(str(d), f"alice-run-{os.getpid()}"))
    run.mkdir(exist_ok=True)
    run.chmod(0o755)
    return run


@pytest.mark.cluster
def test_users_read_k_and_plan_without_write_access(cluster: Slurm, hooks_config: config_mod.Config) -> None:
    """calibration.db and ledger.db belong to the SlurmUser; a user reads both (k, balance) to plan."""
    state = hooks_config.state_dir
    assert not os.access(state, os.W_OK) or os.geteuid() == 0
    folder = Path("/var/tmp/slurm-yolo-tests") / f"alice-ds-{os.getpid()}"
    from slurm_yolo.core.synthetic import make_dataset

    data = make_dataset(folder, train=4, val=2, size=32)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "SLURM_YOLO_CONFIG": str(cluster.config_path)}
    res = subprocess.run(
        [
            "/usr/sbin/runuser",
            "-u",
            "alice",
            "--",
            str(VENV_BIN / "yolo-sbatch"),
            "--dry-run",
            "--json",
            "-p",
            "t4",
            "train",
            f"data={data}",
            "model=yolov8n.pt",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["k"] > 0
    res = subprocess.run(
        ["/usr/sbin/runuser", "-u", "alice", "--", str(VENV_BIN / "slurm-yolo"), "k", "-p", "t4"],
        env=env,
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    assert res.returncode == 0 and res.stdout.startswith("t4: k ")


@pytest.mark.cluster
def test_an_account_she_is_not_in_is_said_so_not_that_it_is_empty(cluster: Slurm) -> None:
    """alice with ``-A`` an account made for this test (funded, hers not) and ``-A nosuchacct``:
    slurmctld's admission runs before Slurm checks the association, so both read as "cannot cover ...
    0 left" or Slurm's generic line; yolo-sbatch now says whose account it is not (hers as Slurm has
    them, whatever others left), and submits nothing."""
    folder = Path("/var/tmp/slurm-yolo-tests") / f"alice-acct-{os.getpid()}"
    from slurm_yolo.core.synthetic import make_dataset

    data = make_dataset(folder, train=4, val=2, size=32)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    other = "yolo-notalice"  # one name: its ledger entry is reused, not one more per run
    cluster.cmd("sacctmgr", "-i", "add", "account", other, "parent=root", check=False)  # there already: fine
    fund(cluster, (other,), 10**15)
    hers = cluster.cmd("sacctmgr", "-n", "-P", "show", "assoc", "user=alice", "format=account").stdout.split()
    assert "vision" in hers and other not in hers
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "SLURM_YOLO_CONFIG": str(cluster.config_path)}
    before = cluster.cmd("squeue", "-h", "-u", "alice", "-o", "%i").stdout

    def as_alice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "/usr/sbin/runuser",
                "-u",
                "alice",
                "--",
                str(VENV_BIN / "yolo-sbatch"),
                *args,
                "train",
                f"data={data}",
                "model=yolov8n.yaml",
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd="/tmp",
        )

    for account in (other, "nosuchacct"):
        why = (
            f"account '{account}' is not one you may submit to (yours: {', '.join(sorted(set(hers)))}): give -A one"
            " of yours, or ask its coordinator to add you"
        )
        for partition in ("t4", "auto"):  # auto: not Slurm's "Invalid account" once per partition
            res = as_alice("-A", account, "-p", partition)
            assert (res.returncode, res.stdout, res.stderr) == (1, "", f"Error: {why}\n"), (partition, res.stderr)
        res = as_alice("-A", account, "-p", "t4", "--dry-run")  # a plan, with the word that it would be refused
        assert res.returncode == 0 and res.stdout.startswith("Not submitted (--dry-run)"), res.stdout
        assert f"warning: {why}; a submission would be refused" in res.stderr.splitlines(), res.stderr
    assert cluster.cmd("squeue", "-h", "-u", "alice", "-o", "%i").stdout == before
    cluster.cmd("sacctmgr", "-i", "delete", "account", other, check=False)


@pytest.mark.cluster
def test_a_partition_slurm_has_not_got_is_named_with_those_it_has(cluster: Slurm, dataset: Path) -> None:
    """``-p v100`` plans (with a warning) and Slurm refuses it: the error lists Slurm's partitions, and
    ``-p T4`` asks whether t4 was meant. Nothing is submitted."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "SLURM_YOLO_CONFIG": str(cluster.config_path)}
    before = cluster.cmd("squeue", "-h", "-o", "%i").stdout
    for partition, hint in (("v100", ""), ("T4", "did you mean -p t4? ")):
        res = subprocess.run(
            [
                str(VENV_BIN / "yolo-sbatch"),
                "-A",
                "vision",
                "-p",
                partition,
                "train",
                f"data={dataset}",
                "model=yolov8n.yaml",
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd="/tmp",
        )
        error = res.stderr.splitlines()[-1]
        assert res.returncode == 1 and error.startswith("Error: job not submitted: ") and "Invalid partition" in error
        assert error.endswith(f" ({hint}Slurm's partitions: a100, debug, t4)"), error
    assert cluster.cmd("squeue", "-h", "-o", "%i").stdout == before


@pytest.mark.cluster
def test_a_project_folder_she_cannot_write_is_refused_before_the_job_pays_for_it(cluster: Slurm) -> None:
    """alice with ``project=`` a root-owned folder (the README's project folder, once root's):
    the job failed on a PermissionError and was charged. Now one Error: line, even for a dry run; a
    folder this host does not show (a compute node's scratch) is left to the job."""
    folder = Path("/var/tmp/slurm-yolo-tests") / f"project-{os.getpid()}"
    from slurm_yolo.core.synthetic import make_dataset

    data = make_dataset(folder / "ds", train=4, val=2, size=32)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (folder / "roots").mkdir(mode=0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "SLURM_YOLO_CONFIG": str(cluster.config_path)}

    def dry_run(project: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "/usr/sbin/runuser",
                "-u",
                "alice",
                "--",
                str(VENV_BIN / "yolo-sbatch"),
                "--dry-run",
                "-p",
                "t4",
                "train",
                f"data={data}",
                "model=yolov8n.yaml",
                f"project={project}",
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd="/tmp",
        )

    for project, blocked in ((folder / "roots", folder / "roots"), (folder / "roots" / "mine", folder / "roots")):
        res = dry_run(str(project))
        assert (res.returncode, res.stdout) == (1, "")
        assert res.stderr == (
            f"Error: project={project}: {blocked} is not a folder you can write (the job would fail"
            " on it): give project= a folder of yours\n"
        )
    assert dry_run("/nonexistent-scratch/alice/runs").returncode == 0


@pytest.mark.cluster
def test_minicluster_status_says_what_runs(cluster: None) -> None:
    res = subprocess.run([str(REPO / "deploy" / "minicluster"), "status"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    for daemon in ("munge", "mariadb", "slurmdbd", "slurmctld", "slurmd gpu-a100-1", "slurmd gpu-t4-1", "hookd"):
        assert re.search(rf"^{daemon}\s+running$", res.stdout, re.M), daemon
    assert "PrologSlurmctld=/opt/slurm-yolo/bin/slurm-yolo-hook" in res.stdout
    assert "spank: optional /opt/slurm-yolo/lib/yolo_tokens.so" in res.stdout


class _Payload:
    """Unpickling this creates ``target``: what a hostile ``.pt`` can do to whoever loads it."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.target, "w"))


def test_calibrate_never_unpickles_a_users_model_as_root(yolo_env: dict[str, str], home: Path) -> None:
    """`slurm-yolo calibrate` on a run folder whose args.yaml names alice's own model.pt: root measures
    the model's FLOPs in a child running as alice, so her pickle cannot write where only root can."""
    import pickle
    import uuid

    probe = home / "probe"
    pickle.loads(pickle.dumps(_Payload(str(probe))))
    assert probe.exists()  # the payload is live
    target = Path("/root") / f"slurm-yolo-pwned-{uuid.uuid4().hex[:8]}"
    run = Path("/var/tmp/slurm-yolo-tests") / f"alice-evil-{os.getpid()}"
    run.mkdir(parents=True, exist_ok=True)
    (run / "model.pt").write_bytes(pickle.dumps(_Payload(str(target)), protocol=2))
    data = make_dataset(run / "ds", train=4, val=2, size=64)  # hers: calibrate reads what she can, as her
    (run / "args.yaml").write_text(
        f"task: detect\nmode: train\nmodel: {run / 'model.pt'}\ndata: {data}\nepochs: 1\nimgsz: 64\n"
    )
    (run / "results.csv").write_text("epoch,time,train/box_loss\n1,5.0,1.0\n")
    alice = int(subprocess.run(["id", "-u", "alice"], capture_output=True, text=True).stdout)
    os.chown(run.parent, alice, alice)
    run.parent.chmod(0o755)
    subprocess.run(["chown", "-R", f"{alice}:{alice}", str(run)], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(run)], check=True)
    env = {**yolo_env, "SLURM_YOLO_HOME": str(home)}
    res = subprocess.run(
        [str(VENV_BIN / "slurm-yolo"), "calibrate", "--partition", "evil", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not target.exists(), "alice's pickle ran as root"
    assert (
        res.returncode == 1
        and res.stderr.startswith("Error: no usable run")
        and "cannot measure its FLOPs" in res.stderr
    ), res.stderr


def test_a_hook_cancels_the_array_task_not_the_array() -> None:
    """The task that keeps an array's record has the array's id as its own: ``scancel`` of that id
    would cancel every task, so a failing or over-budget prolog names the task."""
    from slurm_yolo.controller.hooks import _own_target

    assert _own_target({"SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "0"}, 100) == "100_0"
    assert _own_target({"SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "3"}, 103) == "100_3"
    assert _own_target({}, 104) == "104"
    assert _own_target({"SLURM_ARRAY_JOB_ID": "$(id)", "SLURM_ARRAY_TASK_ID": "1"}, 105) == "105"
