"""Shared fixtures: isolated state, a synthetic dataset, the real local Slurm cluster, ultralytics offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_yolo.synthetic import make_dataset

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
FONT = next(iter(sorted(Path("/usr/share/fonts/truetype").rglob("*.ttf"))), None) if Path("/usr/share/fonts/truetype").is_dir() else None


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


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic detection dataset: 16 train, 8 val images at 96 px."""
    root = tmp_path_factory.mktemp("ds")
    root.chmod(0o755)
    return make_dataset(root, train=16, val=8, size=96)


def _cluster_up() -> bool:
    try:
        return subprocess.run(["/usr/bin/scontrol", "ping"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def cluster() -> None:
    """The real local Slurm (deploy/minicluster up). Under CI a missing cluster fails, never skips."""
    if not _cluster_up():
        if IN_CI:
            pytest.fail("the local Slurm cluster is not running (deploy/minicluster up)")
        pytest.skip("the local Slurm cluster is not running (deploy/minicluster up)")


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


def skip_requeue_delay(job: int) -> None:
    """Start a requeued job now instead of after Slurm's begin-time delay. slurmd refuses a relaunch
    whose credential is from the same second as the revocation, so wait past that second first."""
    from slurm_yolo.slurm import commands

    poll(f"job {job} pending again", lambda: commands.job_state(job) == "PENDING", timeout=60)
    time.sleep(2.5)
    subprocess.run(["/usr/bin/scontrol", "update", f"jobid={job}", "starttime=now"], check=False)


def poll(what: str, fn: Callable[[], T], timeout: float = 90) -> T:
    """Poll ``fn`` until it returns something truthy (never a fixed sleep); that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")
