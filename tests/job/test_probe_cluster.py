"""``slurm-yolo calibrate --probe``: a partition's first calibration from one real, billed job."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest
from conftest import PRICE, VENV_BIN, Slurm, fund, own_ledger_config, set_test_prices

from slurm_yolo.core import config as config_mod
from slurm_yolo.state import calibration


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--probe", "t4;touch /tmp/x"], "a partition's plain name"),
        (["--probe", "t4", "-p", "t4"], "--probe calibrates from its own job"),
        (["--probe", "t4", "-A", "Bad Account"], "is not a plain Slurm name"),
        (["--probe", "t4", "--dir", "{others}"], "is another user's, or others can change it"),
        (["--probe", "t4", "--dir", "{writable}"], "is another user's, or others can change it"),
        (["--probe", "t4", "--dir", "{link}/x"], "is another user's, or others can change it"),
        (["--probe", "t4", "--dir", "{missing}"], "No such file or directory"),
        ([], "give --partition and run folders, or --probe PARTITION"),
    ],
)
def test_a_probe_that_cannot_run_submits_nothing(
    args: list[str], error: str, tmp_path: Path, site_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from slurm_yolo.cli.admin import main as admin
    from slurm_yolo.slurm import commands

    def no_job(*_: object, **__: object) -> int:
        raise AssertionError("a job was submitted")

    monkeypatch.setattr(commands, "submit", no_job)
    monkeypatch.chdir(tmp_path)
    nobody = pwd.getpwnam("nobody")
    (tmp_path / "others").mkdir()
    os.chown(tmp_path / "others", nobody.pw_uid, nobody.pw_gid)  # a user's folder: she could swap what it holds
    (tmp_path / "writable").mkdir()
    (tmp_path / "writable").chmod(0o777)
    (tmp_path / "link").symlink_to(tmp_path)
    os.lchown(tmp_path / "link", nobody.pw_uid, nobody.pw_gid)  # a user's link: she could point it elsewhere
    words = [a.replace("{", str(tmp_path) + "/").replace("}", "") for a in args]
    res = CliRunner().invoke(admin, ["calibrate", *words])
    assert res.exit_code != 0 and res.output.startswith("Error:") and error in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("yolo-probe-*"))


@pytest.mark.cluster
def test_a_probe_job_calibrates_t4_and_is_billed_what_it_ran(cluster: Slurm, tmp_path: Path) -> None:
    """On the bundled 22.05 cluster: one real job (synthetic data, three tiny trainings on the node's
    CPUs), its run folders fitted into t4's model (in the test's own calibration state), and the job
    held its limit and charged its elapsed time at t4's price, as sacct records it."""
    set_test_prices(cluster)
    account = f"probe{os.getpid() % 100000}"
    cluster.cmd("sacctmgr", "-i", "add", "account", account, f"cluster={cluster.name}")
    cluster.cmd("sacctmgr", "-i", "add", "user", "root", f"account={account}", f"cluster={cluster.name}")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(own_ledger_config(cluster))
    before = calibration.load(cluster.config(), "t4").source
    env = {**cluster.env(), "SLURM_YOLO_HOME": str(home), "SLURM_YOLO_CONFIG": str(home / "config.toml")}
    try:
        fund(cluster, (account,), 10**10)
        res = subprocess.run(
            [
                str(VENV_BIN / "slurm-yolo"),
                "calibrate",
                "--probe",
                "t4",
                "-A",
                account,
                "--dir",
                str(tmp_path),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=900,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        job = int(res.stderr.split("probe job ")[1].split(" ")[0])
        result = json.loads(res.stdout)
        assert result["partition"] == "t4" and result["added"] == 3 and not result["skipped"]
        own = config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)})
        fitted = calibration.load(own, "t4")
        assert fitted.model.n == 3 and fitted.source.startswith("calibrate")
        assert calibration.load(cluster.config(), "t4").source == before  # the cluster's own model: untouched
        (record,) = cluster.ended(job)
        assert record["State"] == "COMPLETED" and record["TimelimitRaw"] == "20"
        (run,) = cluster.settled(job)
        assert run["account"] == account
        assert run["hold"] == 20 * 60 * PRICE["t4"]
        assert run["charge"] == int(record["ElapsedRaw"]) * PRICE["t4"]
    finally:
        cluster.cmd(
            "sacctmgr", "-i", "delete", "user", "root", f"account={account}", f"cluster={cluster.name}", check=False
        )
        cluster.cmd("sacctmgr", "-i", "delete", "account", account, f"cluster={cluster.name}", check=False)
