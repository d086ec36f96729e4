"""`pip install .` gives working commands, with the templates inside the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, VENV_BIN, _missing


def test_templates_come_from_the_installed_package() -> None:
    code = "from slurm_yolo.login import render; print(render.templates_dir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout
    assert "site-packages/slurm_yolo/sbatch_templates" in out, out


def test_man_finds_the_pages_the_install_wrote() -> None:
    """``man yolo-sbatch`` after deploy/install: Slurm users look there first."""
    for prog in ("yolo-sbatch", "slurm-yolo"):
        where = subprocess.run(["man", "-w", prog], capture_output=True, text=True, check=False)
        assert Path(where.stdout.strip()).resolve() == Path(f"/usr/local/share/man/man1/{prog}.1"), where.stderr
    page = subprocess.run(
        ["man", "yolo-sbatch"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "MANWIDTH": "100", "PAGER": "cat"},
    ).stdout
    assert "Usage: yolo-sbatch [OPTIONS]" in page and "--deadline" in page


def test_clean_venv_login_node_install(tmp_path: Path, dataset: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    for cmd in ("yolo-sbatch", "slurm-yolo"):
        res = subprocess.run(
            [str(venv / "bin" / cmd), "--help"], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert res.returncode == 0 and "Usage:" in res.stdout, res.stderr
    env = {"PATH": "/usr/bin:/bin", "SLURM_YOLO_HOME": str(tmp_path / "home")}
    res = subprocess.run(
        [
            str(venv / "bin/yolo-sbatch"),
            "--dry-run",
            "--json",
            "-p",
            "a100",
            "train",
            f"data={dataset}",
            "model=yolov8s.pt",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["script"].startswith("#!/bin/bash")
    freeze = subprocess.run(
        [str(venv / "bin/pip"), "freeze"], capture_output=True, text=True, check=False
    ).stdout.lower()
    assert "torch" not in freeze and "ultralytics" not in freeze and "pandas" not in freeze


@pytest.mark.cluster
@pytest.mark.parametrize("user", ["root", "alice"])
def test_a_login_shell_finds_the_commands(user: str) -> None:
    """deploy/install links the venv's yolo-sbatch and slurm-yolo into /usr/local/bin, where a new login
    shell finds them, root's and an unprivileged user's alike (and the user may run them)."""
    if not (VENV_BIN / "yolo-sbatch").exists():
        _missing(f"deploy/install has not run: no {VENV_BIN / 'yolo-sbatch'}")
    prefix = [] if user == "root" else ["/usr/sbin/runuser", "-u", user, "--"]
    script = "command -v yolo-sbatch slurm-yolo && yolo-sbatch --version && slurm-yolo --version"
    res = subprocess.run(
        [*prefix, "/bin/bash", "-lc", script],
        env={"TERM": "dumb"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[:2] == ["/usr/local/bin/yolo-sbatch", "/usr/local/bin/slurm-yolo"], res.stdout
    assert "yolo-sbatch, version" in lines[2] and "version" in lines[3], res.stdout
    for cmd in ("yolo-sbatch", "slurm-yolo"):
        assert os.readlink(f"/usr/local/bin/{cmd}") == str(VENV_BIN / cmd)
