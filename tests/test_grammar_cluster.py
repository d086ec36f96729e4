"""ultralytics' own command-line forms, run on the real local Slurm: the job's ultralytics reads them
as the plan did (task=/mode= pairs, spaces around =, a trailing comma, a list imgsz, cfg=, time=)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch

pytestmark = pytest.mark.cluster


def test_ultralytics_forms_train_to_completed_within_time(
    cluster: None,
    training_site: Path,
    dataset: Path,
    tmp_path: Path,
) -> None:
    Path("mine.yaml").write_text("batch: 8\nepochs: 50\nimgsz: 640\n")  # the command line's keys win over it
    words = ["task=detect", "mode=train", "model=yolov8n.yaml", f"data={dataset}", "cfg=mine.yaml"]
    words += ["epochs", "=", "3,", "imgsz=64,48", "time=0.003", f"project={tmp_path}/runs", "name=forms"]
    # its own limit: the shared t4 model (what other tests left) may plan a limit too short under CI load
    res = CliRunner().invoke(yolo_sbatch, ["-p", "t4", "-t", "10", "--wait", "--explain", "-J", "forms", *words])
    job_id = int(next(line for line in res.output.splitlines() if line.startswith("Submitted")).split()[3])
    log = tmp_path / f"forms-{job_id}.out"
    assert res.exit_code == 0, (res.output, log.read_text()[-3000:] if log.is_file() else "no log")
    assert "time=0.003: ultralytics trains" in res.output and f"job {job_id} COMPLETED" in res.output
    args = (tmp_path / "runs" / "forms" / "args.yaml").read_text()
    assert "epochs: 3\n" in args and "batch: 8\n" in args and "time: 0.003\n" in args  # ultralytics read it so
    records = [json.loads(x) for x in (tmp_path / f"yolo-usage-{job_id}.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "end" and any(r["kind"] == "epoch" for r in records)
