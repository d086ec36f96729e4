"""`pip install .` gives working commands, with the templates inside the installed package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_templates_come_from_the_installed_package() -> None:
    code = "from slurm_yolo import render; print(render.templates_dir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout
    assert "site-packages/slurm_yolo/sbatch_templates" in out, out


def test_clean_venv_login_node_install(tmp_path: Path, dataset: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check", str(REPO)],
                         capture_output=True, text=True)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-2000:]
    for cmd in ("yolo-sbatch", "slurm-yolo"):
        res = subprocess.run([str(venv / "bin" / cmd), "--help"], capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 0 and "Usage:" in res.stdout, res.stderr
    env = {"PATH": "/usr/bin:/bin", "SLURM_YOLO_HOME": str(tmp_path / "home")}
    res = subprocess.run(
        [str(venv / "bin/yolo-sbatch"), "--dry-run", "--json", "-p", "a100", "train", f"data={dataset}", "model=yolov8s.pt"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["script"].startswith("#!/bin/bash")
    freeze = subprocess.run([str(venv / "bin/pip"), "freeze"], capture_output=True, text=True).stdout.lower()
    assert "torch" not in freeze and "ultralytics" not in freeze and "pandas" not in freeze
