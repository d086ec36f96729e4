"""A partition's fit is used only for the card it was learned on (issue 49)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.model.timemodel import TimeModel
from slurm_yolo.slurm import nodes
from slurm_yolo.state import calibration


def test_a_fit_learned_on_cpus_is_set_aside_once_the_partition_has_real_cards(
    site_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodes, "slurm_shapes", lambda config: {})
    config = config_mod.load(site_config)
    fitted = replace(calibration.prior(config, "t4"), k=0.5, n=20, form="full")
    with calibration.Store(config) as store:
        store.save("t4", fitted, "calibrate")
    used = calibration.load(config, "t4")
    assert used.model.k == 0.5 and used.model.card == "cpu" and not used.stale
    # the site's real T4s: gpu_like removed, as docs/site-install.md says
    site_config.write_text(site_config.read_text().replace('gpu_like = "cpu"', ""))
    config = config_mod.load(site_config)
    aside = calibration.load(config, "t4")
    assert aside.model == calibration.prior(config, "t4") and aside.model.k != 0.5
    assert aside.stale.startswith("partition t4's calibration (calibrate ") and "fitted on card cpu" in aside.stale
    assert "its card is now t4" in aside.stale and "set aside until calibrated again" in aside.source
    res = CliRunner().invoke(admin, ["doctor", "--role", "login", "--json"])
    problems = json.loads(res.output)["problems"]
    stale = next(p for p in problems if "fitted on card cpu" in p["what"])
    assert "slurm-yolo calibrate --probe t4 -A " in stale["fix"]  # the account: doctor.probe_account
    res = CliRunner().invoke(
        yolo_sbatch, ["--dry-run", "--explain", "-p", "t4", "train", "model=yolov8n.yaml", "data=coco8.yaml"]
    )
    assert "fitted on card cpu" in res.output and "GPU-type priors for NVIDIA T4" in res.output, res.output


def test_a_model_saved_before_cards_were_recorded_is_known_by_its_compute_law() -> None:
    cpu_like = TimeModel(k=1.0, overhead_seconds=0, val_weight=0.4, iteration_seconds=0, startup_seconds=0)
    assert replace(cpu_like, n=5).fitted_on() == "cpu"
    assert replace(cpu_like, n=5, compute_exponent=0.5).fitted_on() == ""
    assert replace(cpu_like, n=0).fitted_on() == ""
    assert replace(cpu_like, card="a100").fitted_on() == "a100"
