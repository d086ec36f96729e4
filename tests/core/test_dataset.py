"""Counting images from ultralytics data yamls, and the count cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_yolo.core import dataset
from slurm_yolo.core.errors import UsageError


def touch(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / n).write_bytes(b"x")


def test_dirs_nested_and_suffixes(tmp_path: Path) -> None:
    touch(tmp_path / "images/train", ["a.jpg", "b.PNG", "c.txt", "d.webp"])
    touch(tmp_path / "images/train/sub", ["e.jpeg", "f.heic"])
    touch(tmp_path / "images/val", ["g.jpg"])
    y = tmp_path / "data.yaml"
    y.write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/val\n")
    c = dataset.count(y)
    assert (c.train, c.val) == (5, 1)


def test_txt_lists_relative_paths_and_lists_of_sources(tmp_path: Path) -> None:
    touch(tmp_path / "a", ["1.jpg", "2.jpg"])
    touch(tmp_path / "b", ["3.jpg"])
    (tmp_path / "train.txt").write_text("./a/1.jpg\n./a/2.jpg\n\n./b/3.jpg\n./notes.md\n")
    y = tmp_path / "data.yaml"
    y.write_text("train: [train.txt, a, b]\nval: b\n")  # no path: -> the yaml's folder
    c = dataset.count(y)
    assert (c.train, c.val) == (3 + 2 + 1, 1)


def test_a_relative_path_resolves_from_the_working_folder_not_the_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ultralytics: ``path: ../ds`` is ../ds of where the job runs (else under its datasets_dir),
    not of the yaml's folder, where a plan once counted images the job then did not find."""
    touch(tmp_path / "sets/ds/images", ["1.jpg", "2.jpg"])
    (tmp_path / "sets/cfg").mkdir(parents=True)
    y = tmp_path / "sets/cfg/data.yaml"
    y.write_text("path: ../ds\ntrain: images\nval: images\n")
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "no-settings"))
    monkeypatch.chdir(tmp_path / "sets/cfg")
    assert dataset.count(y).train == 2
    monkeypatch.chdir(tmp_path)  # ultralytics looks in ./datasets/../ds: its settings' datasets_dir, made now
    with pytest.raises(UsageError, match=re.escape("ultralytics takes a relative path: ../ds from the working")) as e:
        dataset.count(y)
    assert f"train path {tmp_path / 'ds' / 'images'} does not exist" in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train: nowhere\nval: nowhere\n", "train path"),
        ("val: images\n", "no 'train' entry"),
        ("- just\n- a list\n", "is not a mapping"),
        ("train: [unclosed\n", "is not readable YAML"),
        ("train: empty\nval: empty\n", "0 images"),
        ("train: 5\nval: empty\n", "must be a path"),
    ],
)
def test_bad_yaml_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "empty").mkdir()
    y = tmp_path / "data.yaml"
    y.write_text(text)
    with pytest.raises(UsageError, match=message.replace("[", r"\[")):
        dataset.count(y)


def test_missing_yaml(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        dataset.count(tmp_path / "nope.yaml")


def test_symlink_loop_terminates(tmp_path: Path) -> None:
    touch(tmp_path / "imgs", ["1.jpg"])
    os.symlink(tmp_path / "imgs", tmp_path / "imgs" / "loop")
    assert dataset.count_dir(str(tmp_path / "imgs")) == 1


def test_cache_hits_and_invalidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path / "images/train/s1", ["1.jpg", "2.jpg"])
    touch(tmp_path / "images/val", ["v.jpg"])
    y = tmp_path / "data.yaml"
    y.write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/val\n")
    cache = tmp_path / "cache.json"
    assert dataset.count(y, cache).train == 2
    real = dataset.count_dir
    monkeypatch.setattr(dataset, "count_dir", lambda p: pytest.fail("cache miss"))
    assert dataset.count(y, cache).train == 2  # served from the cache
    monkeypatch.setattr(dataset, "count_dir", real)
    time.sleep(0.01)
    touch(tmp_path / "images/train/s1", ["3.jpg"])  # changes the subfolder's mtime
    assert dataset.count(y, cache).train == 3


def test_corrupt_cache_is_a_cold_cache(tmp_path: Path) -> None:
    touch(tmp_path / "i", ["1.jpg"])
    y = tmp_path / "data.yaml"
    y.write_text("train: i\nval: i\n")
    cache = tmp_path / "cache.json"
    cache.write_text("{not json")
    assert dataset.count(y, cache).train == 1


def test_synthetic_dataset_counts(dataset: Path) -> None:  # type: ignore[no-redef]
    from slurm_yolo.core import dataset as ds

    c = ds.count(dataset)
    assert (c.train, c.val) == (16, 8)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder of its own and ultralytics settings with no datasets_dir yet."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "cfg"))
    return tmp_path


def settings(config_dir: Path, datasets: Path) -> None:
    (config_dir / "Ultralytics").mkdir(parents=True, exist_ok=True)
    (config_dir / "Ultralytics" / "settings.json").write_text(json.dumps({"datasets_dir": str(datasets)}))


@pytest.mark.parametrize(
    ("data", "train", "val"),
    [
        ("coco8.yaml", 4, 4),
        ("coco8", 4, 4),
        ("coco128.yaml", 128, 128),
        ("coco.yaml", 118287, 5000),
        ("VOC.yaml", 16551, 4952),
        ("Objects365.yaml", 1742289, 80000),
    ],
)
def test_bundled_dataset_not_downloaded_uses_the_published_sizes(
    elsewhere: Path, data: str, train: int, val: int
) -> None:
    c = dataset.count(data)
    assert (c.train, c.val) == (train, val)
    assert c.source.startswith("ultralytics 8.4.190's published sizes (no datasets_dir in ")
    settings(elsewhere / "cfg", elsewhere / "datasets")
    c = dataset.count(data)
    assert f"(no {elsewhere / 'datasets'}/" in c.source and "downloads it when the job starts" in c.source


def test_bundled_dataset_counted_where_ultralytics_keeps_it(elsewhere: Path) -> None:
    touch(elsewhere / "datasets/coco8/images/train", ["1.jpg", "2.jpg", "3.jpg"])
    touch(elsewhere / "datasets/coco8/images/val", ["4.jpg"])
    settings(elsewhere / "cfg", elsewhere / "datasets")
    c = dataset.count("coco8.yaml", elsewhere / "cache.json")
    assert (c.train, c.val, c.yaml_path) == (3, 1, "coco8.yaml")
    assert c.source == f"counted in {elsewhere / 'datasets/coco8'} (ultralytics' datasets_dir)"
    # the job's YOLO_CONFIG_DIR (job.yolo_config_dir) is where its ultralytics looks, not this shell's
    settings(elsewhere / "jobcfg", elsewhere / "elsewhere")
    assert dataset.count("coco8.yaml", yolo_config_dir=str(elsewhere / "jobcfg")).train == 4
    # ultralytics takes a relative path: from the working folder first
    touch(Path("coco8/images/train"), ["a.jpg"])
    touch(Path("coco8/images/val"), ["b.jpg"])
    assert dataset.count("coco8.yaml").source == f"counted in {Path.cwd() / 'coco8'} (the working folder)"
    # and a file by that name before any bundled dataset
    touch(Path("mine/images"), ["1.jpg", "2.jpg"])
    Path("coco8.yaml").write_text("path: mine\ntrain: images\nval: images\n")
    c = dataset.count("coco8.yaml")
    assert (c.train, c.yaml_path, c.source) == (2, str(Path.cwd() / "coco8.yaml"), "counted from its folders and lists")


def test_bundled_dataset_partly_downloaded_names_what_is_missing(elsewhere: Path) -> None:
    touch(elsewhere / "datasets/VOC/images/train2012", ["1.jpg"])
    settings(elsewhere / "cfg", elsewhere / "datasets")
    with pytest.raises(UsageError, match=r"data VOC.yaml: train path .*/VOC/images/train2007 does not exist"):
        dataset.count("VOC.yaml")


def test_unknown_name(elsewhere: Path) -> None:
    with pytest.raises(UsageError, match=r"^data yaml coco9.yaml not found \(nor is it one of ultralytics' bundled"):
        dataset.count("coco9.yaml")


def test_bundled_table_matches_installed_ultralytics() -> None:
    """Every row is the installed yaml's path and splits, and the image counts its comments publish."""
    import importlib.util
    import re

    import yaml

    found = importlib.util.find_spec("ultralytics")  # located, not imported
    if found is None or found.origin is None:
        pytest.skip("ultralytics is not installed (the [train] extra)")
    folder = Path(found.origin).parent / "cfg" / "datasets"
    for name, row in dataset.BUILTIN.items():
        text = (folder / name).read_text()
        data = yaml.safe_load(text)
        listed = {s: tuple(data[s]) if isinstance(data[s], list) else (data[s],) for s in ("train", "val")}
        assert (data["path"], listed["train"], listed["val"]) == (row.root, row.train, row.val), name
        published = {
            s: re.search(rf"^{s}:.*# {s} images \(relative to 'path'\) (.*)$", text, re.MULTILINE)
            for s in ("train", "val")
        }
        if name == "xView.yaml":  # "90% of 847" / "10% of 847": ultralytics' autosplit of the train set
            assert (row.train_images, row.val_images) == (round(0.9 * 847), round(0.1 * 847))
            continue
        if name in dataset.UNPUBLISHED_COUNTS:  # the yaml says none: the dataset's own release does
            assert not any(published.values()), name
            continue
        for split, n in (("train", row.train_images), ("val", row.val_images)):
            m = published[split]
            assert m and m.group(1).startswith(f"{n} images"), (name, split)


def test_every_installed_dataset_yaml_is_planned_or_refused_honestly() -> None:
    """Every yaml ultralytics ships is in the table, but ImageNet.yaml, which its classify trainer does
    not read (a named folder instead)."""
    import importlib.util

    found = importlib.util.find_spec("ultralytics")
    if found is None or found.origin is None:
        pytest.skip("ultralytics is not installed (the [train] extra)")
    shipped = {p.name for p in (Path(found.origin).parent / "cfg" / "datasets").glob("*.yaml")}
    assert shipped - set(dataset.BUILTIN) == set(dataset.CLASSIFY_YAMLS)


@pytest.mark.parametrize(
    ("name", "train", "val"),
    [
        ("mnist160", 80, 80),
        ("imagenet10", 10, 10),
        ("cifar10", 50000, 10000),
        ("cifar100", 50000, 10000),
        ("fashion-mnist", 60000, 10000),
        ("mnist", 60000, 10000),
        ("imagenette160", 9469, 3925),
        ("imagewoof320", 9025, 3929),
        ("imagenet", 1281167, 50000),
    ],
)
def test_classification_datasets_by_name_use_the_published_sizes(
    elsewhere: Path, name: str, train: int, val: int
) -> None:
    c = dataset.count(name)
    assert (c.train, c.val, c.folder, c.yaml_path) == (train, val, True, name)
    assert "published sizes" in c.source and "downloads it when the job starts" in c.source
    dataset.check_task("classify", "yolo26n-cls.pt", c)  # a classify model trains it
    with pytest.raises(UsageError, match="must be a data yaml"):
        dataset.check_task("detect", "yolo26n.pt", c)


def test_a_downloaded_classification_dataset_is_counted(elsewhere: Path) -> None:
    for split, n in (("train", 3), ("test", 2)):
        touch(elsewhere / "datasets" / "mnist160" / split / "0", [f"{i}.png" for i in range(n)])
    settings(elsewhere / "cfg", elsewhere / "datasets")
    c = dataset.count("mnist160")
    assert (c.train, c.val, c.source) == (3, 2, "counted in its train/ and val/ class folders")


def test_unknown_names_are_refused_for_what_they_are(elsewhere: Path) -> None:
    with pytest.raises(UsageError) as e:
        dataset.count("mnist161")
    assert "no size is known for a dataset of that name" in str(e.value) and "bundled" not in str(e.value)
    assert "mnist160" in str(e.value)  # the names it does know
    with pytest.raises(UsageError, match="give data=imagenet"):
        dataset.count("ImageNet.yaml")


@pytest.mark.parametrize("kind", ["loop", "fifo", "dev", "dir"])
def test_a_data_yaml_that_is_no_file_is_one_error(tmp_path: Path, kind: str) -> None:
    y = tmp_path / "d.yaml"
    if kind == "loop":
        os.symlink(y, y)
    elif kind == "fifo":
        os.mkfifo(y)
    elif kind == "dev":
        os.symlink("/dev/zero", y)
    else:
        y.mkdir()
    message = "too many levels of symbolic links" if kind == "loop" else "is not a regular file"
    with pytest.raises(UsageError, match=message):
        dataset.count(y)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("loop", "too many levels of symbolic links"),
        ("fifo", "neither a folder nor an image list"),
        ("/dev/zero", "neither a folder nor an image list"),
        ("/proc", "kernel pseudo-filesystem"),
        ("/sys/kernel", "kernel pseudo-filesystem"),
        ("x" * 300, "file name too long"),
        ("~nosuchuser9/x", "does not exist"),
    ],
)
def test_hostile_sources_are_one_error(tmp_path: Path, entry: str, message: str) -> None:
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    y = tmp_path / "d.yaml"
    y.write_text(json.dumps({"train": entry, "val": entry}))
    with pytest.raises(UsageError, match=message):
        dataset.count(y)


def test_loops_and_kernel_links_inside_a_dataset_are_skipped(tmp_path: Path) -> None:
    touch(tmp_path / "imgs", ["1.jpg", "2.jpg"])
    os.symlink(tmp_path / "imgs" / "self", tmp_path / "imgs" / "self")  # a loop of one link
    os.symlink("/proc", tmp_path / "imgs" / "proc")  # /proc/PID/root would be the whole machine
    y = tmp_path / "d.yaml"
    y.write_text("train: imgs\nval: imgs\n")
    assert dataset.count(y, tmp_path / "cache.json").train == 2
    assert dataset.count(y, tmp_path / "cache.json").train == 2  # the fingerprint skips the loop too


def test_a_source_replaced_by_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    touch(tmp_path / "imgs", ["1.jpg"])
    (tmp_path / "list.txt").write_text("imgs/1.jpg\n")
    y = tmp_path / "d.yaml"
    y.write_text("train: list.txt\nval: imgs\n")
    cache = tmp_path / "cache.json"
    assert dataset.count(y, cache).train == 1
    (tmp_path / "list.txt").unlink()
    os.mkfifo(tmp_path / "list.txt")
    with pytest.raises(UsageError, match="neither a folder nor an image list"):
        dataset.count(y, cache)


def test_settings_that_are_a_fifo_are_ignored(elsewhere: Path) -> None:
    (elsewhere / "cfg" / "Ultralytics").mkdir(parents=True)
    os.mkfifo(elsewhere / "cfg" / "Ultralytics" / "settings.json")
    assert dataset.count("coco8.yaml").train == 4


def test_a_data_yaml_bigger_than_any_datasets_is_refused_unread(tmp_path: Path) -> None:
    """calibrate reads a user's data yaml as root: a 3 GB one (sparse: no disk) is one error, read no
    further than the limit."""
    big = tmp_path / "data.yaml"
    with big.open("wb") as f:
        f.truncate(3 << 30)
    with pytest.raises(UsageError, match="is longer than any dataset's"):
        dataset.load_yaml(big)


def test_a_classification_folder_counts_its_class_folders(tmp_path: Path) -> None:
    """``classify train data=FOLDER``: ultralytics reads train/ and val/ (else test/) of class folders."""
    for split, n in (("train", 5), ("test", 2)):
        for label in ("cat", "dog"):
            folder = tmp_path / "pets" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                (folder / f"{i}.jpg").write_bytes(b"x")
    got = dataset.count(str(tmp_path / "pets"), tmp_path / "cache.json")
    assert (got.train, got.val) == (10, 4) and "class folders" in got.source
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="needs train/"):
        dataset.count(str(tmp_path / "empty"), tmp_path / "cache.json")


@pytest.mark.parametrize("name", ["coco8-seg", "coco8-pose.yaml", "DOTAv1", "dota8.yaml", "tiger-pose"])
def test_the_bundled_datasets_of_every_task_are_known(name: str) -> None:
    assert dataset.builtin_name(name) is not None


def test_a_model_its_data_cannot_train_is_refused_at_submission(tmp_path: Path) -> None:
    """ultralytics would fail in the job (started, and charged): a classify model on a data yaml, a
    detect model on a folder of class folders, a pose model on a yaml without kpt_shape."""
    folder = dataset.DatasetCounts("/d/pets", 10, 4, "", folder=True)
    detect = dataset.DatasetCounts("coco8.yaml", 4, 4)
    pose = dataset.DatasetCounts("coco8-pose.yaml", 4, 4, keypoints=True)
    for task, model, counts, message in (
        ("classify", "yolo11n-cls.yaml", detect, "must be a folder of train/ and val/ class folders"),
        ("detect", "yolov8n.yaml", folder, "must be a data yaml (/d/pets is a folder"),
        ("pose", "yolo11n-pose.yaml", detect, "needs kpt_shape (a pose dataset); coco8.yaml has none"),
    ):
        with pytest.raises(UsageError, match=re.escape(message)):
            dataset.check_task(task, model, counts)
    for task, counts in (("classify", folder), ("pose", pose), ("detect", detect), ("", folder)):
        dataset.check_task(task, "m.yaml", counts)
    with pytest.raises(UsageError, match=re.escape("coco8.yaml (a detect dataset) has boxes alone")):
        dataset.check_task("segment", "yolov8n-seg.yaml", detect)
    dataset.check_task("segment", "yolov8n-seg.yaml", dataset.DatasetCounts("coco8-seg.yaml", 4, 4))
    dataset.check_task("obb", "yolo11n-obb.yaml", dataset.DatasetCounts("DOTAv1.yaml", 4, 4))


BOXES, POLYGON, CORNERS = "0 0.5 0.5 0.2 0.2", "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.5", "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.45"


def labelled(root: Path, rows: str, images: int = 3, listed: bool = False) -> Path:
    """A dataset of ``images`` real PNGs with one label file each (``rows``), and one background image
    without a label; its yaml, whose train split is the folder or (``listed``) a .txt list of ./ paths."""
    from PIL import Image  # the training install's (ultralytics brings it)

    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(images + 1):
            Image.new("RGB", (64, 64), (i * 40, 90, 160)).save(root / "images" / split / f"{i}.png")
            if i:
                (root / "labels" / split / f"{i}.txt").write_text(rows + "\n")
    (root / "train.txt").write_text("".join(f"./images/train/{i}.png\n" for i in range(images + 1)))
    y = root / "data.yaml"
    train = "train.txt" if listed else "images/train"
    y.write_text(f"path: {root}\ntrain: {train}\nval: images/val\nnames: {{0: a}}\n")
    return y


def test_a_segment_or_obb_model_on_a_detect_dataset_is_refused_as_ultralytics_refuses_it(tmp_path: Path) -> None:
    """Box-only labels (``class x y w h``) under a segment or OBB model: refused at submission with
    the label file that shows it; polygons and 4 corners pass; a detect model takes any of them. And
    ultralytics' own dataset refuses the same box labels for the segment task at the job's start."""
    pytest.importorskip("PIL")
    cases = {
        "boxes": labelled(tmp_path / "boxes", BOXES),
        "listed": labelled(tmp_path / "listed", BOXES, listed=True),
        "polygons": labelled(tmp_path / "polygons", POLYGON),
        "corners": labelled(tmp_path / "corners", CORNERS),
    }
    counts = {k: dataset.count(str(y), tmp_path / "cache.json") for k, y in cases.items()}
    for name in ("boxes", "listed"):
        for task, model in (("segment", "yolo11n-seg.yaml"), ("obb", "yolo11n-obb.yaml")):
            label = tmp_path / name / "labels" / "train"
            with pytest.raises(UsageError, match=f"{re.escape(model)} is a {task} model: .*{re.escape(str(label))}/"):
                dataset.check_task(task, model, counts[name])
        dataset.check_task("detect", "yolo11n.yaml", counts[name])
    dataset.check_task("segment", "yolo11n-seg.yaml", counts["polygons"])
    dataset.check_task("obb", "yolo11n-obb.yaml", counts["corners"])
    dataset.check_task("detect", "yolo11n.yaml", counts["polygons"])
    pytest.importorskip("ultralytics")
    script = (
        "import sys\nfrom ultralytics.data.dataset import YOLODataset\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        YOLODataset(img_path=path, imgsz=64, augment=False, data={'names': {0: 'a'}, 'channels': 3},"
        " task='segment')\n"
        "        print('RESULT ok')\n"
        "    except ValueError as e:\n"
        "        print('RESULT', 'refused' if 'not a detect dataset' in str(e) else repr(e))\n"
    )
    paths = [str(tmp_path / name / "images" / "train") for name in ("boxes", "polygons")]
    got = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, timeout=120)
    results = [line.split(" ", 1)[1] for line in got.stdout.splitlines() if line.startswith("RESULT ")]
    assert results == ["refused", "ok"], got.stdout + got.stderr


def test_a_yaml_s_kpt_shape_is_read_without_a_yaml_parser(tmp_path: Path) -> None:
    y = tmp_path / "d.yaml"
    y.write_text("path: .\ntrain: images\nval: images\nkpt_shape: [17, 3]\n")
    assert dataset._names_keypoints(y)
    y.write_text("path: .\n# kpt_shape: [17, 3]\ntrain: images\n")
    assert not dataset._names_keypoints(y)


def test_a_classify_dataset_by_name_is_counted_where_ultralytics_keeps_it(elsewhere: Path) -> None:
    """``data=mnist160``: ultralytics' datasets_dir/mnist160, of class folders; ``data=coco8`` there stays
    the bundled detection dataset it names."""
    for split, names in (("train", ["1.png", "2.png"]), ("test", ["3.png"])):
        for label in ("0", "1"):
            touch(elsewhere / f"datasets/mnist160/{split}/{label}", names)
    touch(elsewhere / "datasets/coco8/images/train", ["1.jpg"])
    touch(elsewhere / "datasets/coco8/images/val", ["2.jpg"])
    settings(elsewhere / "cfg", elsewhere / "datasets")
    c = dataset.count("mnist160", elsewhere / "cache.json")
    assert (c.train, c.val, c.folder) == (4, 2, True)
    assert (dataset.count("coco8", elsewhere / "cache.json").train, dataset.count("coco8").folder) == (1, False)


ULTRALYTICS_RESOLVES = """
import json, os, sys
from ultralytics.data.utils import check_det_dataset
out = {}
for name, (cwd, yaml) in json.loads(sys.argv[1]).items():
    os.chdir(cwd)
    try:
        data = check_det_dataset(yaml, autodownload=False)
        out[name] = [data[k] if isinstance(data[k], list) else [data[k]] for k in ("train", "val")]
    except Exception as e:  # ultralytics' refusal, of whatever type
        out[name] = type(e).__name__
print(json.dumps(out))
"""


def test_data_paths_resolve_as_ultralytics_own_check_resolves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each layout a data yaml may point at, resolved by ultralytics' check_det_dataset (in a child
    process with its settings here) and by ours: the same sources, or both refuse."""
    pytest.importorskip("ultralytics")  # the training install's (not a login node's)
    cfg, datasets, work = tmp_path / "cfg", tmp_path / "datasets", tmp_path / "work"
    (cfg / "Ultralytics").mkdir(parents=True)
    (cfg / "Ultralytics" / "settings.json").write_text(json.dumps({"datasets_dir": str(datasets)}))
    names = "names:\n  0: a\n"
    cases: dict[str, tuple[Path, Path]] = {}

    def case(name: str, yaml_text: str, folders: list[Path], cwd: Path = work) -> None:
        for folder in folders:
            touch(folder, ["1.jpg"])
        yaml = tmp_path / "yamls" / name / "data.yaml"
        yaml.parent.mkdir(parents=True, exist_ok=True)
        yaml.write_text(yaml_text + names)
        cwd.mkdir(parents=True, exist_ok=True)
        cases[name] = (cwd, yaml)

    case("absolute", f"path: {tmp_path / 'abs'}\ntrain: images\nval: images\n", [tmp_path / "abs/images"])
    case("working folder", "path: here\ntrain: images\nval: images\n", [work / "here/images"])
    case("datasets_dir", "path: there\ntrain: images\nval: images\n", [datasets / "there/images"])
    case("both", "path: twice\ntrain: images\nval: images\n", [work / "twice/images", datasets / "twice/images"])
    case("no path", "train: images\nval: images\n", [tmp_path / "yamls/no path/images"])
    case(
        "beside the yaml only",
        "path: mine\ntrain: images\nval: images\n",
        [tmp_path / "yamls/beside the yaml only/mine/images"],
    )
    case("../ fallback", f"path: {tmp_path / 'dd'}\ntrain: ../images\nval: images\n", [tmp_path / "dd/images"])
    case("lists", f"path: {tmp_path / 'li'}\ntrain: [a, b]\nval: [b]\n", [tmp_path / "li/a", tmp_path / "li/b"])
    txt = tmp_path / "tx/train.txt"
    touch(tmp_path / "tx/images", ["1.jpg"])
    txt.write_text("./images/1.jpg\n")
    case("txt list", f"path: {tmp_path / 'tx'}\ntrain: train.txt\nval: images\n", [])

    env = {**os.environ, "YOLO_CONFIG_DIR": str(cfg), "YOLO_OFFLINE": "1"}
    arg = json.dumps({n: [str(c), str(y)] for n, (c, y) in cases.items()})
    res = subprocess.run([sys.executable, "-c", ULTRALYTICS_RESOLVES, arg], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    for name, (cwd, yaml) in cases.items():
        monkeypatch.chdir(cwd)
        try:
            got = dataset.resolve_sources(yaml, str(cfg))
            ours: object = [[str(p) for p in got["train"]], [str(p) for p in got["val"]]]
        except UsageError:
            ours = "refused"
        assert (theirs[name] == ours) or (ours == "refused" and isinstance(theirs[name], str)), (
            name,
            theirs[name],
            ours,
        )
    assert isinstance(theirs["beside the yaml only"], str)  # ultralytics refuses it: so do we
