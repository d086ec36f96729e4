"""Why a job did not complete and how it goes on: its log's failing line, its last checkpoint, the
command that resumes it (``parse.joblog``), and what --wait and ``slurm-yolo job`` make of them."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pandas as pd
import pytest

from slurm_yolo.cli.follow import ending_lines
from slurm_yolo.core import config as config_mod
from slurm_yolo.core import limits, resume, spec
from slurm_yolo.login import progress
from slurm_yolo.parse import joblog
from slurm_yolo.parse.records import parse_records
from slurm_yolo.slurm.visibility import current_user

TRACEBACK = """\
slurm-yolo: run 1 of job 53 starts 2026-12-06 00:00:00, time limit 00:05:00
\x1b[34m\x1b[1mengine/trainer: \x1b[0mtask=detect, mode=train
Traceback (most recent call last):
  File "/opt/x/trainer.py", line 150, in <module>
    raise SystemExit(main(json.loads(sys.argv[1]), int(sys.argv[2])))
  File "/opt/x/ultralytics/data/utils.py", line 400, in check_det_dataset
    raise FileNotFoundError(m)
FileNotFoundError: Dataset '/data/d.yaml' images not found, missing path '/nowhere/images/val'
Note dataset download directory is '/home/alice/datasets'.
"""


def test_the_failing_line_is_the_last_tracebacks_exception() -> None:
    assert joblog.last_error(TRACEBACK) == (
        "FileNotFoundError: Dataset '/data/d.yaml' images not found, missing path '/nowhere/images/val'"
    )
    chained = TRACEBACK + "\nDuring handling...\nTraceback (most recent call last):\n  File x\nRuntimeError: boom\n"
    assert joblog.last_error(chained) == "RuntimeError: boom"


def test_a_requeued_jobs_log_speaks_of_its_last_run_only() -> None:
    later = TRACEBACK + "slurm-yolo: run 2 of job 53 starts 2026-12-06 00:10:00 (requeued)\nepoch 3 ...\n"
    later += "slurmstepd: error: *** JOB 53 ON n1 CANCELLED AT 2026-12-06T00:20:00 DUE TO TIME LIMIT ***\n"
    assert joblog.last_error(later).endswith("DUE TO TIME LIMIT ***")
    assert joblog.last_error("Error: resume: checkpoint /x/last.pt not found\n") == (
        "Error: resume: checkpoint /x/last.pt not found"
    )
    assert joblog.last_error("all fine\n") == ""


def test_what_a_log_says_is_shown_cleaned_and_cut() -> None:
    hostile = "Traceback (most recent call last):\nValueError: \x1b]0;owned\x07" + "x" * 1000 + "\n"
    line = joblog.last_error(hostile)
    assert "\x1b" not in line and "\x07" not in line and len(line) <= joblog.SHOWN_CHARS


def test_slurms_reason_where_the_log_says_nothing() -> None:
    assert joblog.slurm_reason("FAILED", "2:0") == "Slurm: its batch script exited with code 2"
    assert joblog.slurm_reason("TIMEOUT", "0:15") == "Slurm: it reached its time limit"
    assert "cancelled" in joblog.slurm_reason("CANCELLED by 0")


def usage(path: Path, epochs: int, done: int, last: str, epoch_s: float = 20.0) -> Path:
    """Usage records of a run of ``epochs`` cut after ``done`` saved epochs (30 s of start-up)."""
    recs: list[dict[str, object]] = [{"kind": "start", "time": 1000.0, "epochs": epochs, "imgsz": 64}]
    for e in range(1, done + 1):
        at = 1030.0 + e * epoch_s
        recs.append({"kind": "epoch", "time": at, "epoch": e, "epochs": epochs, "seconds": epoch_s, "images": 8})
        recs.append({"kind": "checkpoint", "time": at, "epoch": e, "last": last})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_the_resume_command_names_the_real_checkpoint_and_a_limit_for_what_is_left(tmp_path: Path) -> None:
    last = "/runs/my run/weights/last.pt"
    s = joblog.saved(joblog.iter_records(tmp_path, usage(tmp_path / "u.jsonl", 40, 6, last).read_text()))
    assert s is not None and (s.last, s.epoch, s.epochs, s.epoch_seconds, s.startup_seconds) == (last, 6, 40, 20, 30)
    limit = joblog.resume_limit(s, 120, 0.2)
    need = (30 + 35 * 20) * 1.2  # start-up, the 34 epochs left and the final validation as one, the buffer
    assert need <= limit - limits.usr2_lead(limit, 120) - limits.SIGNAL_EARLY and limit % 60 == 0
    words = shlex.split(joblog.resume_command(s, "t4", "vision", limit))
    assert words == [
        "yolo-sbatch",
        "-p",
        "t4",
        "-A",
        "vision",
        "-t",
        str(limit // 60),
        "train",
        "resume",
        f"model={last}",
    ]
    assert spec.parse(words[7:]).args["resume"] is True  # the words yolo-sbatch plans as a resume


def test_no_checkpoint_no_command_and_a_hostile_path_is_no_command(tmp_path: Path) -> None:
    assert joblog.saved(joblog.iter_records(tmp_path, usage(tmp_path / "u.jsonl", 40, 0, "/x").read_text())) is None
    text = usage(tmp_path / "v.jsonl", 40, 3, "relative/last.pt").read_text()
    assert joblog.saved(joblog.iter_records(tmp_path, text)) is None


def test_the_ending_of_ones_own_job_reads_her_files(tmp_path: Path) -> None:
    log = tmp_path / "yolo-53.out"
    log.write_text(TRACEBACK)
    u = usage(tmp_path / "yolo-usage-53.jsonl", 40, 6, str(tmp_path / "weights" / "last.pt"))
    me = current_user()
    failed = joblog.ending(me, "FAILED", "1:0", log, u, ("t4", "vision"), 120, 0.2)
    assert failed.why.startswith("FileNotFoundError: Dataset") and failed.resume == ""  # a failure: no resume
    late = joblog.ending(me, "TIMEOUT", "0:15", tmp_path / "none.out", u, ("t4", "vision"), 120, 0.2)
    assert late.why == "Slurm: it reached its time limit" and late.resume.startswith("yolo-sbatch -p t4 -A vision -t ")
    lines = ending_lines(53, "TIMEOUT", late)
    assert lines[0] == "job 53 TIMEOUT: Slurm: it reached its time limit"
    assert lines[1].startswith("job 53 saved epoch 6 of 40; to train the rest: yolo-sbatch ")
    os.symlink(log, tmp_path / "link.out")  # never through a link
    assert joblog.ending(me, "FAILED", "1:0", tmp_path / "link.out", None, ("t4", ""), 120, 0.2).why.startswith(
        "Slurm: its batch script exited with code 1"
    )


def test_a_resumed_runs_progress_counts_against_its_own_epochs(tmp_path: Path) -> None:
    """``train resume model=last.pt`` at epoch 24 of 40: the records say 25/40 and the bar fills over
    the 16 epochs this job trains."""
    recs = [{"kind": "start", "imgsz": 64, "epochs": 40}]
    recs += [
        {"kind": "epoch", "epoch": e, "epochs": 40, "images": 10, "tokens": 10 * 64**2, "seconds": 2.0}
        for e in (25, 26)
    ]
    path = tmp_path / "u.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    p = progress.progress(parse_records(path))
    assert (p.epoch, p.epochs) == (26, 40) and p.pixels_total == 16 * 10 * 64**2
    assert " epoch 26/40 " in progress.render("RUNNING", p)


def test_the_launcher_counts_a_resumed_run_as_its_checkpoint_says(tmp_path: Path) -> None:
    from slurm_yolo.job import launcher

    (tmp_path / "weights").mkdir()
    (tmp_path / "args.yaml").write_text("task: detect\nmodel: yolov8n.yaml\ndata: /d.yaml\nepochs: 40\nimgsz: 64\n")
    (tmp_path / "results.csv").write_text("epoch,time\n" + "".join(f"{e},{e}\n" for e in range(1, 25)))
    (tmp_path / "weights" / "last.pt").write_bytes(b"x")
    s = spec.parse(["train", "resume", f"model={tmp_path / 'weights' / 'last.pt'}"])
    whole, planned = launcher.checkpoint_run(s)
    assert (whole.epochs, whole.get("data"), whole.imgsz) == (40, "/d.yaml", 64)
    assert planned is not None and planned.epochs == 16 == resume.resumed(s).epochs
    record = launcher.start_record(whole, 1, 2, planned)
    assert record["epochs"] == 40  # the records' epochs: the checkpoint's, not ultralytics' default 100


def test_job_advice_never_asks_for_a_limit_under_slurms_least(tmp_path: Path) -> None:
    from slurm_yolo.admin import jobview

    cfg = config_mod.load(tmp_path / "none.toml", env={})
    view = {
        "runs": [{"state": "COMPLETED", "elapsed_s": 5, "limit_s": 60.0}],
        "util_pct": None,
        "gpus": 1.0,
        "partition": "t4",
        "exempt": "",
    }
    assert jobview.advice(view, 10, cfg) == []
    view["runs"] = [{"state": "COMPLETED", "elapsed_s": 5, "limit_s": 600.0}]
    assert jobview.advice(view, 10, cfg)[0].startswith("it used 1% of its time limit")
    assert [jobview._hours(h) for h in (0.0123, 1.5, 0.000278, 3.5e-5)] == ["0.0123", "1.50", "0.000278", "0.0000350"]


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETED"])
def test_a_jobs_line_keeps_its_figures(state: str) -> None:
    from slurm_yolo.admin import joblist

    view = {
        "job_id": 7,
        "user": "alice",
        "account": "vision",
        "state": state,
        "partition": "t4",
        "gpus": 1.0,
        "runs": [{"limit_s": 120.0, "charge": None}, {"limit_s": 300.0, "charge": 5.0}],
        "predicted_s": 90.0,
        "elapsed_s": 200,
        "gpu_hours": 0.05,
    }
    row = joblist.row(view, str(pd.Timestamp("2026-12-01T10:00:00").isoformat()))
    assert (row["limit_s"], row["charge"], row["runs"], row["state"]) == (300.0, 5.0, 2, state)


def test_a_run_that_saved_its_last_epoch_has_nothing_to_resume() -> None:
    """A limit that cut only ultralytics' final validation: the weights are there, no resume is offered."""
    done = joblog.Saved("/runs/e2e/weights/last.pt", 1, 1, 20.0, 1, 5.0)
    assert "trained all 1 epochs" in joblog.all_trained(done) and "/runs/e2e/weights" in joblog.all_trained(done)
    assert joblog.all_trained(done._replace(epochs=3)) == "" and joblog.all_trained(None) == ""
    end = joblog.Ending("", done, "", True)
    lines = ending_lines(7, "TIMEOUT", end)
    assert lines == [f"job 7: {joblog.all_trained(done)}"]


def test_c1_controls_and_bidi_overrides_are_shown_escaped() -> None:
    """An 8-bit CSI, OSC and a right-to-left override in a log line reach no terminal raw."""
    line = joblog.shown("RuntimeError: x\x9b2J\x9d0;t\x9c \u202eRLO\u2028end")
    assert line == "RuntimeError: x\\x9b2J\\x9d0;t\\x9c \\u202eRLO\\u2028end"
