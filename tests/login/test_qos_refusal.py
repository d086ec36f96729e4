"""A submission Slurm refuses for its QOS ("Invalid qos specification") says which QOS and the
``sacctmgr`` line that grants it, with ``-p auto`` too; the doctor names a funded account that lacks
the tiers, with the same grant (issue 47)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import VENV_BIN, Slurm, fund

from slurm_yolo.login import submission
from slurm_yolo.slurm import commands, reasons


def test_the_hint_names_the_qos_and_the_grant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "qos_names", lambda bin_dir=None: ["normal", "yolo-short", "yolo-dev"])
    monkeypatch.setattr(commands, "default_account", lambda user, bin_dir=None: "vision")
    monkeypatch.setattr(commands, "home_cluster", lambda bin_dir=None: "yolo")
    assert submission.qos_hint(["yolo-short"], "lab", Path("/usr/bin")) == (
        "account lab may not use QOS yolo-short: the plan's tier (yolo-sbatch picks it by --priority and the"
        " limit); an admin grants it with `sacctmgr -i modify account lab where cluster=yolo set QOS+=yolo-short` (or give"
        " --priority another tier)"
    )
    assert "account vision may not use QOS yolo-dev" in submission.qos_hint(["yolo-dev"], None, Path("/usr/bin"))
    missing = submission.qos_hint(["yolo-gone"], "lab", Path("/usr/bin"))  # a tier Slurm has not got at all
    assert missing.startswith("Slurm has no QOS yolo-gone: ")
    assert (
        "`sacctmgr -i add qos yolo-gone; sacctmgr -i modify account lab where cluster=yolo set QOS+=yolo-gone`"
        in missing
    )
    assert reasons.refused_qos("sbatch: error: Batch job submission failed: Invalid qos specification")


ACCOUNT = "yolo-noqos47"  # one name: its ledger entry is reused, not one more per run


@pytest.mark.cluster
def test_an_account_without_the_tiers_is_told_the_grant_by_yolo_sbatch_and_the_doctor(cluster: Slurm) -> None:
    """An account of alice's, funded, whose association has the QOS normal alone: her job (a tiny one,
    the short tier) is refused with the QOS and the grant, on -p t4 and -p auto, and nothing is
    submitted; the doctor names the account and its grant, which, run as printed, fixes it."""
    from slurm_yolo.admin import doctor
    from slurm_yolo.core.synthetic import make_dataset

    folder = Path("/var/tmp/slurm-yolo-tests") / f"alice-qos-{os.getpid()}"
    data = make_dataset(folder, train=4, val=2, size=32)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    cfg = cluster.config()
    name = cluster.cmd("scontrol", "show", "config").stdout.split("ClusterName", 1)[1].split()[1]
    cluster.cmd("sacctmgr", "-i", "add", "account", ACCOUNT, "parent=root", f"cluster={name}", check=False)
    try:
        cluster.cmd("sacctmgr", "-i", "modify", "account", ACCOUNT, "where", f"cluster={name}", "set", "QOS=normal")
        cluster.cmd("sacctmgr", "-i", "add", "user", "alice", f"account={ACCOUNT}", f"cluster={name}", check=False)
        fund(cluster, (ACCOUNT,), 10**15)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "SLURM_YOLO_CONFIG": str(cluster.config_path)}
        before = cluster.cmd("squeue", "-h", "-u", "alice", "-o", "%i").stdout
        for partition in ("t4", "auto"):
            words = ["-A", ACCOUNT, "-p", partition, "train", f"data={data}", "model=yolov8n.yaml", "epochs=1"]
            res = subprocess.run(
                ["/usr/sbin/runuser", "-u", "alice", "--", str(VENV_BIN / "yolo-sbatch"), *words],
                env=env,
                capture_output=True,
                text=True,
                cwd="/tmp",
            )
            assert res.returncode == 1 and res.stdout == "", (partition, res.stdout, res.stderr)
            error = res.stderr.strip().splitlines()[-1]
            assert "Invalid qos specification" in error, (partition, error)
            assert f": account {ACCOUNT} may not use QOS yolo-short: the plan's tier" in error, (partition, error)
            assert f"`sacctmgr -i modify account {ACCOUNT} where cluster=yolo set QOS+=yolo-short`" in error, (
                partition,
                error,
            )
        assert cluster.cmd("squeue", "-h", "-u", "alice", "-o", "%i").stdout == before
        (problem,) = [p for p in doctor._qos_grants(cfg, name) if p.what.startswith(f"account {ACCOUNT} ")]
        assert "may not use QOS yolo-dev, yolo-explore, yolo-prod, yolo-short" in problem.what
        argv = shlex.split(problem.fix)
        assert argv[0] == "sacctmgr"
        cluster.cmd(*argv)  # the line as printed
        assert not [p for p in doctor._qos_grants(cfg, name) if p.what.startswith(f"account {ACCOUNT} ")]
    finally:
        cluster.cmd("sacctmgr", "-i", "delete", "user", "alice", "where", f"account={ACCOUNT}", check=False)
        cluster.cmd("sacctmgr", "-i", "delete", "account", ACCOUNT, f"cluster={name}", check=False)
