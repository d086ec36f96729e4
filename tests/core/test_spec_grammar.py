"""ultralytics' command-line grammar, form by form, as ``spec.parse`` reads it (no ultralytics import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.errors import UsageError


def test_task_and_mode_as_pairs_in_any_order() -> None:
    a = spec.parse(["task=detect", "mode=train", "model=yolov8n.pt", "data=coco8.yaml", "epochs=5"])
    b = spec.parse(["data=coco8.yaml", "train", "epochs=5", "model=yolov8n.pt", "detect"])
    assert (a.task, a.mode, a.args) == (b.task, b.mode, b.args) == ("detect", "train", b.args)
    assert a.tokens[0] == "task=detect"  # the job gets the words as typed


def test_a_missing_mode_is_ultralytics_default_train() -> None:
    assert spec.parse(["detect", "data=coco8.yaml"]).mode == "train"


@pytest.mark.parametrize(
    "words",
    [
        ["train", "epochs", "=", "3"],
        ["train", "epochs=", "3"],
        ["train", "epochs", "=3"],
        ["train", "epochs=3,"],
        ["train", "--epochs=3"],
        ["train", "epochs=1", "epochs=3"],  # the last wins
        ["train", "epochs=3.0"],  # an integral float, as ultralytics' check_cfg takes it
    ],
)
def test_forms_of_one_key(words: list[str]) -> None:
    assert spec.parse(words).epochs == 3
    assert spec.parse(words).args["epochs"] == 3 and isinstance(spec.parse(words).args["epochs"], int)


@pytest.mark.parametrize(
    ("words", "imgsz"),
    [
        (["imgsz=640,480"], 640),
        (["imgsz=[320,640]"], 640),
        (["imgsz=[320,", "640]"], 640),  # the shell splits it, ultralytics joins the brackets
        (["imgsz", "=", "(480, 100)"], 480),
        (["imgsz=300,"], 320),
        (["imgsz=16"], 32),  # ultralytics rounds up to one stride at least
    ],
)
def test_list_sizes_train_at_their_largest_rounded_to_the_stride(words: list[str], imgsz: int) -> None:
    assert spec.parse(["train", *words]).imgsz == imgsz


def test_values_typed_as_ultralytics_types_them() -> None:
    s = spec.parse(["train", "name=007", "project=None", "data='my data.yaml'", "lr0=1e-3", "cos_lr", "device=0,1"])
    assert s.args["name"] == "007"  # a run name stays the folder typed
    assert s.args["project"] is None
    assert s.data == "my data.yaml"
    assert (s.args["lr0"], s.args["cos_lr"], s.devices) == (0.001, True, 2)


@pytest.mark.parametrize(
    ("words", "model", "data"),
    [
        (["train"], "yolo26n.pt", "coco8.yaml"),
        (["segment", "train"], "yolo26n-seg.pt", "coco8-seg.yaml"),
        (["classify", "train"], "yolo26n-cls.pt", "imagenet10"),
        (["pose", "train"], "yolo26n-pose.pt", "coco8-pose.yaml"),
        (["obb", "train"], "yolo26n-obb.pt", "dota8.yaml"),
        (["train", "model=yolov8n-cls.pt"], "yolov8n-cls.pt", "imagenet10"),  # the model's task picks the data
        (["segment", "train", "model=yolov8n.pt"], "yolov8n.pt", "coco8.yaml"),  # ultralytics: the model's task wins
        (["train", "model=yolo11s-obb.yaml", "data=x.yaml"], "yolo11s-obb.yaml", "x.yaml"),
    ],
)
def test_the_tasks_default_model_and_data(words: list[str], model: str, data: str) -> None:
    s = spec.parse(words)
    assert (s.model, s.data, s.get("model"), s.get("data")) == (model, data, model, data)


def test_resume_has_no_default_data() -> None:
    assert spec.parse(["train", "resume=runs/detect/train/weights/last.pt"]).data is None


def test_cfg_file_under_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("my.yaml").write_text(
        "task: segment\nmode: train\nmodel:\ndata: coco8-seg.yaml\nepochs: 30\nimgsz: 320\nbatch: 8\ncfg:\n"
    )
    s = spec.parse(["cfg=my.yaml", "epochs=7"])
    assert (s.task, s.mode, s.epochs, s.imgsz, s.batch, s.data) == ("segment", "train", 7, 320, 8, "coco8-seg.yaml")
    assert s.model == "yolo26n.pt"  # ultralytics: a cfg's empty model: is its fallback, not the task's
    assert spec.parse(["epochs=9", "cfg=my.yaml"]).epochs == 9  # given before cfg=, the command line still wins
    Path("bad.yaml").write_text("epoch: 3\n")
    with pytest.raises(UsageError, match=r"cfg=bad.yaml: unknown key 'epoch' \(did you mean 'epochs'\?\)"):
        spec.parse(["train", "cfg=bad.yaml"])
    Path("list.yaml").write_text("- 1\n")
    with pytest.raises(UsageError, match=r"cfg=list\.yaml is not a mapping"):
        spec.parse(["train", "cfg=list.yaml"])
    Path("typed.yaml").write_text("epochs: many\n")
    with pytest.raises(UsageError, match="'epochs=many' must be an integer"):
        spec.parse(["train", "cfg=typed.yaml"])


def test_copy_cfg_file_parses(tmp_path: Path) -> None:
    """The file ``yolo copy-cfg`` writes is every key at its default (the bundled schema's)."""
    import yaml

    defaults = spec.ultralytics_cfg()["defaults"]
    (tmp_path / "default_copy.yaml").write_text(yaml.safe_dump(defaults))
    s = spec.parse([f"cfg={tmp_path / 'default_copy.yaml'}"])
    assert (s.mode, s.epochs, s.model, s.data) == ("train", defaults["epochs"], "yolo26n.pt", "coco8.yaml")
    assert "data" not in s.args and "device" not in s.args  # empty in the file: the job's ultralytics fills them


def test_optimizer_names_in_any_case() -> None:
    for name in ("SGD", "sgd", "AdamW", "adamw", "MuSGD", "auto", "RMSProp"):
        assert spec.parse(["train", f"optimizer={name}"]).args["optimizer"] == name


def test_mps_is_refused_without_suggesting_cpu() -> None:
    with pytest.raises(UsageError) as e:
        spec.parse(["train", "device=mps"])
    assert "Apple GPU" in str(e.value) and "device=cpu" not in str(e.value)


@pytest.mark.parametrize("hours", ["1", "0.5", "0"])
def test_time_in_hours(hours: str) -> None:
    assert spec.parse(["train", f"time={hours}"]).get("time") == float(hours)
