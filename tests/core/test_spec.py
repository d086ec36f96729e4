"""The ultralytics argument set: parsing and validation like ``yolo train``."""

from __future__ import annotations

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.errors import UsageError


def test_parses_task_mode_and_typed_values() -> None:
    s = spec.parse(
        ["detect", "train", "model=yolo11s.yaml", "data=d.yaml", "epochs=50", "imgsz=640", "val=False", "lr0=0.01"]
    )
    assert (s.task, s.mode) == ("detect", "train")
    assert s.args == {"model": "yolo11s.yaml", "data": "d.yaml", "epochs": 50, "imgsz": 640, "val": False, "lr0": 0.01}
    assert s.tokens[0] == "detect"


def test_defaults_come_from_ultralytics() -> None:
    s = spec.parse(["train", "data=d.yaml"])
    assert s.epochs == 100 and s.imgsz == 640 and s.batch == 16
    assert s.model == "yolo26n.pt"  # ultralytics' TASK2MODEL for detect


@pytest.mark.parametrize(("given", "used"), [(640, 640), (100, 128), (33, 64), ("[320,640]", 640)])
def test_imgsz_rounds_up_to_the_stride(given: object, used: int) -> None:
    assert spec.parse(["train", "data=d.yaml", f"imgsz={given}"]).imgsz == used


@pytest.mark.parametrize(("batch", "used"), [("-1", 16), ("0.7", 16), ("32", 32)])
def test_auto_batch_counts_as_ultralytics_cpu_default(batch: str, used: int) -> None:
    assert spec.parse(["train", "data=d.yaml", f"batch={batch}"]).batch == used


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["train", "data=d.yaml", "epoch=3"], "unknown key 'epoch' (did you mean 'epochs'?)"),
        (["train", "data=d.yaml", "epochs=abc"], "'epochs=abc' must be an integer"),
        (["train", "data=d.yaml", "epochs=0"], "'epochs=0' must be at least 1"),
        (["train", "data=d.yaml", "imgsz=-5"], "'imgsz=-5' must be a whole number"),
        (["train", "data=d.yaml", "fraction=1.5"], "'fraction=1.5' must be in (0, 1]"),
        (["train", "data=d.yaml", "batch=0"], "'batch=0' must be a positive whole number"),
        (["train", "data=d.yaml", "val=maybe"], "'val=maybe' must be True or False"),
        (["train", "data=d.yaml", "lr0=2"], "'lr0=2' must be a number between 0.0 and 1.0"),
        (["train", "data=d.yaml", "name="], "key 'name' has no value"),
        (["trian", "data=d.yaml"], "unexpected argument 'trian' (did you mean 'train'?)"),
        (
            ["train", "data=d.yaml", "--priority", "prod"],
            "'--priority' is not a training key: yolo-sbatch's own options (yolo-sbatch --help) go"
            " before the training words (yolo-sbatch --priority ... train key=value ...), and sbatch's"
            " others pass as --sbatch-arg=--priority=VALUE",
        ),
        (["train", "data=d.yaml", "--wait"], "yolo-sbatch --wait ... train key=value ..."),
        (["yolo", "train", "data=d.yaml"], "drop 'yolo': yolo-sbatch takes the words that follow it"),
        (["mode=predict", "data=d.yaml"], "mode 'predict' is not supported"),
        (["mode=dance", "data=d.yaml"], "'mode=dance' is not one of ultralytics' modes"),
        (["task=dance", "train"], "'task=dance' is not one of ultralytics' tasks"),
        (["train", "copy-cfg"], "'copy-cfg' is one of yolo's own commands"),
        (["train", "epochs"], "'epochs' needs a value: epochs=VALUE"),
        (["train", "imgsz=[640,", "480"], "'imgsz=[640,' has an unmatched '[' or ']'"),
        (["train", "imgsz=abc"], "'imgsz=abc' must be a whole number of pixels"),
        (["train", "epochs=2.5"], "'epochs=2.5' must be an integer"),
        (["train", "optimizer=Foo"], "'optimizer=Foo' is not one of ultralytics' optimizers (Adam, AdamW,"),
        (["train", "optimizer=5"], "'optimizer=5' must be a word"),
        (["train", "split=dev"], "'split=dev' must be one of train, val, test"),
        (["train", "copy_paste_mode=paste"], "'copy_paste_mode=paste' must be one of flip, mixup"),
        (["train", "auto_augment=best"], "'auto_augment=best' must be one of randaugment, autoaugment, augmix"),
        (["train", "amp=fp8"], "'amp=fp8' must be True, False, fp16, bf16 or fp32"),
        (["train", "scale=2"], "'scale=2' must be a number between 0.0 and 1.0"),
        (["train", "compile=3"], "'compile=3' must be True, False or a torch.compile mode"),
        (["train", "time=-1"], "'time=-1' must be the hours to train"),
        (["train", "epochs=None"], "'epochs=None': epochs must have a value"),
        (["train", "cfg=/nonexistent/x.yaml"], "cfg=/nonexistent/x.yaml not found"),
        (["train", "cfg=/dev/null"], "cfg=/dev/null is not a file"),
        (["predict", "data=d.yaml"], "mode 'predict' is not supported"),
        (["train", "data=d.yaml", "name=a\nb"], "contains a control character"),
        (["train", "data=d.yaml", "epochs=1000000"], "absurd"),
        (["train", "data=d.yaml", "batch=2000000"], "'batch=2000000' is absurd"),
        (["train", "data=d.yaml", "fraction=nan"], "'fraction=nan' must be in (0, 1]"),
        (["train", "data=d.yaml", "fraction=inf"], "'fraction=inf' must be in (0, 1]"),
        (["train", "data=d.yaml", "device=gpu"], "'device=gpu' must name GPU indices such as 0 or 0,1"),
        (["train", "data=d.yaml", "device=0;id"], "'device=0;id' must name GPU indices"),
        (["train", "data=d.yaml", "device=1e308"], "'device=1e+308' must name GPU indices"),
        (["train", "data=d.yaml", "device=npu:0"], "'device=npu:0' must name GPU indices"),
    ],
)
def test_bad_input_is_one_clear_line(words: list[str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        spec.parse(words)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_fraction_accepts_counts() -> None:
    assert spec.parse(["train", "data=d.yaml", "fraction=100"]).get("fraction") == 100


@pytest.mark.parametrize(
    ("device", "gpus"),
    [
        ("0", 1),
        ("0,1,2", 3),
        ("cpu", 0),
        ("[0,1]", 2),
        ("cuda:0", 1),
        ("cuda", 1),
        ("-1", 1),
        ("-1,-1", 2),
        ("(0, 1)", 2),
        ("'0,1'", 2),
    ],
)
def test_devices(device: str, gpus: int) -> None:
    assert spec.parse(["train", "data=d.yaml", f"device={device}"]).devices == gpus


def test_bundled_schema_matches_installed_ultralytics() -> None:
    cfg = pytest.importorskip("ultralytics.cfg")
    import ultralytics

    bundled = spec.ultralytics_cfg()
    assert bundled["ultralytics"] == ultralytics.__version__
    assert set(bundled["defaults"]) == set(cfg.DEFAULT_CFG_DICT)
    assert set(bundled["int_keys"]) == set(cfg.CFG_INT_KEYS)
    assert set(bundled["bool_keys"]) == set(cfg.CFG_BOOL_KEYS)
    assert set(bundled["fraction_keys"]) == set(cfg.CFG_FRACTION_KEYS)
