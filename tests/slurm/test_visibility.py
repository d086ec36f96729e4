"""Who sees which account: Slurm's rule (PrivateData, coordinators, operators), from the real uid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, Slurm, report_private_data

from slurm_yolo.core import config as config_mod
from slurm_yolo.slurm import commands, parsers
from slurm_yolo.slurm.visibility import Viewer, is_admin, may_see, visible
from slurm_yolo.state import ledger

ALICE = Viewer(1001, "alice", "slurm", associated=frozenset({"vision"}), coordinated=frozenset({"lab"}))


@pytest.mark.parametrize(
    ("viewer", "sees_all"),
    [
        (Viewer(0, "root", "slurm", private_data=frozenset({"accounts"})), True),
        (Viewer(64030, "slurm", "slurm", private_data=frozenset({"accounts"})), True),
        (ALICE._replace(admin_level="Operator", private_data=frozenset({"usage"})), True),
        (ALICE._replace(admin_level="Administrator", private_data=frozenset({"accounts"})), True),
        (ALICE._replace(private_data=frozenset({"jobs", "users"})), True),  # nothing that hides accounts
        (ALICE, True),  # no PrivateData: as Slurm shows sshare to all
        (ALICE._replace(private_data=frozenset({"accounts"})), False),
        (ALICE._replace(private_data=frozenset({"usage"})), False),
    ],
)
def test_the_rule(viewer: Viewer, sees_all: bool) -> None:
    accounts = ["vision", "research", "lab"]
    assert visible(viewer, accounts) == ({"vision", "research", "lab"} if sees_all else {"vision", "lab"})
    assert may_see(viewer, "research") is sees_all


def test_admins_are_root_the_slurmuser_and_slurms_operators() -> None:
    assert is_admin(Viewer(0, "root", "slurm")) and is_admin(Viewer(64030, "slurm", "slurm"))
    assert is_admin(ALICE._replace(admin_level="Operator")) and is_admin(ALICE._replace(admin_level="Administrator"))
    assert not is_admin(ALICE) and not is_admin(ALICE._replace(user="alice", owner="slurm", uid=64030))


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("PrivateData             = none\n", set()),
        ("ClusterName = yolo\nPrivateData             = accounts,jobs,usage\n", {"accounts", "jobs", "usage"}),
        ("PrivateData = Accounts, Usage\n", {"accounts", "usage"}),
        ("", set()),
    ],
)
def test_private_data(text: str, hidden: set[str]) -> None:
    assert parsers.private_data(text) == hidden


def test_admin_level_and_coordinated() -> None:
    assert parsers.admin_level_and_coordinated("None|lab,lab-sub\n") == ("None", frozenset({"lab", "lab-sub"}))
    assert parsers.admin_level_and_coordinated("Administrator|\n") == ("Administrator", frozenset())
    assert parsers.admin_level_and_coordinated("") == ("None", frozenset())  # a user slurmdbd does not know


@pytest.mark.cluster
def test_the_lookups_on_each_release(slurm: Slurm) -> None:
    assert commands.admin_level_and_coordinated("root", slurm.bin_dir) == ("Administrator", frozenset())
    assert commands.admin_level_and_coordinated("alice", slurm.bin_dir)[0] == "None"
    assert commands.private_data(slurm.bin_dir) == frozenset()  # the bundled clusters set none
    assert "vision" in commands.accounts_of("alice", slurm.bin_dir)


@pytest.fixture
def books(cluster: Slurm) -> Iterator[tuple[Path, dict[str, str]]]:
    """A ledger of its own (where alice can read it) with three accounts made in Slurm for this test
    alone and deleted after it (whatever else alice and bob are in, as people leave them): ``mine``
    (alice's association), ``theirs`` (bob's) and ``lab`` (which alice coordinates only)."""
    names = {role: f"yolo-{role}-{os.getpid()}" for role in ("mine", "theirs", "lab")}
    home = Path("/var/tmp/slurm-yolo-tests") / f"privacy-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    try:
        for account in names.values():
            cluster.cmd("sacctmgr", "-i", "add", "account", account, "parent=root")
        cluster.cmd("sacctmgr", "-i", "add", "user", "alice", f"account={names['mine']}")
        cluster.cmd("sacctmgr", "-i", "add", "user", "bob", f"account={names['theirs']}")
        cluster.cmd("sacctmgr", "-i", "add", "coordinator", f"account={names['lab']}", "names=alice")
        cfg = config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)})
        with ledger.writer(cfg) as lg:
            for account in names.values():
                lg.credit(account, 10**9, "test", "visibility")
        yield home, names
    finally:
        cluster.cmd("sacctmgr", "-i", "delete", "account", ",".join(names.values()), check=False)
        shutil.rmtree(home, ignore_errors=True)


def associated(cluster: Slurm, user: str) -> set[str]:
    """The accounts Slurm has ``user`` in, as others left them: each is in her balances, deposit or not."""
    return set(cluster.cmd("sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account").stdout.split())


def hide_accounts(home: Path) -> None:
    """This home's config asks a scontrol that reports PrivateData=accounts,jobs (the clusters set none)."""
    report_private_data(home, "accounts,jobs")


def yolo(user: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``slurm-yolo ARGS`` of this checkout as ``user``, who claims to be the SlurmUser in $USER."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "SLURM_YOLO_HOME": str(home),
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    argv = [
        "/usr/sbin/runuser",
        "-u",
        user,
        "--",
        "/usr/bin/env",
        "USER=slurm",
        "LOGNAME=slurm",
        sys.executable,
        "-m",
        "slurm_yolo",
        *args,
    ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/tmp", timeout=120, check=False)


def balances(user: str, home: Path) -> set[str]:
    res = yolo(user, home, "ledger", "balance", "--json")
    assert res.returncode == 0, res.stderr
    return {r["name"] for r in json.loads(res.stdout)}


@pytest.mark.cluster
def test_without_private_data_anyone_sees_any_account(cluster: Slurm, books: tuple[Path, dict[str, str]]) -> None:
    home, names = books
    for user in ("alice", "bob"):
        assert balances(user, home) == set(names.values()) | associated(cluster, user)
    assert yolo("bob", home, "ledger", "history", names["lab"]).returncode == 0
    for command in ("balance", "history"):  # an account the ledger never saw is an error, not an empty answer
        res = yolo("bob", home, "ledger", command, "nosuch")
        assert (res.returncode, res.stdout, res.stderr) == (
            1,
            "",
            "Error: account 'nosuch' has no ledger entry (nothing was ever deposited into it: an admin's"
            " slurm-yolo ledger deposit nosuch AMOUNT makes one)\n",
        )


@pytest.mark.cluster
def test_private_accounts_show_users_their_associations_and_coordinated_accounts(
    cluster: Slurm, books: tuple[Path, dict[str, str]]
) -> None:
    home, names = books
    mine, theirs, lab = names["mine"], names["theirs"], names["lab"]
    hers = associated(cluster, "alice")
    assert mine in hers and theirs not in hers and lab not in hers
    hide_accounts(home)
    assert balances("alice", home) == hers | {lab}  # her associations; the account she coordinates
    assert balances("bob", home) == associated(cluster, "bob")
    assert balances("slurm", home) == balances("root", home) == {mine, theirs, lab}  # the ledger's, all
    for args in (["ledger", "balance", theirs], ["ledger", "history", theirs]):
        res = yolo("alice", home, *args)
        assert res.returncode == 1 and res.stderr.startswith(
            f"Error: account '{theirs}' is not one you may see (alice"
        ), res.stderr
    res = yolo("alice", home, "ledger", "export")
    assert res.returncode == 0 and {m["account"] for m in json.loads(res.stdout)} == {mine, lab}
    res = yolo("alice", home, "report", "--json", "--view", "budgets", "--since", "now-1minutes")
    assert res.returncode == 0, res.stderr
    assert {b["account"] for b in json.loads(res.stdout)["budgets"]} == {mine, lab}


@pytest.mark.cluster
def test_alerts_and_metrics_are_for_admins(books: tuple[Path, dict[str, str]]) -> None:
    home, _ = books
    for args in (["alerts"], ["metrics", "--textfile", str(home / "prom")]):
        res = yolo("alice", home, *args)
        assert (
            res.returncode == 1
            and "is for root, the SlurmUser and Slurm operators and administrators, not alice" in res.stderr
        )
    assert yolo("slurm", home, "alerts", "--json").returncode in (0, 1)  # 1: alerts found
    assert not (home / "prom").exists()
