"""The progress line and what it counts, against the submit line's numbers (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.login import progress
from slurm_yolo.parse.records import parse_records


def usage_file(path: Path, images: int, imgsz: int, epochs: int, done: int) -> Path:
    """Usage records as the launcher writes them: tokens = images x imgsz^2 per epoch."""
    lines = [{"kind": "start", "imgsz": imgsz, "epochs": epochs}]
    lines += [
        {"kind": "epoch", "epoch": e, "epochs": epochs, "images": images, "tokens": images * imgsz**2, "seconds": 2.0}
        for e in range(1, done + 1)
    ]
    path.write_text("\n".join(json.dumps(rec) for rec in lines))
    return path


def test_the_progress_total_is_the_runs_training_pixels(tmp_path: Path) -> None:
    """What the bar fills toward is the workload's training pixels, the number the submit line's
    work grows from (adding validation, scaling by the model's FLOPs)."""
    s = spec.parse(["detect", "train", "model=yolo11s.yaml", "data=/d.yaml", "epochs=4", "imgsz=320"])
    model = estimate.lookup_model("yolo11s")
    assert model is not None
    w = estimate.workload(s, 100, 50, model)
    p = progress.progress(parse_records(usage_file(tmp_path / "u.jsonl", 100, 320, 4, 2)))
    assert p.pixels_total == w.train_pixels and p.pixels_done == w.train_pixels / 2
    effective = estimate.pixels(w, 0.4) * estimate.model_factor(w.gflops, 8.86)
    assert effective > w.train_pixels  # so the two lines must not both say just "Mpx"


def test_the_line_says_it_counts_trained_pixels(tmp_path: Path) -> None:
    p = progress.progress(parse_records(usage_file(tmp_path / "u.jsonl", 100, 100, 4, 2)))
    line = progress.render("RUNNING", p)
    assert "epoch 2/4 2.0/4.0 Mpx trained 0.50 Mpx/s ETA 0:04" in line and "Tok" not in line
    assert "effective" not in line


def test_watch_prints_no_line_while_slurm_does_not_know_the_job(tmp_path: Path) -> None:
    """A job just submitted can be missing from squeue and sacct for a moment: no UNKNOWN line then
    (nor before the error for a job Slurm never knew); its first known state is the first line."""
    count = tmp_path / "asked"
    for name, body in (
        ("squeue", "exit 1"),
        ("sacct", f"echo x >> {count}; [ $(wc -l < {count}) -ge 3 ] && echo COMPLETED; exit 0"),
    ):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "scontrol").chmod(0o755)
    lines: list[str] = []
    assert progress.watch(7, lines.append, poll=0.01, bin_dir=tmp_path) == "COMPLETED"
    assert lines == ["COMPLETED"]
