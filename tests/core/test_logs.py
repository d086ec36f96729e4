"""stdlib logging: one handler per process, its level from SLURM_YOLO_LOG_LEVEL or --debug, and the
Slurm client's commands at DEBUG (what an admin turns on to see what a hook or yolo-sbatch ran)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_yolo.core import logs


@pytest.mark.parametrize(
    ("env", "debug", "want"),
    [
        ("", False, logging.INFO),
        ("debug", False, logging.DEBUG),
        ("ERROR", False, logging.ERROR),
        ("loud", False, logging.INFO),
        ("ERROR", True, logging.DEBUG),
    ],
)
def test_the_level_comes_from_the_environment_or_debug(
    monkeypatch: pytest.MonkeyPatch, env: str, debug: bool, want: int
) -> None:
    monkeypatch.setenv("SLURM_YOLO_LOG_LEVEL", env)
    assert logs.level(debug) == want


def test_slurm_yolo_debug_shows_each_slurm_command_and_the_default_shows_none(tmp_path: Path) -> None:
    """``slurm-yolo --debug`` logs the commands its Slurm client runs (here a fake squeue); without it,
    nothing but the command's own output and errors."""
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    (tmp_path / "config.toml").write_text(f"[slurm]\nbin_dir = '{tmp_path}'\n")
    env = {**os.environ, "SLURM_YOLO_HOME": str(tmp_path), "SLURM_YOLO_CONFIG": str(tmp_path / "config.toml")}
    env.pop("SLURM_YOLO_LOG_LEVEL", None)
    code = "from slurm_yolo.cli.admin import main; main()"

    def stderr(*args: str) -> str:
        res = subprocess.run(
            [sys.executable, "-c", code, *args, "watch", "1", "--timeout", "1s"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return res.stderr

    assert f"slurm: {squeue} " in stderr("--debug")
    assert "slurm: " not in stderr()
