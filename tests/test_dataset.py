"""Counting images from ultralytics data yamls, and the count cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurm_yolo import dataset
from slurm_yolo.errors import UsageError


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


def test_relative_path_prefix_resolves_from_the_yaml(tmp_path: Path) -> None:
    touch(tmp_path / "sets/ds/images", ["1.jpg", "2.jpg"])
    (tmp_path / "sets/cfg").mkdir(parents=True)
    y = tmp_path / "sets/cfg/data.yaml"
    y.write_text("path: ../ds\ntrain: images\nval: images\n")
    assert dataset.count(y).train == 2


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
    from slurm_yolo import dataset as ds

    c = ds.count(dataset)
    assert (c.train, c.val) == (16, 8)
