"""Resume as ultralytics has it: the checkpoint's own arguments and the epochs it has left."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.core import resume, spec
from slurm_yolo.core.errors import UsageError


def run_folder(root: Path, epochs: int, done: int, **more: object) -> Path:
    """An ultralytics run folder as a run leaves it: args.yaml, results.csv (``done`` epochs), last.pt."""
    (root / "weights").mkdir(parents=True)
    lines = ["task: detect", "mode: train", "model: yolov8n.yaml", "data: /data/ds.yaml", f"epochs: {epochs}"]
    lines += ["imgsz: 256", "batch: 16", "resume: false", "project: null", *(f"{k}: {v}" for k, v in more.items())]
    (root / "args.yaml").write_text("\n".join(lines) + "\n")
    rows = ["epoch,time,train/box_loss"] + [f"{i + 1},{10 * (i + 1)},1.0" for i in range(done)]
    (root / "results.csv").write_text("\n".join(rows) + "\n")
    (root / "weights" / "last.pt").write_bytes(b"not read")
    return root / "weights" / "last.pt"


@pytest.mark.parametrize("words", [["resume"], ["resume=True"]])
def test_resume_with_the_checkpoint_as_model_plans_the_epochs_left(tmp_path: Path, words: list[str]) -> None:
    last = run_folder(tmp_path / "run", epochs=100, done=7)
    s = spec.parse(["train", *words, f"model={last}", "batch=8", "epochs=999"])
    r = resume.resumed(s)
    assert (r.epochs, r.imgsz, r.batch, r.get("data"), r.model) == (93, 256, 8, "/data/ds.yaml", "yolov8n.yaml")
    assert r.tokens == s.tokens  # the job gets what the user typed


def test_resume_may_name_the_checkpoint_itself(tmp_path: Path) -> None:
    last = run_folder(tmp_path / "run", epochs=10, done=0)
    r = resume.resumed(spec.parse(["train", f"resume={last}", "data=/other/ds.yaml"]))
    assert (r.epochs, r.get("data")) == (10, "/other/ds.yaml")  # data= may be given again, as in ultralytics


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["train", "resume"], "resume needs the checkpoint to resume: model=path/to/last.pt"),
        (["train", "resume", "model=yolov8n.yaml"], "resume needs the checkpoint"),
        (["train", "resume=/nowhere/last.pt"], "resume: checkpoint /nowhere/last.pt not found"),
    ],
)
def test_a_resume_without_a_checkpoint_is_one_error(words: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resume.resumed(spec.parse(words))


def test_a_finished_run_or_no_run_folder_is_refused(tmp_path: Path) -> None:
    last = run_folder(tmp_path / "run", epochs=5, done=5)
    with pytest.raises(UsageError, match="trained all its 5 epochs: nothing is left to resume"):
        resume.resumed(spec.parse(["train", f"resume={last}"]))
    loose = tmp_path / "loose.pt"
    loose.write_bytes(b"x")
    with pytest.raises(UsageError, match="is not in an ultralytics run folder"):
        resume.resumed(spec.parse(["train", f"resume={loose}"]))
    (tmp_path / "run" / "args.yaml").write_text("imgsz: -5\n")
    with pytest.raises(UsageError, match=r"args\.yaml: 'imgsz=-5'"):
        resume.resumed(spec.parse(["train", f"resume={last}"]))


def test_bare_boolean_keys_are_true_and_resume_takes_a_path() -> None:
    s = spec.parse(["train", "data=d.yaml", "cos_lr", "rect"])
    assert (s.args["cos_lr"], s.args["rect"]) == (True, True)
    with pytest.raises(UsageError, match="must be True or the checkpoint"):
        spec.parse(["train", "resume=5"])
    with pytest.raises(UsageError, match="'imgsz' needs a value: imgsz=VALUE"):
        spec.parse(["train", "data=d.yaml", "imgsz"])  # not a boolean key: no bare form
    assert resume.checkpoint(spec.parse(["train", "data=d.yaml"])) is None
