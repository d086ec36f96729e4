"""Shared fixtures: isolated state, a synthetic dataset, the real local Slurm cluster, ultralytics offline."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest

from slurm_yolo.core import config as config_mod
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate, timemodel
from slurm_yolo.core.synthetic import make_dataset
from slurm_yolo.state import calibration, ledger

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # bench/ is not installed: its tests import it from the checkout
IN_CI = os.environ.get("CI", "").lower() == "true"
# Written by deploy/minicluster, and by nothing else: one file per bundled cluster (release).
MARKERS = Path("/var/lib/slurm-yolo-cluster/clusters")
# The releases under test: deploy/minicluster's own list, or the ones MINICLUSTER_RELEASES names (as
# `deploy/minicluster up` brings them), so CI can test one release apart from the others.
KNOWN_RELEASES = ("22.05", "24.11", "26.05")
RELEASES = tuple(os.environ.get("MINICLUSTER_RELEASES", " ".join(KNOWN_RELEASES)).split())
BACKENDS = ("sqlite", "mariadb")
MYSQL_SOCKET = Path("/run/mysqld/mysqld.sock")
USERS_FS = Path("/tmp/slurm-yolo-users")  # deploy/minicluster's users' file system (login and compute nodes)
REPORT = (  # the launcher's reporter, as a job runs it: its usage records into its Comment
    "import os\n"
    "from pathlib import Path\n"
    "from slurm_yolo.job.launcher import CommentReporter\n"
    "CommentReporter(Path('yolo-usage-' + os.environ['SLURM_JOB_ID'] + '.jsonl')).poll(force=True)\n"
)
VENV_BIN = Path("/opt/slurm-yolo/venv/bin")
FONT = (
    next(iter(sorted(Path("/usr/share/fonts/truetype").rglob("*.ttf"))), None)
    if Path("/usr/share/fonts/truetype").is_dir()
    else None
)


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own SLURM_YOLO_HOME (config + state), readable by the SlurmUser."""
    path = tmp_path_factory.mktemp("home")
    path.chmod(0o755)
    monkeypatch.setenv("SLURM_YOLO_HOME", str(path))
    monkeypatch.delenv("SLURM_YOLO_CONFIG", raising=False)
    return path


@pytest.fixture
def site_config(home: Path) -> Path:
    """The bundled cluster's config (two partitions, QOS tiers) in the test's home."""
    target = home / "config.toml"
    text = (REPO / "deploy" / "config.toml").read_text()
    text = text.replace('python = "/opt/slurm-yolo/venv/bin/python"', f'python = "{sys.executable}"')
    target.write_text(text)
    return target


@pytest.fixture
def training_site(site_config: Path, yolo_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled cluster's config whose jobs train with the tests' ultralytics settings (offline, a
    font), run from the test's own folder (readable by the job): for tests that train real jobs."""
    site_config.write_text(
        site_config.read_text().replace("[job]\n", f'[job]\nyolo_config_dir = "{yolo_env["YOLO_CONFIG_DIR"]}"\n')
    )
    tmp_path.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    return site_config


def mysql(statement: str) -> None:
    """A statement as MariaDB's root on the bundled 22.05 cluster's server (the one its slurmdbd uses)."""
    subprocess.run(["mysql", "--protocol=socket", "-e", statement], check=True, capture_output=True, timeout=60)


@pytest.fixture
def mariadb_options(tmp_path: Path) -> Iterator[Path]:
    """An option file for a database and user of the test's own on the bundled MariaDB (mode 600, as
    a site keeps the ledger's credentials), both dropped afterwards."""
    if not (MARKERS / "22.05.json").is_file():
        _missing("the bundled cluster's MariaDB is not up (deploy/minicluster up)")
    name, password = f"yolo_test_{secrets.token_hex(4)}", secrets.token_hex(16)
    mysql(
        f"CREATE DATABASE {name}; CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}';"
        f" GRANT ALL ON {name}.* TO '{name}'@'localhost'"
    )
    path = tmp_path / "ledger.cnf"
    path.write_text(f"[client]\nuser={name}\npassword={password}\ndatabase={name}\nsocket={MYSQL_SOCKET}\n")
    path.chmod(0o600)
    shutil.chown(path, "slurm", "slurm")  # the SlurmUser's (paths.owner), as a site keeps it
    try:
        yield path
    finally:
        mysql(f"DROP DATABASE {name}; DROP USER '{name}'@'localhost'")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, home: Path) -> str:
    """Each ledger backend in turn: the test's own config (in its home) keeps the books in SQLite, or
    on the bundled MariaDB in a database of its own."""
    if request.param == "mariadb":
        options = request.getfixturevalue("mariadb_options")
        with (home / "config.toml").open("a") as f:
            f.write(f'\n[ledger]\nbackend = "mariadb"\nmariadb_options = "{options}"\n')
    return str(request.param)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic detection dataset: 16 train, 8 val images at 96 px."""
    root = tmp_path_factory.mktemp("ds")
    root.chmod(0o755)
    return make_dataset(root, train=16, val=8, size=96)


def _missing(why: str) -> None:
    """Under CI a missing cluster fails, never skips."""
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


class Slurm(NamedTuple):
    """One bundled cluster (deploy/minicluster), known by the marker only minicluster writes. Its
    hooks keep their own config and state, never a site's /etc/slurm-yolo or /var/lib/slurm-yolo."""

    release: str
    name: str  # ClusterName
    root: Path  # "/" or the Debian 13 chroot
    bin_dir: Path  # its commands (for 24.11: wrappers that run them in the chroot)
    config_path: Path  # the hooks' config (the same path inside the chroot)
    state_dir: Path

    def config(self) -> config_mod.Config:
        return config_mod.load(self.config_path, env={"SLURM_YOLO_CONFIG": str(self.config_path)})

    def env(self, user: str | None = None) -> dict[str, str]:
        """An environment for this cluster's commands and slurm-yolo's, as root or as ``user``."""
        env = {k: v for k, v in os.environ.items() if k not in ("SLURM_YOLO_HOME", "MINICLUSTER_USER")}
        env["SLURM_YOLO_CONFIG"] = str(self.config_path)
        if user:
            env |= {"HOME": f"/home/{user}", "USER": user, "LOGNAME": user}
        if user and user != "root" and self.root != Path("/"):
            env["MINICLUSTER_USER"] = user
        return env

    def cmd(
        self, *argv: str, user: str | None = None, input: str | None = None, check: bool = True, cwd: str = "/tmp"
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm command of this cluster (``argv[0]`` from its bin dir), as root or as ``user``."""
        full = [str(self.bin_dir / argv[0]), *argv[1:]]
        if user and self.root == Path("/"):
            full = ["/usr/sbin/runuser", "-u", user, "--", *full]
        res = subprocess.run(
            full, input=input, capture_output=True, text=True, env=self.env(user), cwd=cwd, timeout=120
        )
        if check and res.returncode != 0:
            raise AssertionError(f"{argv[0]} failed: {res.stderr.strip()}")
        return res

    def sbatch(self, *args: str, script: str = "sleep 1", user: str | None = None) -> int:
        res = self.cmd("sbatch", "--parsable", "-o", "/dev/null", *args, user=user, input=f"#!/bin/bash\n{script}\n")
        return int(res.stdout.strip().split(";")[0])

    def cli(
        self, *args: str, user: str | None = None, check: bool = True, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``slurm-yolo ARGS`` on this cluster's config, where its users run it: the installed one on
        the host, the source tree with the chroot's Python 3.13 on Debian 13."""
        argv = [str(VENV_BIN / "slurm-yolo"), *args]
        if self.root != Path("/"):
            argv = [
                "/usr/sbin/chroot",
                f"--userspec={user or 'root'}:{user or 'root'}",
                str(self.root),
                "/usr/bin/env",
                "PYTHONPATH=/opt/slurm-yolo/src",
                "PYTHONDONTWRITEBYTECODE=1",
                "/usr/bin/python3",
                "-m",
                "slurm_yolo",
                *args,
            ]
        elif user:
            argv = ["/usr/sbin/runuser", "-u", user, "--", *argv]
        res = subprocess.run(
            argv, capture_output=True, text=True, env=self.env(user) | (extra_env or {}), cwd="/tmp", timeout=300
        )
        if check and res.returncode != 0:
            raise AssertionError(f"slurm-yolo {' '.join(args)} failed: {res.stdout}{res.stderr}")
        return res

    def hook(self, event: str, env: dict[str, str]) -> int:
        """Run this cluster's own PrologSlurmctld or EpilogSlurmctld by hand, with ``env``."""
        argv = [str(self.config_path.parent / event), event]
        if self.root != Path("/"):
            argv = ["/usr/sbin/chroot", str(self.root), *argv]
        return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, timeout=120).returncode

    def ledger(self) -> ledger.Ledger:
        lg = ledger.reader(self.config())
        assert lg is not None, f"no ledger in {self.state_dir}"
        return lg

    def runs(self, job: int) -> list[dict[str, Any]]:
        with self.ledger() as lg:  # the other cluster's job of that number may share the ledger
            return [dict(r) for r in lg.runs(job, self.name)]

    def settled(self, job: int, count: int = 1, timeout: float = 90) -> list[dict[str, Any]]:
        """The job's first ``count`` runs once all are settled, oldest first."""

        def find() -> list[dict[str, Any]] | None:
            rows = sorted((r for r in self.runs(job) if r["state"] == "settled"), key=lambda r: r["submit_time"])
            return rows if len(rows) >= count else None

        return poll(f"job {job}: {count} run(s) settled on {self.release}", find, timeout)

    def at_rest(self, job: int, timeout: float = 120) -> None:
        """Wait until the job is over in sacct and, if it started, its runs are settled in the ledger:
        a cancelled run's refund lands after slurmctld forgets the job, and a balance set before it
        lands is not the balance a test then submits against."""

        def rested() -> bool:
            rows = self.sacct(job)
            if not rows or any(r["End"] in ("Unknown", "") for r in rows):
                return False
            runs = self.runs(job)
            started = any(r["AllocTRES"] for r in rows)  # 22.05 gives a job cancelled pending a Start
            return (bool(runs) or not started) and all(r["state"] == "settled" for r in runs)

        poll(f"job {job} over in sacct and its runs settled on {self.release}", rested, timeout)

    def sacct(self, job: int) -> list[dict[str, str]]:
        """slurmdbd's own record of each run, read here without slurm-yolo's parsers: the test's facts.
        Only the job's own rows: ``-j`` of an array's last task (whose raw id is the array's) lists
        every task."""
        fields = ["JobIDRaw", "Submit", "State", "ElapsedRaw", "AllocTRES", "TimelimitRaw", "End", "Start"]
        res = self.cmd("sacct", "-X", "-D", "-n", "-P", "-j", str(job), "-o", ",".join(fields))
        rows = [dict(zip(fields, line.split("|"), strict=True)) for line in res.stdout.splitlines() if line.strip()]
        return [r for r in rows if r["JobIDRaw"] == str(job)]

    def ended(self, job: int, count: int = 1, timeout: float = 120) -> list[dict[str, str]]:
        """sacct's records of the job's first ``count`` runs, once all have ended."""
        unfinished = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", ""}

        def find() -> list[dict[str, str]] | None:
            rows = self.sacct(job)  # an end state with End=Unknown: slurmdbd has not the end time yet
            ended = [
                r
                for r in rows
                if (r["State"].split(" ")[0] not in unfinished or r["State"] == "REQUEUED")
                and r["End"] not in ("Unknown", "")
            ]
            return rows if len(ended) >= count and len(rows) >= count else None

        return poll(f"job {job}: {count} run(s) ended in sacct on {self.release}", find, timeout)


class ReplayCluster(NamedTuple):
    """A test's own ``deploy/replaycluster`` (its state folder and ports: neither minicluster's nor
    another test's), accounting through the bundled 22.05 cluster's slurmdbd."""

    state: Path  # under the bundled clusters' state, never a site's
    port: int
    node_port: int

    def env(self) -> dict[str, str]:
        """deploy/replaycluster's environment: nothing of this process's cluster, config or user."""
        drop = ("SLURM_CONF", "SLURM_YOLO_HOME", "SLURM_YOLO_CONFIG", "MINICLUSTER_USER")
        e = {k: v for k, v in os.environ.items() if k not in drop}
        return e | {"REPLAYCLUSTER_STATE": str(self.state), "REPLAYCLUSTER_PORT": str(self.port),
                    "REPLAYCLUSTER_NODE_PORT": str(self.node_port)}  # fmt: skip

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``deploy/replaycluster ARGS``, which must succeed."""
        res = subprocess.run(
            ["bash", str(REPO / "deploy" / "replaycluster"), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=150,
        )
        assert res.returncode == 0, f"replaycluster {' '.join(args)}: {res.stdout}{res.stderr}"
        return res


def own_ledger_config(slurm: Slurm) -> str:
    """The cluster's config text for a test's own state folder (SLURM_YOLO_HOME): its own SQLite
    ledger there, never the cluster's books (which may be the shared MariaDB ledger), and no Slurm
    limits or AdminComments written from it; its published copies beside it, not in the cluster's
    public folder."""
    text = re.sub(r"(?m)^(backend|mariadb_options|public_dir) = .*\n", "", slurm.config_path.read_text())
    return text.replace("[ledger]\n", "[ledger]\nenforce = false\nadmin_comment = false\n")


def cluster_of_release(release: str) -> Slurm:
    """The bundled cluster of ``release``, once its marker and its slurm.conf agree, its accounts funded."""
    slurm = bundled(release)
    fund(slurm, ("vision", "research"), 10**15)  # a fresh cluster's first GPU job would leave them dry
    return slurm


def between_ups(release: str) -> Slurm:
    """The bundled cluster of ``release`` once it is up: another test (CI runs the other cluster's
    beside this one) may be bringing it back with ``deploy/minicluster up``, which takes its marker
    away until it is done."""
    found: list[Slurm] = []

    def up() -> bool:
        try:
            found.append(bundled(release))
        except (pytest.fail.Exception, pytest.skip.Exception):
            return False
        return True

    poll(f"the {release} cluster up", up, 300)
    return found[-1]


def bundled(release: str) -> Slurm:
    """The bundled cluster of ``release``, once its marker and its slurm.conf agree; its books as they are
    (another test may be counting on them)."""
    path = MARKERS / f"{release}.json"
    if not path.is_file():
        _missing(f"no bundled Slurm {release} cluster (deploy/minicluster up): {path} is missing")
    m = json.loads(path.read_text())
    conf = Path(m["conf_dir"]) / "slurm.conf"
    if f"# slurm-yolo-minicluster-id: {m['id']}" not in (conf.read_text() if conf.is_file() else ""):
        pytest.fail(f"{conf} was not written by deploy/minicluster ({path}): refusing to touch this Slurm")
    slurm = Slurm(release, m["cluster"], Path(m["root"]), Path(m["bin_dir"]), Path(m["config"]), Path(m["state_dir"]))
    if slurm.cmd("scontrol", "ping", check=False).returncode != 0:
        _missing(f"the bundled Slurm {release} cluster is not running (deploy/minicluster up)")
    assert slurm.config().state_dir == slurm.state_dir and not str(slurm.state_dir).startswith("/var/lib/slurm-yolo/")
    return slurm


def nothing_pending(slurm: Slurm, account: str) -> None:
    """Before a test that needs exact numbers: ``account``'s jobs (an earlier test's) are cancelled and
    gone from this cluster, so its job_submit.lua counts nothing pending for it; on a shared ledger
    the other bundled cluster's are cancelled too, if it is on that ledger (CI runs one cluster's money
    tests on its own SQLite books meanwhile), and what that cluster counted for the account has
    drained from the ledger (its hookd drops it once nothing is pending there)."""
    slurm.cmd("scancel", "-A", account, check=False)
    poll(f"{account}'s jobs gone", lambda: not slurm.cmd("squeue", "-h", "-A", account, "-o", "%i").stdout.strip(), 120)
    if slurm.config().ledger.backend != "mariadb":
        return
    for release in RELEASES:
        other = between_ups(release) if release != slurm.release else None
        if other is not None and other.config().ledger.backend == "mariadb":
            other.cmd("scancel", "-A", account, check=False)

    def drained() -> bool:
        with slurm.ledger() as lg:
            return not [r for r in lg.commitments() if r["account"] == account and r["cluster"] != slurm.name]

    poll(f"what other clusters count for {account} drained", drained, timeout=60)


def balance_path(slurm: Slurm, account: str, since_id: int) -> list[int]:
    """The account's balance after each movement since movement ``since_id``, from the movements
    alone: what it had beyond its holds at every moment."""
    with slurm.ledger() as lg:
        rows = [r for r in lg.movements() if r["account"] == account]
    sign = {
        "deposit": 1,
        "refill": 1,
        "adjustment": 1,
        "hold": -1,
        "refund": 1,
        "expiry": -1,
        "overrun": -1,
        "charge": 0,
    }
    balance, path = 0, []
    for r in rows:
        balance += sign[r["kind"]] * r["amount"]
        if r["id"] > since_id:
            path.append(balance)
    return path


def last_movement(slurm: Slurm, account: str) -> int:
    """The id of the account's last movement: the ledger is shared (CI runs the backup-controller
    cluster's array on it beside the money tests), so another account's movements are no mark."""
    with slurm.ledger() as lg:
        return max((r["id"] for r in lg.movements() if r["account"] == account), default=0)


PRICE = {"t4": 1_000, "a100": 3_000}  # tokens per GPU-second, as the money tests' admin sets them


def set_test_prices(slurm: Slurm) -> None:
    """The tests' prices on every cluster of the cluster's ledger, and no tier surcharge on the default
    QOS, as an admin sets them over what someone left (docs/money.md's per-cluster examples among it):
    a price for the partition on each cluster that has its own (one cluster's own price wins over
    every cluster's), no tier of one cluster alone, no price scheduled for later."""
    with slurm.ledger() as lg:
        own = {(r["cluster"], r["partition"]) for r in lg.prices() if r["cluster"]}
        own_tiers = {(r["cluster"], r["qos"]) for r in lg.tiers() if r["cluster"]}
        later = {(r["cluster"], r["partition"]) for r in lg.prices() if float(r["effective_at"]) > time.time()}
    for cluster, partition in sorted(later):
        slurm.cli("ledger", "price", "cancel", partition, *(["--cluster", cluster] if cluster else []))
    for partition, price in PRICE.items():
        slurm.cli("ledger", "price", "set", partition, str(price), "--reason", "tests")
    for cluster, partition in sorted(own):
        if partition in PRICE:
            slurm.cli(
                "ledger", "price", "set", partition, str(PRICE[partition]), "--cluster", cluster, "--reason", "tests"
            )
    for cluster, qos in sorted(own_tiers):
        slurm.cli("ledger", "tiers", qos, "--remove", "--cluster", cluster)
    slurm.cli("ledger", "tiers", "normal", "1")


@pytest.fixture(scope="session")
def priced(slurm: Slurm) -> Slurm:
    """The cluster with the tests' prices and no tier surcharge on the default QOS (every cluster's)."""
    set_test_prices(slurm)
    return slurm


def fund(slurm: Slurm, accounts: tuple[str, ...], target: int) -> None:
    """Set the accounts' balances to ``target``, as an admin would, with no quota refilling them (one
    that someone following the README left on the cluster would), and let Slurm start their jobs."""
    with ledger.writer(slurm.config()) as lg:
        for account in accounts:
            if lg.account(account):
                lg.set_quota(account, 0, 0, "test setup")  # what it earned so far, then nothing more
            row = lg.account(account)
            lg.credit(account, target - (row["balance"] if row else 0), "test", "test setup", kind="adjustment")
    slurm.cli("ledger", "enforce", *[a for account in accounts for a in ("--account", account)])


@pytest.fixture(scope="session")
def cluster() -> Slurm:
    """The real local Slurm 22.05 (deploy/minicluster up), with the hooks' config and state."""
    return cluster_of_release("22.05")


@pytest.fixture(scope="session", params=RELEASES)
def slurm(request: pytest.FixtureRequest) -> Slurm:
    """Each bundled cluster in turn: the money path's tests run on both supported releases."""
    return cluster_of_release(request.param)


@pytest.fixture
def hooks_config(cluster: Slurm, monkeypatch: pytest.MonkeyPatch) -> config_mod.Config:
    """This process (and its children) on the 22.05 cluster's hook config and state."""
    monkeypatch.delenv("SLURM_YOLO_HOME", raising=False)
    monkeypatch.setenv("SLURM_YOLO_CONFIG", str(cluster.config_path))
    return cluster.config()


@pytest.fixture(scope="session")
def yolo_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for real ultralytics runs: offline, with a font, CPU only. Needs the [train] extra."""
    try:
        import ultralytics  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("ultralytics is not installed (the [train] extra)")
        pytest.skip("ultralytics is not installed (the [train] extra)")
    cfg = tmp_path_factory.mktemp("yolo_cfg")
    cfg.chmod(0o755)
    (cfg / "Ultralytics").mkdir()
    if FONT:
        shutil.copyfile(FONT, cfg / "Ultralytics" / "Arial.ttf")
    return {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(cfg), "CUDA_VISIBLE_DEVICES": ""}


def skip_requeue_delay(job: int, slurm: Slurm) -> None:
    """Start a requeued job now instead of after Slurm's begin-time delay. slurmd refuses a relaunch
    whose credential is from the same second as the revocation, so wait past that second first."""

    def pending() -> bool:
        return slurm.cmd("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip() == "PENDING"

    poll(f"job {job} pending again", pending, timeout=60)
    time.sleep(2.5)
    slurm.cmd("scontrol", "update", f"jobid={job}", "starttime=now", check=False)


def poll(what: str, fn: Callable[[], T], timeout: float = 90) -> T:
    """Poll ``fn`` until it returns something truthy (never a fixed sleep); that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


CLUSTER_FIXTURES = {"cluster", "slurm", "mariadb_options"}  # and every fixture that uses one


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a bundled cluster (or its MariaDB) is a ``cluster`` test whether or not its
    module says so: ``-m "not cluster"`` then selects tests that touch no cluster, which may run
    beside the cluster tests."""
    for item in items:
        on_mariadb = getattr(getattr(item, "callspec", None), "params", {}).get("backend") == "mariadb"
        uses = CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if (uses or on_mariadb) and not item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def work(slurm: Slurm) -> Iterator[Path]:
    """A folder of alice's on the users' file system, which the controller does not see."""
    assert (USERS_FS / ".users-fs").is_file(), "deploy/minicluster up makes the users' file system"
    folder = Path(tempfile.mkdtemp(dir=USERS_FS))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def records(seconds: list[float], imgsz: int = 320, images: int = 40) -> str:
    """A usage file as the launcher writes it: yolov8n on ``images`` images at ``imgsz`` px,
    ``seconds`` per epoch."""
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    w = estimate.workload(
        spec.parse(["train", "data=d.yaml", f"epochs={len(seconds)}", f"imgsz={imgsz}"]), images, max(1, images // 5), m
    )
    recs = [{"kind": "start", "gpus": 1, "cpus": 1, "workload": w.to_dict()}]
    recs += [
        {
            "kind": "epoch",
            "epoch": i + 1,
            "epochs": len(seconds),
            "images": images,
            "tokens": images * imgsz**2,
            "seconds": s,
        }
        for i, s in enumerate(seconds)
    ]
    return "".join(json.dumps(r) + "\n" for r in recs)


def run_reporting(
    slurm: Slurm, work: Path, seconds: list[float], sleep: int, imgsz: int = 320, images: int = 40, user: str = "alice"
) -> int:
    """``user``'s job (alice's by default): its usage records (``records``), the launcher's reporter,
    then ``sleep`` seconds more; its id."""
    # the installed package (deploy/install), or in the 24.11 root this source tree with its own Python
    python = "/opt/slurm-yolo/venv/bin/python" if slurm.root == Path("/") else "PYTHONPATH=/opt/slurm-yolo/src python3"
    script = (
        f"cat > yolo-usage-$SLURM_JOB_ID.jsonl <<'EOF'\n{records(seconds, imgsz, images)}EOF\n"
        f'{python} -c "{REPORT}" || exit 3\nsleep {sleep}\n'
    )
    return slurm.sbatch(
        "-p",
        "t4",
        "--gres=gpu:t4:1",
        "-t",
        "2",
        "-D",
        str(work),
        "--comment=yolo:eff=1,pred_s=9",
        script=script,
        user=user,
    )


def sample_of(slurm: Slurm, job: int) -> calibration.Sample | None:
    """The calibration sample the cluster's feedback made of ``job``'s summary, if any yet."""
    with calibration.Store(slurm.config()) as store:
        found = [s for s in store.samples("t4", limit=10**6) if s.key == f"job:{slurm.name}:{job}"]
    return found[0] if found else None


def reference_workloads() -> list[timemodel.Workload]:
    """Runs whose predictions no one user's summaries may move beyond the bound: coco8 for 100 epochs
    (fixed costs), a mid-size run at 320 px, and a large one that compute dominates."""
    out = []
    for name, imgsz, images, epochs in (
        ("yolov8n", 640, 4, 100),
        ("yolov8s", 320, 2_000, 50),
        ("yolov8l", 640, 20_000, 100),
    ):
        m = estimate.lookup_model(name)
        assert m is not None
        out.append(
            estimate.workload(
                spec.parse(["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}"]),
                images,
                max(1, images // 4),
                m,
            )
        )
    return out


def report_private_data(home: Path, private: str) -> None:
    """This home's config asks a scontrol that reports ``PrivateData = private`` (the bundled
    clusters set none; slurm-yolo learns it from ``scontrol show config`` alone)."""
    fake = home / "bin"
    fake.mkdir(mode=0o755, exist_ok=True)
    (fake / "scontrol").write_text(
        f'#!/bin/sh\n/usr/bin/scontrol "$@" | sed "s/^PrivateData .*/PrivateData = {private}/"\n'
    )
    (fake / "scontrol").chmod(0o755)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{fake}"\n')


def calibration_rows(config: config_mod.Config) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], int]:
    """(history, params, number of samples) of a calibration.db: what a calibrate that saves nothing
    (``--dry-run``, a refused fit) leaves as it was."""
    import sqlite3

    conn = sqlite3.connect(calibration.db_path(config))
    try:
        return (
            [tuple(r) for r in conn.execute("SELECT * FROM history ORDER BY id")],
            [tuple(r) for r in conn.execute("SELECT * FROM params ORDER BY partition")],
            conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0],
        )
    finally:
        conn.close()
