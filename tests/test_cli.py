"""yolo-sbatch and slurm-yolo as users call them (offline parts; the cluster tests submit for real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch

REQUIRED = {"tokens", "effective_tokens", "predicted_seconds", "time_limit_seconds", "partition", "gres", "gpus", "qos",
            "k", "script", "predicted_train_seconds"}  # fmt: skip


def run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(yolo_sbatch, args)
    return res.exit_code, res.output


def test_dry_run_json_offline_for_any_partition(dataset: Path) -> None:
    code, out = run(["--dry-run", "--json", "--partition", "never-configured", "train", f"data={dataset}", "model=yolov8n.yaml",
                     "epochs=3", "imgsz=96", "batch=8"])  # fmt: skip
    assert code == 0, out
    d = json.loads(out)
    assert set(d) >= REQUIRED
    assert d["partition"] == "never-configured" and d["gres"] == "gpu:1" and d["gpus"] == 1
    assert d["tokens"] == pytest.approx(3 * 16 * 96**2 + 0.5 * 4 * 8 * 96**2)
    assert d["time_limit_seconds"] % 60 == 0 and d["time_limit_seconds"] >= d["predicted_seconds"]
    assert d["predicted_train_seconds"] < d["predicted_seconds"]
    assert d["job_id"] is None


def test_explain_says_everything(dataset: Path, site_config: Path) -> None:
    code, out = run(["--dry-run", "--explain", "-p", "a100", "train", f"data={dataset}", "model=yolo11n.yaml", "epochs=2"])
    assert code == 0, out
    for word in ("images: 16 train", "640-equivalent", "family yolo11", "k 1 s/MTok", "config prior", "start-up 20.0 s", "buffer:", "gres:", "qos:"):
        assert word in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "data={ds}", "epoch=3"], "Error: unknown key 'epoch' (did you mean 'epochs'?)"),
        (["train", "data=/nowhere/d.yaml"], "Error: data yaml /nowhere/d.yaml not found"),
        (["train", "data={ds}", "model=mystery.pt"], "Error: model mystery.pt not found"),
        (["--deadline", "soon", "train", "data={ds}"], "Error: duration 'soon' not understood"),
        (["--gpus", "0", "train", "data={ds}"], "Error: --gpus 0: at least 1"),
        (["train", "data={ds}", "device=cpu"], "Error: device=cpu"),
        (["--job-name", "a\nb", "train", "data={ds}"], "Error: --job-name: the value contains a control character"),
    ],
)
def test_bad_input_one_line_nonzero(dataset: Path, args: list[str], message: str) -> None:
    code, out = run(["--dry-run", "-p", "a100", *[a.format(ds=dataset) for a in args]])
    assert code != 0
    assert out.strip() == message or out.strip().startswith(message), out
    assert len(out.strip().splitlines()) == 1


def test_partition_required_without_config(dataset: Path) -> None:
    code, out = run(["--dry-run", "train", f"data={dataset}"])
    assert code != 0 and "--partition" in out


def test_every_command_has_help() -> None:
    for cli, name in ((yolo_sbatch, "yolo-sbatch"), (admin, "slurm-yolo")):
        res = CliRunner().invoke(cli, ["--help"])
        assert res.exit_code == 0 and "Usage:" in res.output, name
    for sub in admin.commands.values():
        assert sub.help, f"slurm-yolo {sub.name} has no help text"


def test_login_path_imports_no_heavy_modules() -> None:
    import subprocess
    import sys

    code = "import sys, slurm_yolo.cli.yolo_sbatch, slurm_yolo.cli.admin; print(sorted(m for m in ('torch','ultralytics','pandas','numpy','sqlite_utils') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
