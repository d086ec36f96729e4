"""Enforcement converges: Slurm's GPU limits follow the ledger, change only where they differ, keep
and restore what the site set, stay on their own cluster, and a failed sacctmgr is reported and
retried. Pure tests of the limits' arithmetic, parsers on output recorded from both releases, a CLI
test on stand-in commands, and the real bundled clusters (accounts of their own, removed after)."""

from __future__ import annotations

import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Slurm

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.controller import enforcement
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.errors import UsageError
from slurm_yolo.slurm import commands, parsers
from slurm_yolo.state import db, ledger
from slurm_yolo.state.ledger.schema import MIGRATIONS

REC = Path(__file__).parents[1] / "recorded"
CLUSTER_OF = {"22.05": "yolo", "24.11": "yolo2411", "26.05": "yolo2605"}  # the ClusterName each recording was made on


# --- pure: TRES lists and what a block or its lifting sets ------------------------------------------


def converge(limits: str, blocked: bool, kept: str | None) -> tuple[str, str | None]:
    """The GrpTRESRunMins after one step, and the site values kept then (sacctmgr's text)."""
    current = parsers.tres(limits)
    to_set, keep = enforcement.plan(current, blocked, None if kept is None else parsers.tres(kept))
    after = parsers.format_tres(enforcement.applied(current, to_set))
    return after, None if keep is None else parsers.format_tres(keep)


def test_tres_lists() -> None:
    assert parsers.tres("cpu=1000,gres/gpu=50000") == {"cpu": 1000, "gres/gpu": 50000}
    assert parsers.tres("") == {}
    assert parsers.format_tres({"gres/gpu": 0, "gres/shard": -1}) == "gres/gpu=0,gres/shard=-1"
    for bad in ("cpu", "cpu=", "cpu=1k", "=5", "gres/gpu=-1"):
        with pytest.raises(ValueError, match="TRES list not understood"):
            parsers.tres(bad)


def test_a_block_keeps_the_site_limits_and_lifting_it_restores_them() -> None:
    assert converge("cpu=1000,gres/gpu=50000", True, None) == ("cpu=1000,gres/gpu=0,gres/shard=0", "gres/gpu=50000")
    assert converge("cpu=1000,gres/gpu=0,gres/shard=0", True, "gres/gpu=50000") == (
        "cpu=1000,gres/gpu=0,gres/shard=0",
        "gres/gpu=50000",
    )
    assert converge("cpu=1000,gres/gpu=0,gres/shard=0", False, "gres/gpu=50000") == ("cpu=1000,gres/gpu=50000", None)
    assert converge("", True, None) == ("gres/gpu=0,gres/shard=0", "")  # the site had none: lifting clears
    assert converge("gres/gpu=0,gres/shard=0", False, "") == ("", None)
    assert converge("gres/shard=80,mem=5", True, None) == ("gres/shard=0,mem=5,gres/gpu=0", "gres/shard=80")


def test_only_what_differs_is_set() -> None:
    assert enforcement.plan({"cpu": 1, "gres/gpu": 0, "gres/shard": 0}, True, {"gres/gpu": 9}) == ({}, {"gres/gpu": 9})
    assert enforcement.plan({"gres/gpu": 0, "gres/shard": 3}, True, {}) == ({"gres/shard": 0}, {"gres/shard": 3})
    assert enforcement.plan({"gres/gpu": 50000}, False, {"gres/gpu": 50000}) == ({}, None)  # lifted: forget


def test_an_association_never_blocked_is_the_sites_alone() -> None:
    """A funded account with nothing kept: even a GPU limit of 0 is the site's, and stays."""
    assert enforcement.plan({"gres/gpu": 0, "gres/shard": 0}, False, None) == ({}, None)
    assert enforcement.plan({"cpu": 5, "gres/gpu": 7}, False, None) == ({}, None)


def test_a_site_change_under_a_block_is_what_lifting_it_leaves() -> None:
    """An admin set a new GPU value while the account was blocked: it is kept (and blocked again),
    and a value changed after the block was lifted by hand is left as it is."""
    blocked_again = ("gres/gpu=0,gres/shard=0", "gres/gpu=70000")
    assert converge("gres/gpu=70000,gres/shard=0", True, "gres/gpu=50000") == blocked_again
    assert converge("gres/gpu=70000,gres/shard=0", False, "gres/gpu=50000") == ("gres/gpu=70000", None)


def test_a_block_an_earlier_release_set_is_lifted_to_no_limit() -> None:
    """Releases before this one blocked with 0 and kept nothing: 0 is never a site value to restore."""
    assert converge("cpu=4,gres/gpu=0,gres/shard=0", True, None) == ("cpu=4,gres/gpu=0,gres/shard=0", "")
    assert converge("cpu=4,gres/gpu=0,gres/shard=0", False, "") == ("cpu=4", None)


# --- parsers on recorded output, and names that may reach sacctmgr -----------------------------------


@pytest.mark.parametrize("release", sorted(CLUSTER_OF))
def test_recorded_associations_give_the_accounts_own_limits(release: str) -> None:
    """Only the account's own association counts (not a user's, nor a user's per-partition one)."""
    text = (REC / release / "sacctmgr_assoc.txt").read_text()
    limits = parsers.account_run_mins(text, CLUSTER_OF[release])
    assert limits == {"enf_probe": {"cpu": 1000, "gres/gpu": 0, "gres/shard": 0}}
    assert parsers.account_run_mins(text, "elsewhere") == {}


@pytest.mark.parametrize("release", sorted(CLUSTER_OF))
def test_recorded_config_gives_the_cluster_name(release: str) -> None:
    assert parsers.cluster_name((REC / release / "scontrol_config.txt").read_text()) == CLUSTER_OF[release]
    with pytest.raises(ValueError, match="no ClusterName"):
        parsers.cluster_name("ClusterName =\nSlurmctldPort = 6817\n")


def test_only_plain_names_reach_sacctmgr() -> None:
    assert commands.plain_name("enf_1.a-b") == "enf_1.a-b"
    for bad in ("", "a,b", "a b", "a=b", "-x", "Vision", "a\nb", "a;b", "é"):
        with pytest.raises(UsageError, match="not a plain Slurm name"):
            commands.plain_name(bad)


# --- the CLI on stand-in Slurm commands: what a failure prints, what a run asks -----------------------


def write_script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def use_bin_dir(home: Path, bin_dir: Path) -> config_mod.Config:
    """The test's own config and state (its SLURM_YOLO_HOME), on the Slurm commands in ``bin_dir``."""
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{bin_dir}"\n')
    return config_mod.load()


def set_dry(cfg: config_mod.Config, account: str, dry: bool) -> None:
    """Make the account dry (balance 0) or funded in the test's ledger, as an admin would."""
    with ledger.writer(cfg) as lg:
        row = lg.account(account)
        if dry:
            lg.credit(account, -(row["balance"] if row else 0), "test", "dry", kind="adjustment")
        else:
            lg.credit(account, 10**9, "test", "funded")
        assert bool(lg.account(account)["blocked"]) == dry  # type: ignore[index]


def kept(cfg: config_mod.Config, cluster: str) -> dict[str, str]:
    with ledger.writer(cfg) as lg:
        return lg.site_limits(cluster)


def test_enforce_reports_each_account_it_could_not_set(home: Path, tmp_path: Path) -> None:
    """One ``Error:`` line per account left unconverged (a name unfit for sacctmgr, a failed modify),
    exit 1; the others converge; every sacctmgr names the cluster."""
    log = tmp_path / "argv.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "scontrol", 'echo "ClusterName             = fake"')
    write_script(
        bin_dir / "sacctmgr",
        f"""echo "$*" >> {log}
case "$*" in
  *show*) printf 'fake|enf_a|||cpu=10,gres/gpu=5\\nfake|enf_a|alice||\\nfake|enf_b|||\\n' ;;
  *name=enf_b*) echo "sacctmgr: error: simulated outage" >&2; exit 1 ;;
esac""",
    )
    cfg = use_bin_dir(home, bin_dir)
    for account in ("enf_a", "enf_b", "enf_c", "Bad Name"):  # enf_c: no association on this cluster
        set_dry(cfg, account, True)
    res = CliRunner().invoke(admin, ["ledger", "enforce"])
    assert res.exit_code == 1
    assert res.stdout == "enf_a: blocked on fake, GrpTRESRunMins cpu=10,gres/gpu=5 -> cpu=10,gres/gpu=0,gres/shard=0\n"
    assert res.stderr.splitlines() == [
        "Error: ledger account 'Bad Name' is not a plain Slurm name (lower-case letters, digits, _ . -)",
        (
            "Error: account enf_b: the ledger says dry, its limit on cluster fake is not set: sacctmgr failed: "
            "sacctmgr: error: simulated outage"
        ),
    ]
    assert log.read_text().splitlines() == [
        "-n -P show assoc where cluster=fake account=enf_a,enf_b,enf_c format=" + ",".join(parsers.ASSOC_FIELDS),
        "-i modify account where name=enf_a cluster=fake set GrpTRESRunMins=gres/gpu=0,gres/shard=0",
        "-i modify account where name=enf_b cluster=fake set GrpTRESRunMins=gres/gpu=0,gres/shard=0",
    ]
    assert kept(cfg, "fake") == {"enf_a": "gres/gpu=5", "enf_b": ""}  # kept before blocking: a retry restores it


def test_enforce_says_so_when_the_limits_already_match(home: Path, tmp_path: Path) -> None:
    """A run that changes nothing says so (an admin who typed it sees it did its work), as does one
    with enforcement off; neither modifies anything."""
    log = tmp_path / "argv.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "scontrol", 'echo "ClusterName             = fake"')
    write_script(
        bin_dir / "sacctmgr",
        f"""echo "$*" >> {log}
printf 'fake|enf_a|||gres/gpu=0,gres/shard=0\\n'""",
    )
    cfg = use_bin_dir(home, bin_dir)
    set_dry(cfg, "enf_a", True)
    with ledger.writer(cfg) as lg:
        lg.keep_site_limits("fake", "enf_a", "")  # blocked by an earlier run, which kept the site's none
    res = CliRunner().invoke(admin, ["ledger", "enforce", "--account", "enf_a"])
    assert (res.exit_code, res.output) == (0, "Slurm's limits on fake already match the ledger (enf_a)\n")
    assert [line.split()[2] for line in log.read_text().splitlines()] == ["show"]
    (home / "config.toml").write_text((home / "config.toml").read_text() + "\n[ledger]\nenforce = false\n")
    res = CliRunner().invoke(admin, ["ledger", "enforce"])
    assert (res.exit_code, res.output) == (
        0,
        "nothing done: ledger.enforce is false in the config (Slurm's limits are the site's alone)\n",
    )
    assert len(log.read_text().splitlines()) == 1


def test_enforce_without_a_cluster_name_changes_nothing(home: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    down = "slurm_load_ctl_conf error: Unable to contact slurm controller"
    write_script(bin_dir / "scontrol", f'echo "{down}" >&2; exit 1')
    write_script(bin_dir / "sacctmgr", "exit 99")
    cfg = use_bin_dir(home, bin_dir)
    set_dry(cfg, "enf_a", True)
    res = CliRunner().invoke(admin, ["ledger", "enforce", "--account", "enf_a"])
    assert (res.exit_code, res.stdout) == (1, "")
    assert res.stderr == f"Error: scontrol failed: {down}\n"


def test_blocks_of_an_earlier_release_are_lifted_once_funded(home: Path) -> None:
    """A version 2 ledger (its releases blocked with 0 and kept nothing): migrating keeps "none" for
    its blocked accounts on each cluster it has runs of, so funding them lifts the block."""
    cfg = config_mod.load()
    path = ledger.db_path(cfg)
    conn = db.connect_write(path, MIGRATIONS[:2], wal=True)
    for name, blocked in (("dry", 1), ("funded", 0)):
        conn.execute("INSERT INTO accounts (name, refilled_at, blocked) VALUES (?, 0, ?)", (name, blocked))
    for cluster, job_id in (("yolo", 1), ("yolo", 2), ("other", 1)):
        conn.execute(
            "INSERT INTO jobs (job_key, cluster, job_id, submit_time, restart, account, user, partition, gpus,"
            " price, rate, hold_seconds, hold, held_at)"
            " VALUES (?, ?, ?, 0, 0, 'dry', 'u', 'p', 1, 1, 1, 60, 60, 0)",
            (ledger.run_key(cluster, job_id, 0), cluster, job_id),
        )
    conn.close()
    assert kept(cfg, "yolo") == kept(cfg, "other") == {"dry": ""}
    assert converge("gres/gpu=0,gres/shard=0", False, "") == ("", None)


# --- the real bundled clusters ---------------------------------------------------------------------


def grp_tres_run_mins(slurm: Slurm, account: str, cluster: str | None = None) -> str:
    """The account's own association's GrpTRESRunMins, as sacctmgr prints it (read without slurm-yolo)."""
    res = slurm.cmd(
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "assoc",
        "where",
        f"account={account}",
        f"cluster={cluster or slurm.name}",
        "format=User,GrpTRESRunMins",
    )
    (own,) = [line.split("|")[1] for line in res.stdout.splitlines() if line.startswith("|")]
    return own


def set_site_limit(slurm: Slurm, account: str, value: str, cluster: str | None = None) -> None:
    slurm.cmd(
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "where",
        f"name={account}",
        f"cluster={cluster or slurm.name}",
        "set",
        f"GrpTRESRunMins={value}",
    )


def add_account(slurm: Slurm, account: str, cluster: str) -> None:
    slurm.cmd("sacctmgr", "-i", "add", "account", account, f"cluster={cluster}")
    slurm.cmd("sacctmgr", "-i", "add", "user", "alice", f"account={account}", f"cluster={cluster}")


def remove_account(slurm: Slurm, account: str, cluster: str) -> None:
    slurm.cmd(
        "sacctmgr",
        "-i",
        "delete",
        "user",
        "where",
        "name=alice",
        f"account={account}",
        f"cluster={cluster}",
        check=False,
    )
    slurm.cmd("sacctmgr", "-i", "delete", "account", "where", f"name={account}", f"cluster={cluster}", check=False)


@pytest.fixture
def account(slurm: Slurm) -> Iterator[str]:
    """An account of this test's own (with user alice) on the cluster, removed after."""
    name = f"enf_{secrets.token_hex(4)}"
    add_account(slurm, name, slurm.name)
    yield name
    remove_account(slurm, name, slurm.name)


def counting_bin_dir(slurm: Slurm, path: Path, modify_fails: bool = False) -> Path:
    """The cluster's scontrol and sacctmgr, each call logged to ``path/argv.log``; ``modify_fails``:
    every change refused as a slurmdbd outage would."""
    path.mkdir()
    fail = 'case "$1" in -i) echo "sacctmgr: error: Problem talking to the database" >&2; exit 1 ;; esac\n'
    for name in ("scontrol", "sacctmgr"):
        body = f'echo "{name} $*" >> {path / "argv.log"}\n' + (fail if modify_fails and name == "sacctmgr" else "")
        write_script(path / name, body + f'exec {slurm.bin_dir / name} "$@"')
    return path


def modifies(bin_dir: Path) -> list[str]:
    log = bin_dir / "argv.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [line for line in lines if " modify " in line]


@pytest.mark.cluster
def test_enforcement_keeps_the_site_limits_and_restores_them(
    slurm: Slurm, account: str, home: Path, tmp_path: Path
) -> None:
    bin_dir = counting_bin_dir(slurm, tmp_path / "bin")
    cfg = use_bin_dir(home, bin_dir)
    set_site_limit(slurm, account, "cpu=1000,gres/gpu=50000")

    set_dry(cfg, account, True)
    out = enforcement.sync(cfg, [account])
    assert out == enforcement.Outcome(
        slurm.name,
        [enforcement.Change(account, True, "cpu=1000,gres/gpu=50000", "cpu=1000,gres/gpu=0,gres/shard=0")],
        [],
    )
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=0,gres/shard=0"
    assert kept(cfg, slurm.name) == {account: "gres/gpu=50000"}
    assert len(modifies(bin_dir)) == 1
    assert enforcement.sync(cfg, [account]) == enforcement.Outcome(slurm.name, [], [])
    assert modifies(bin_dir) == []  # converged: nothing to change, nothing changed

    set_dry(cfg, account, False)
    out = enforcement.sync(cfg, None)  # every account of the ledger, as cron runs it
    lifted = enforcement.Change(account, False, "cpu=1000,gres/gpu=0,gres/shard=0", "cpu=1000,gres/gpu=50000")
    assert out.changes == [lifted]
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=50000"
    assert kept(cfg, slurm.name) == {}
    assert len(modifies(bin_dir)) == 1
    assert enforcement.sync(cfg, None) == enforcement.Outcome(slurm.name, [], [])
    assert modifies(bin_dir) == []


@pytest.mark.cluster
def test_lifting_a_block_clears_what_the_site_never_set(slurm: Slurm, account: str, home: Path) -> None:
    cfg = use_bin_dir(home, slurm.bin_dir)
    set_dry(cfg, account, True)
    assert CliRunner().invoke(admin, ["ledger", "enforce", "--account", account]).exit_code == 0
    assert grp_tres_run_mins(slurm, account) == "gres/gpu=0,gres/shard=0"
    set_dry(cfg, account, False)
    res = CliRunner().invoke(admin, ["ledger", "enforce", "--account", account])
    lifted = f"{account}: unblocked on {slurm.name}, GrpTRESRunMins gres/gpu=0,gres/shard=0 -> (none)\n"
    assert (res.exit_code, res.output) == (0, lifted)
    assert grp_tres_run_mins(slurm, account) == ""


@pytest.mark.cluster
def test_a_failed_sacctmgr_is_reported_and_the_next_run_converges(
    slurm: Slurm, account: str, home: Path, tmp_path: Path
) -> None:
    failing = counting_bin_dir(slurm, tmp_path / "failing", modify_fails=True)
    cfg = use_bin_dir(home, failing)
    set_site_limit(slurm, account, "cpu=1000,gres/gpu=50000")
    error = (
        f"Error: account {account}: the ledger says dry, its limit on cluster {slurm.name} is not set: "
        "sacctmgr failed: sacctmgr: error: Problem talking to the database\n"
    )

    set_dry(cfg, account, True)
    res = CliRunner().invoke(admin, ["ledger", "enforce"])
    assert (res.exit_code, res.stdout, res.stderr) == (1, "", error)
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=50000"
    cfg = use_bin_dir(home, slurm.bin_dir)  # slurmdbd is back: cron's next run
    assert CliRunner().invoke(admin, ["ledger", "enforce"]).exit_code == 0
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=0,gres/shard=0"

    cfg = use_bin_dir(home, failing)
    res = CliRunner().invoke(admin, ["ledger", "deposit", account, "1G"])  # the deposit stands; Slurm lags
    assert res.exit_code == 1 and res.stderr == error.replace("says dry", "says funded")
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=0,gres/shard=0"
    assert kept(cfg, slurm.name) == {account: "gres/gpu=50000"}
    cfg = use_bin_dir(home, slurm.bin_dir)
    assert CliRunner().invoke(admin, ["ledger", "enforce"]).exit_code == 0
    assert grp_tres_run_mins(slurm, account) == "cpu=1000,gres/gpu=50000"
    assert kept(cfg, slurm.name) == {}


@pytest.mark.cluster
def test_enforcement_stays_on_its_own_cluster(cluster: Slurm, home: Path) -> None:
    """One slurmdbd, two clusters with the same account: only the commands' own cluster is changed."""
    other = f"enfother{secrets.token_hex(3)}"
    name = f"enf_{secrets.token_hex(4)}"
    cluster.cmd("sacctmgr", "-i", "add", "cluster", other)
    try:
        add_account(cluster, name, cluster.name)
        add_account(cluster, name, other)
        set_site_limit(cluster, name, "cpu=5,gres/gpu=777", other)
        set_site_limit(cluster, name, "gres/gpu=50000")
        cfg = use_bin_dir(home, cluster.bin_dir)

        set_dry(cfg, name, True)
        assert enforcement.sync(cfg, [name]).errors == []
        assert grp_tres_run_mins(cluster, name) == "gres/gpu=0,gres/shard=0"
        assert grp_tres_run_mins(cluster, name, other) == "cpu=5,gres/gpu=777"
        set_dry(cfg, name, False)
        assert enforcement.sync(cfg, [name]).errors == []
        assert grp_tres_run_mins(cluster, name) == "gres/gpu=50000"
        assert grp_tres_run_mins(cluster, name, other) == "cpu=5,gres/gpu=777"
    finally:
        remove_account(cluster, name, other)
        remove_account(cluster, name, cluster.name)
        cluster.cmd("sacctmgr", "-i", "delete", "cluster", other, check=False)
    assert other not in cluster.cmd("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster").stdout.split()
