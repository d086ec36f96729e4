"""Token math, the model table and model resolution."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_yolo.core import spec
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model import estimate


def info(name: str = "yolov8n") -> estimate.ModelInfo:
    found = estimate.lookup_model(name)
    assert found is not None
    return found


def test_tokens_are_pixels_over_epochs_plus_weighted_validation() -> None:
    s = spec.parse(["train", "data=d.yaml", "epochs=3", "imgsz=100", "batch=4"])  # imgsz 100 -> 128
    w = estimate.workload(s, 40, 10, info())
    assert w.imgsz == 128
    assert w.train_pixels == 3 * 40 * 128**2
    assert w.val_pixels == 3 * 10 * 128**2  # one pass per epoch
    assert w.final_val_pixels == 10 * 128**2
    assert estimate.pixels(w, 0.5) == 3 * 40 * 128**2 + 0.5 * 4 * 10 * 128**2
    assert w.iterations == 3 * 10


def test_fraction_and_val_false() -> None:
    s = spec.parse(["train", "data=d.yaml", "epochs=4", "imgsz=64", "fraction=0.25", "val=False"])
    w = estimate.workload(s, 100, 10, info())
    assert w.train_images == 25
    assert w.val_passes == 1  # only the last epoch validates
    assert estimate.workload(s, 100, 10, info(), epochs_done=2).val_passes == 0  # stopped early


def test_units() -> None:
    assert estimate.images_640(640**2 * 10) == "10" and estimate.images_640(640**2 * 12_345) == "12,345"
    assert estimate.images_640(64**2 * 25) == "0.25"  # a tiny run is a share of one image, not "0"


@pytest.mark.parametrize(
    ("name", "family", "gflops"),
    [
        ("yolov8n.pt", "yolov8", 8.86),
        ("cfg/yolo11s.yaml", "yolo11", 21.84),
        ("YOLO26X.pt", "yolo26", 210.07),
        ("yolov5su.pt", "yolov5", 24.21),
        ("yolov5n.yaml", "yolov5", 7.84),
        ("yolov5x.pt", "yolov5", 247.31),
        ("yolov10b.yaml", "yolov10", 99.47),
        ("yolo26n-seg.pt", "yolo26", 10.63),
        ("yolo11s-pose.yaml", "yolo11", 23.6),
        ("yolov8x-obb.pt", "yolov8", 264.31),
    ],
)
def test_table_lookup(name: str, family: str, gflops: float) -> None:
    m = estimate.lookup_model(name)
    assert m is not None and (m.family, m.gflops, m.source) == (family, gflops, "table")


def test_every_standard_family_and_scale_is_in_the_table() -> None:
    for fam in ("yolov8", "yolo11", "yolo12", "yolo26"):
        for scale in "nsmlx":
            assert f"{fam}{scale}" in estimate.GFLOPS
    for fam in ("yolov8", "yolo11", "yolo26"):  # ultralytics' default model of each task is one of these
        for scale in "nsmlx":
            for task in ("-seg", "-pose", "-obb"):
                assert f"{fam}{scale}{task}" in estimate.TASK_GFLOPS


def test_flops_factor_overrides() -> None:
    m = estimate.resolve_model("pruned.pt", 8.86, sys.executable, None, flops_factor=0.5)
    assert m.gflops == pytest.approx(4.43) and m.source == "--flops-factor"
    with pytest.raises(UsageError, match="--flops-factor"):
        estimate.resolve_model("pruned.pt", 8.86, sys.executable, None, flops_factor=-1)


def test_custom_model_without_ultralytics_asks_for_flops_factor(tmp_path: Path) -> None:
    custom = tmp_path / "mynet.yaml"
    custom.write_text("nc: 2\n")
    with pytest.raises(UsageError, match="give --flops-factor"):
        estimate.resolve_model(str(custom), 8.86, "/usr/bin/python3", tmp_path)


def test_missing_custom_model_is_clear(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        estimate.resolve_model(str(tmp_path / "nope.yaml"), 8.86, sys.executable, tmp_path)


@pytest.mark.train
def test_custom_model_is_measured_with_ultralytics_and_cached(
    tmp_path: Path, yolo_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ultralytics

    for k, v in yolo_env.items():
        monkeypatch.setenv(k, v)
    src = Path(ultralytics.__file__).parent / "cfg/models/v8/yolov8.yaml"
    custom = tmp_path / "my-detector.yaml"  # not a table name: measured
    shutil.copyfile(src, custom)
    m = estimate.resolve_model(str(custom), 8.86, sys.executable, tmp_path)
    assert m.source == "measured" and m.family == "custom"
    assert m.gflops == pytest.approx(8.86, rel=0.02)  # yolov8.yaml defaults to scale n
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("not cached"))
    assert estimate.resolve_model(str(custom), 8.86, sys.executable, tmp_path).gflops == m.gflops


@given(
    epochs=st.integers(1, 1000),
    train=st.integers(1, 10**6),
    val=st.integers(0, 10**5),
    imgsz=st.integers(32, 2048),
    batch=st.integers(1, 512),
    vw=st.floats(0, 2),
)
def test_tokens_properties(epochs: int, train: int, val: int, imgsz: int, batch: int, vw: float) -> None:
    s = spec.parse(["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}", f"batch={batch}"])
    w = estimate.workload(s, train, val, info())
    t = estimate.pixels(w, vw)
    assert t >= w.train_pixels > 0
    assert w.imgsz % 32 == 0 and w.imgsz >= imgsz
    more = estimate.workload(
        spec.parse(["train", "data=d.yaml", f"epochs={epochs + 1}", f"imgsz={imgsz}"]), train, val, info()
    )
    assert estimate.pixels(more, vw) > t


@pytest.mark.parametrize(
    "name", ["yolo11n-cls.yaml", "yolov8s-cls.pt", "yolo12m-seg.yaml", "yolo12n-pose", "yolov9c-seg"]
)
def test_every_task_s_standard_models_are_in_the_table(name: str) -> None:
    info = estimate.lookup_model(name)
    assert info is not None and info.source == "table" and info.family != "custom"
