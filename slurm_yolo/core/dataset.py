"""Counting a dataset's images from its ultralytics data yaml, fast and cached.

``data=`` resolves as ultralytics resolves it: an existing file first, else one of ultralytics' bundled
datasets by name (``coco8.yaml``, or ``coco8``), counted where ultralytics keeps it (``./coco8``, else
its settings' ``datasets_dir``) or, not downloaded there, taken from the sizes its yaml publishes.
Sources follow ultralytics' rules: ``train``/``val`` may be a folder (searched recursively), a ``.txt``
list of image paths (``./`` relative to the list), or a list of those; relative entries resolve
against ``path:``, which itself resolves like ultralytics (the working folder, then its datasets_dir).
Counts are cached per source by path and the mtimes of the folder and its direct subfolders, so a
120k-image dataset is scanned once (os.scandir, no stat per file) and is instant afterwards. The
yaml's resolved sources are cached by its own mtime too: a warm count imports no YAML parser.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core.errors import UsageError

# ultralytics.data.utils.IMG_FORMATS (8.4.190)
IMG_SUFFIXES = frozenset(
    {"avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp"}
)


class DatasetCounts(NamedTuple):
    """Images per split of one data yaml, and where the numbers came from (``--explain`` says)."""

    yaml_path: str
    train: int
    val: int
    source: str = ""
    folder: bool = False  # a classification folder, not a data yaml
    keypoints: bool = False  # the yaml names a kpt_shape (a pose dataset)


class Builtin(NamedTuple):
    """One of ultralytics' bundled datasets: its yaml's ``path:``, splits and published sizes."""

    root: str
    train: tuple[str, ...]
    val: tuple[str, ...]
    train_images: int
    val_images: int


# ultralytics 8.4.190's cfg/datasets/NAME.yaml (detect, segment, pose, obb): ``path``, ``train``, ``val``, and the
# image counts each split's comment publishes ("train images (relative to 'path') 118287 images"), which
# are the sizes of the datasets ultralytics downloads. tests/core/test_dataset.py checks every row against the
# installed yamls. xView publishes "90% / 10% of 847 train images" (ultralytics' random autosplit): 762 / 85.
BUILTIN: dict[str, Builtin] = {
    "Argoverse.yaml": Builtin(
        "Argoverse", ("Argoverse-1.1/images/train/",), ("Argoverse-1.1/images/val/",), 39384, 15062
    ),
    "GlobalWheat2020.yaml": Builtin(
        "GlobalWheat2020",
        tuple(f"images/{d}" for d in ("arvalis_1", "arvalis_2", "arvalis_3", "ethz_1", "rres_1", "inrae_1", "usask_1")),
        ("images/ethz_1",),
        3422,
        748,
    ),
    "HomeObjects-3K.yaml": Builtin("homeobjects-3K", ("images/train",), ("images/val",), 2285, 404),
    "Objects365.yaml": Builtin("Objects365", ("images/train",), ("images/val",), 1742289, 80000),
    "SKU-110K.yaml": Builtin("SKU-110K", ("train.txt",), ("val.txt",), 8219, 588),
    "TT100K.yaml": Builtin("TT100K", ("images/train",), ("images/val",), 6105, 7641),
    "VOC.yaml": Builtin(
        "VOC",
        ("images/train2012", "images/train2007", "images/val2012", "images/val2007"),
        ("images/test2007",),
        16551,
        4952,
    ),
    "VisDrone.yaml": Builtin("VisDrone", ("images/train",), ("images/val",), 6471, 548),
    "african-wildlife.yaml": Builtin("african-wildlife", ("images/train",), ("images/val",), 1052, 225),
    "brain-tumor.yaml": Builtin("brain-tumor", ("images/train",), ("images/val",), 893, 223),
    "coco.yaml": Builtin("coco", ("train2017.txt",), ("val2017.txt",), 118287, 5000),
    "coco128.yaml": Builtin("coco128", ("images/train2017",), ("images/train2017",), 128, 128),
    "coco12-formats.yaml": Builtin("coco12-formats", ("images/train",), ("images/val",), 6, 6),
    "coco8.yaml": Builtin("coco8", ("images/train",), ("images/val",), 4, 4),
    "coco8-grayscale.yaml": Builtin("coco8-grayscale", ("images/train",), ("images/val",), 4, 4),
    "coco8-multispectral.yaml": Builtin("coco8-multispectral", ("images/train",), ("images/val",), 4, 4),
    "construction-ppe.yaml": Builtin("construction-ppe", ("images/train",), ("images/val",), 1132, 143),
    "kitti.yaml": Builtin("kitti", ("images/train",), ("images/val",), 5985, 1496),
    "lvis.yaml": Builtin("lvis", ("train.txt",), ("val.txt",), 100170, 19809),
    "medical-pills.yaml": Builtin("medical-pills", ("images/train",), ("images/val",), 92, 23),
    "open-images-v7.yaml": Builtin("open-images-v7", ("images/train",), ("images/val",), 1743042, 41620),
    "signature.yaml": Builtin("signature", ("images/train",), ("images/val",), 143, 35),
    "xView.yaml": Builtin("xView", ("images/autosplit_train.txt",), ("images/autosplit_val.txt",), 762, 85),
    # segment, pose and OBB (ultralytics picks the task's model for them; the counts as published)
    "DOTAv1.5.yaml": Builtin("DOTAv1.5", ("images/train",), ("images/val",), 1411, 458),
    "DOTAv1.yaml": Builtin("DOTAv1", ("images/train",), ("images/val",), 1411, 458),
    "carparts-seg.yaml": Builtin("carparts-seg", ("images/train",), ("images/val",), 3156, 401),
    "coco-pose.yaml": Builtin("coco-pose", ("train2017.txt",), ("val2017.txt",), 56599, 2346),
    "coco128-seg.yaml": Builtin("coco128-seg", ("images/train2017",), ("images/train2017",), 128, 128),
    "coco8-pose.yaml": Builtin("coco8-pose", ("images/train",), ("images/val",), 4, 4),
    "coco8-seg.yaml": Builtin("coco8-seg", ("images/train",), ("images/val",), 4, 4),
    "crack-seg.yaml": Builtin("crack-seg", ("images/train",), ("images/val",), 3717, 200),
    "dog-pose.yaml": Builtin("dog-pose", ("images/train",), ("images/val",), 6773, 1703),
    "dota128.yaml": Builtin("dota128", ("images/train",), ("images/train",), 128, 128),
    "dota8-multispectral.yaml": Builtin("dota8-multispectral", ("images/train",), ("images/val",), 4, 4),
    "dota8.yaml": Builtin("dota8", ("images/train",), ("images/val",), 4, 4),
    "hand-keypoints.yaml": Builtin("hand-keypoints", ("images/train",), ("images/val",), 18776, 7992),
    "package-seg.yaml": Builtin("package-seg", ("images/train",), ("images/val",), 1920, 188),
    "tiger-pose.yaml": Builtin("tiger-pose", ("images/train",), ("images/val",), 210, 53),
    # semantic segmentation and depth (8.4's newer tasks). ade20k.yaml publishes no counts: ADE20K's
    # SceneParsing release (ADEChallengeData2016) has 20,210 training and 2,000 validation images.
    "ade20k.yaml": Builtin("ADEChallengeData2016", ("images/training",), ("images/validation",), 20210, 2000),
    "cityscapes.yaml": Builtin("cityscapes", ("images/train",), ("images/val",), 2975, 500),
    "cityscapes8.yaml": Builtin("cityscapes8", ("images/train",), ("images/val",), 4, 4),
    "depth-arkitscenes.yaml": Builtin("depth-arkitscenes", ("images/train",), ("images/val",), 676080, 21559),
    "depth-diode.yaml": Builtin("depth-diode", ("images/train",), ("images/val",), 25458, 771),
    "depth-hypersim.yaml": Builtin("depth-hypersim", ("images/train",), ("images/val",), 68242, 6377),
    "depth-kitti.yaml": Builtin("depth-kitti", ("images/train",), ("images/val",), 55198, 652),
    "depth-sunrgbd.yaml": Builtin("depth-sunrgbd", ("images/train",), ("images/val",), 9245, 1090),
    "depth-tartanair.yaml": Builtin("depth-tartanair", ("images/train",), ("images/val",), 55660, 5810),
    "depth-vkitti2.yaml": Builtin("depth-vkitti2", ("images/train",), ("images/val",), 25780, 16740),
    "depth8.yaml": Builtin("depth8-png", ("images/train",), ("images/val",), 4, 4),
    "nyu-depth.yaml": Builtin("nyu-depth-png", ("images/train",), ("images/val",), 795, 654),
}
UNPUBLISHED_COUNTS = frozenset({"ade20k.yaml"})  # the sizes come from the dataset's own release, not the yaml
# ultralytics' yaml of the ImageNet classification folder: its classify trainer reads a folder, data=imagenet
CLASSIFY_YAMLS = {"ImageNet.yaml": "imagenet"}


class Published(NamedTuple):
    """A classification dataset ultralytics downloads by name (a folder of train/ and val/ or test/ class
    folders, fetched as ``NAME.zip`` from its assets), and the sizes its docs publish."""

    train_images: int
    val_images: int
    source: str


# ultralytics 8.4's classification datasets (docs/en/datasets/classify/), by the names its check_cls_dataset
# downloads: train and val (or test) images as published. Caltech-101/256 come without splits: ultralytics
# splits them 80/20 (data/split.py) from the 9,146 and 30,607 images Caltech publishes.
CLASSIFY: dict[str, Published] = {
    "mnist160": Published(80, 80, "ultralytics' docs: the first 8 images of each digit from MNIST's train and test"),
    "imagenet10": Published(10, 10, "ultralytics' docs: the first train and val image of ImageNet's first 10 classes"),
    "imagenette": Published(9469, 3925, "Imagenette's published splits (fast.ai imagenette2)"),
    "imagenette160": Published(9469, 3925, "Imagenette's published splits (fast.ai imagenette2-160)"),
    "imagenette320": Published(9469, 3925, "Imagenette's published splits (fast.ai imagenette2-320)"),
    "imagewoof": Published(9025, 3929, "Imagewoof's published splits (fast.ai imagewoof2)"),
    "imagewoof160": Published(9025, 3929, "Imagewoof's published splits (fast.ai imagewoof2-160)"),
    "imagewoof320": Published(9025, 3929, "Imagewoof's published splits (fast.ai imagewoof2-320)"),
    "cifar10": Published(50000, 10000, "ultralytics' docs: 50,000 train and 10,000 test images"),
    "cifar100": Published(50000, 10000, "ultralytics' docs: 50,000 train and 10,000 test images"),
    "fashion-mnist": Published(60000, 10000, "ultralytics' docs: 60,000 train and 10,000 test images"),
    "mnist": Published(60000, 10000, "ultralytics' docs: 60,000 train and 10,000 test images"),
    "caltech101": Published(7317, 1829, "9,146 images as Caltech publishes them, split 80/20 by ultralytics"),
    "caltech256": Published(24486, 6121, "30,607 images as Caltech publishes them, split 80/20 by ultralytics"),
    "imagenet": Published(1281167, 50000, "ImageNet-1k's published train and val (ultralytics' ImageNet.yaml)"),
}


def _is_image(name: str) -> bool:
    return name.rpartition(".")[2].lower() in IMG_SUFFIXES


@cache
def _pseudo_devices() -> frozenset[int]:
    """The devices of /proc and /sys: kernel files, never images, and endless to walk (/proc/PID/root is /)."""
    devices = set()
    for path in ("/proc", "/sys"):
        with contextlib.suppress(OSError):
            devices.add(os.stat(path).st_dev)
    return frozenset(devices)


def _stat(path: Path, what: str) -> os.stat_result | None:
    """``path``'s status, links followed; None when it does not exist. A symlink loop, a name too long or
    a folder that may not be searched is one line naming ``what``, not a traceback."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise UsageError(f"{what} {path}: {(e.strerror or type(e).__name__).lower()}") from None
    except ValueError:  # an embedded NUL: the spec refuses those, a yaml's own entries may hold one
        raise UsageError(f"{what} {path!r} is not a valid path") from None


def count_dir(path: str) -> int:
    """Images anywhere under ``path`` (os.scandir, no per-file stat). Entries that cannot be followed
    (symlink loops, dangling or unreadable folders) and kernel pseudo-filesystems are skipped."""
    total = 0
    stack = [path]
    try:
        st = os.stat(path)
        seen = {(st.st_dev, st.st_ino)}
    except OSError:
        return 0
    pseudo = _pseudo_devices()
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir():
                            st = entry.stat()
                            if (st.st_dev, st.st_ino) not in seen and st.st_dev not in pseudo:  # symlink loops
                                seen.add((st.st_dev, st.st_ino))
                                stack.append(entry.path)
                        elif _is_image(entry.name):
                            total += 1
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def count_list(path: Path) -> int:
    """Images named in an ultralytics ``.txt`` list."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip() and _is_image(line.strip()))
    except OSError as e:
        raise UsageError(f"cannot read image list {path}: {e.strerror}") from None


def _fingerprint(path: Path) -> list[float]:
    """mtimes of the source and its direct subfolders: what changes when images are added or removed.
    A source that became something else than a folder or a list (a FIFO would block the count) is refused."""
    st = path.stat()
    if stat.S_ISREG(st.st_mode):
        return [st.st_mtime, float(st.st_size)]
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is neither a folder nor an image list")
    marks = [st.st_mtime, 0.0]
    with os.scandir(path) as it:
        for e in it:
            try:
                if e.is_dir():
                    marks.append(e.stat().st_mtime)
            except OSError:
                continue  # a symlink loop: count_dir skips it too
    return marks[:2] + sorted(marks[2:])


class CountCache:
    """A JSON file of counts per source, written atomically; a broken cache is just a cold one."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, Any] = {}
        self.dirty = False
        if path:
            try:  # a cache another user's HOME holds (sudo, runuser) is one we may not even stat
                loaded = json.loads(path.read_text())
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self.entries = {}

    def sources(self, yaml_path: Path) -> dict[str, list[Path]] | None:
        """The splits' resolved sources recorded for this yaml, if it has not changed since."""
        hit = self.entries.get(f"yaml:{yaml_path}")
        st = yaml_path.stat()
        if isinstance(hit, dict) and hit.get("marks") == [st.st_mtime, st.st_size]:
            return {split: [Path(p) for p in paths] for split, paths in hit["splits"].items()}
        return None

    def remember_sources(self, yaml_path: Path, splits: dict[str, list[Path]]) -> None:
        st = yaml_path.stat()
        self.entries[f"yaml:{yaml_path}"] = {
            "marks": [st.st_mtime, st.st_size],
            "splits": {split: [str(p) for p in paths] for split, paths in splits.items()},
        }
        self.dirty = True

    def count(self, source: Path) -> int:
        key = str(source)
        marks = _fingerprint(source)
        hit = self.entries.get(key)
        if isinstance(hit, dict) and hit.get("marks") == marks:
            return int(hit["count"])
        n = count_dir(key) if source.is_dir() else count_list(source)
        self.entries[key] = {"marks": marks, "count": n}
        self.dirty = True
        return n

    def save(self) -> None:
        if not (self.path and self.dirty):
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(self.entries, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home must not stop a submission


def settings_file(yolo_config_dir: str = "") -> Path:
    """ultralytics' settings.json as its get_user_config_dir finds it on Linux: the job's YOLO_CONFIG_DIR
    (``job.yolo_config_dir``), else $YOLO_CONFIG_DIR, else $XDG_CONFIG_HOME or ~/.config."""
    base = (
        yolo_config_dir
        or os.environ.get("YOLO_CONFIG_DIR")
        or os.environ.get("XDG_CONFIG_HOME")
        or os.path.join(os.path.expanduser("~"), ".config")
    )
    return Path(base).expanduser() / "Ultralytics" / "settings.json"


def ultralytics_settings(yolo_config_dir: str = "") -> dict[str, Any]:
    """ultralytics' settings.json, read without importing ultralytics (1.5 s on a login node); {} when
    there is none. Only a small regular file is read: a FIFO left in its place must not block the submission."""
    path = settings_file(yolo_config_dir)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return {}
        values = json.loads(path.read_text(encoding="utf-8"))
        return values if isinstance(values, dict) else {}
    except (OSError, ValueError):
        return {}


def ultralytics_folder(key: str, yolo_config_dir: str = "") -> Path | None:
    """One of ultralytics' settings folders (``datasets_dir``, ``weights_dir``), or None when unset."""
    value = ultralytics_settings(yolo_config_dir).get(key)
    return Path(value) if isinstance(value, str) and value else None


def _datasets_dir(yolo_config_dir: str = "") -> Path | None:
    """ultralytics' settings datasets_dir."""
    return ultralytics_folder("datasets_dir", yolo_config_dir)


def _root(data: dict[str, Any], yaml_path: Path, yolo_config_dir: str = "") -> Path:
    """The dataset's root as ultralytics' ``check_det_dataset`` takes it: an absolute ``path:``; a
    relative one from the working folder where it is there, else under ultralytics' datasets_dir
    (which, with no settings file yet, ultralytics makes ``./datasets``), never beside the yaml; no
    ``path:``, the yaml's folder. tests/core/test_dataset.py holds the two equal."""
    raw = data.get("path")
    if not raw:
        return yaml_path.parent
    try:
        root = Path(str(raw)).expanduser()
    except RuntimeError:  # ~user that does not exist
        root = Path(str(raw))
    if root.is_absolute():
        return root
    if _stat(Path.cwd() / root, f"data {yaml_path}: path") is not None:
        return Path(os.path.realpath(Path.cwd() / root))
    return Path(os.path.realpath((_datasets_dir(yolo_config_dir) or Path.cwd() / "datasets") / root))


def _sources(value: Any, root: Path, split: str, yaml_path: Path) -> list[Path]:
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    what = f"data {yaml_path}: {split} path"
    for item in items:
        if not isinstance(item, str) or not item:
            raise UsageError(f"data {yaml_path}: '{split}' must be a path or a list of paths")
        try:
            p = Path(item).expanduser()
        except RuntimeError:  # ~user that does not exist
            p = Path(item)
        if not p.is_absolute():
            p = root / p
            if _stat(p, what) is None and item.startswith("../") and isinstance(value, str):
                p = root / item[3:]  # ultralytics' own fallback (for one path, not a list)
        st = _stat(p, what)
        if st is None:
            raise UsageError(f"{what} {p} does not exist")
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise UsageError(f"{what} {p} is neither a folder nor an image list")
        if st.st_dev in _pseudo_devices():
            raise UsageError(f"{what} {p} is a kernel pseudo-filesystem, not images")
        out.append(Path(os.path.realpath(p)))
    return out


MAX_DATA_YAML_CHARS = 4 << 20  # a data yaml names folders and classes: a bigger one is no dataset's (read as root)


def load_yaml(yaml_path: Path) -> dict[str, Any]:
    """The data yaml as a mapping, or one clear error."""
    import yaml  # only on a cache miss: the parser costs the login path ~20 ms

    if not yaml_path.is_file():
        raise UsageError(f"data yaml {yaml_path} not found")
    try:
        with yaml_path.open(encoding="utf-8") as f:
            text = f.read(MAX_DATA_YAML_CHARS + 1)
        if len(text) > MAX_DATA_YAML_CHARS:
            raise UsageError(f"data yaml {yaml_path} is longer than any dataset's ({MAX_DATA_YAML_CHARS} characters)")
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"data yaml {yaml_path} is not readable YAML: {reason}") from None
    if not isinstance(data, dict):
        raise UsageError(f"data yaml {yaml_path} is not a mapping")
    return data


def resolve_sources(yaml_path: Path, yolo_config_dir: str = "") -> dict[str, list[Path]]:
    """The train and val sources a data yaml names, resolved like ultralytics and checked to exist."""
    data = load_yaml(yaml_path)
    for split in ("train", "val"):
        if not data.get(split):
            raise UsageError(f"data {yaml_path}: no '{split}' entry")
    root = _root(data, yaml_path, yolo_config_dir)
    try:
        return {split: _sources(data[split], root, split, yaml_path) for split in ("train", "val")}
    except UsageError as e:
        raw = str(data.get("path") or "")
        if not raw or Path(raw).expanduser().is_absolute() or not str(e).endswith("does not exist"):
            raise
        raise UsageError(
            f"{e} (ultralytics takes a relative path: {raw} from the working folder, else from its datasets_dir,"
            " not from the yaml's folder: give an absolute path:, or submit from the folder that holds it)"
        ) from None


def _yaml_file(data: str) -> Path | None:
    """``data=`` as an existing file (absolute, links resolved), or None when there is none by that name."""
    try:
        path = Path(data).expanduser()
    except RuntimeError:  # ~user that does not exist
        path = Path(data)
    st = _stat(path, "data yaml")
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"data yaml {data} is not a regular file")
    return Path(os.path.realpath(path))


def _class_folder(data: str) -> Path | None:
    """``data=`` as an existing folder (a classification dataset, as ultralytics reads one), else None
    (a ``.yaml`` name that is a folder stays the yaml error it is)."""
    if data.endswith((".yaml", ".yml")):
        return None
    try:
        path = Path(data).expanduser()
    except RuntimeError:
        return None
    st = _stat(path, "data folder")
    return Path(os.path.realpath(path)) if st is not None and stat.S_ISDIR(st.st_mode) else None


def builtin_name(data: str) -> str | None:
    """The bundled dataset ``data=`` names, as ultralytics finds it (``coco8`` means ``coco8.yaml``)."""
    name = data if data.endswith((".yaml", ".yml")) else f"{data}.yaml"
    return name if name in BUILTIN else None


def _count_yaml(path: Path, cache: CountCache, yolo_config_dir: str) -> dict[str, int]:
    try:
        splits = cache.sources(path)
        if splits is not None:
            return {split: sum(cache.count(s) for s in paths) for split, paths in splits.items()}
    except OSError:
        pass  # a cached source vanished: resolve again, and say which
    splits = resolve_sources(path, yolo_config_dir)
    counts = {split: sum(cache.count(s) for s in paths) for split, paths in splits.items()}
    cache.remember_sources(path, splits)
    return counts


def _count_builtin(name: str, cache: CountCache, yolo_config_dir: str) -> tuple[dict[str, int], str]:
    """A bundled dataset where ultralytics would train on it (its ``path:`` under the working folder, else
    under datasets_dir), counted; else the sizes its yaml publishes."""
    from slurm_yolo.core.spec import ultralytics_cfg

    entry = BUILTIN[name]
    datasets = _datasets_dir(yolo_config_dir)
    for base, where in ((Path.cwd(), "the working folder"), (datasets, "ultralytics' datasets_dir")):
        if base is not None and _stat(base / entry.root, f"data {name}: path") is not None:
            root = Path(os.path.realpath(base / entry.root))
            splits = {
                split: _sources(value, root, split, Path(name))
                for split, value in (("train", entry.train), ("val", entry.val))
            }
            return {
                s: sum(cache.count(p) for p in paths) for s, paths in splits.items()
            }, f"counted in {root} ({where})"
    where = f"no {datasets / entry.root} yet" if datasets else f"no datasets_dir in {settings_file(yolo_config_dir)}"
    how = (
        f"ultralytics {ultralytics_cfg()['ultralytics']}'s published sizes ({where}: ultralytics downloads it"
        " when the job starts, which needs the network)"
    )
    return {"train": entry.train_images, "val": entry.val_images}, how


def count(data: str | Path, cache_path: Path | None = None, yolo_config_dir: str = "") -> DatasetCounts:
    """Train and val image counts of ``data=`` (cached in ``cache_path``), resolved as ultralytics would
    in a job whose YOLO_CONFIG_DIR is ``yolo_config_dir`` (empty: this environment's)."""
    text = str(data)
    folder = _class_folder(text)
    bare = "/" not in text and not text.endswith((".yaml", ".yml")) and builtin_name(text) is None
    if folder is None and bare and not Path(text).exists():
        datasets = _datasets_dir(yolo_config_dir)  # mnist160: a classify dataset where ultralytics keeps it
        folder = _class_folder(str(datasets / text)) if datasets is not None and text not in ("", ".", "..") else None
    if folder is not None:  # classify: a folder of train/ and val/ (or test/), each of class folders
        cache = CountCache(cache_path)
        try:
            counts = {s: cache.count(folder / s) if (folder / s).is_dir() else 0 for s in ("train", "val", "test")}
        finally:
            cache.save()
        if counts["train"] == 0:
            raise UsageError(f"data {folder}: a classification folder needs train/ (of class folders) with images")
        val = counts["val"] or counts["test"]
        return DatasetCounts(str(folder), counts["train"], val, "counted in its train/ and val/ class folders", True)
    if folder is None and bare and text in CLASSIFY:
        return _published_folder(text, yolo_config_dir)
    path = _yaml_file(text)
    if path is None and text in CLASSIFY_YAMLS:
        name = CLASSIFY_YAMLS[text]
        raise UsageError(
            f"data={text} is ultralytics' description of the {name} classification folder, which its classify"
            f" trainer does not read: give data={name}"
        )
    where = str(path) if path is not None else builtin_name(text)
    if where is None and bare and not Path(text).exists():
        raise UsageError(
            f"data={text}: no folder {text} in {os.getcwd()} or ultralytics' datasets_dir, and no size is known for"
            f" a dataset of that name (ultralytics would try to download {text}.zip from its assets when the job"
            f" starts); the classification datasets planned from published sizes: {', '.join(sorted(CLASSIFY))}"
        )
    if where is None:
        hint = "" if "/" in text else " (nor is it one of ultralytics' bundled datasets)"
        if not os.path.isabs(text):
            hint += f"; a relative path is read from the folder you submit in, {os.getcwd()}"
        raise UsageError(f"data yaml {text} not found{hint}")
    cache = CountCache(cache_path)
    try:
        if path is not None:
            counts, source = _count_yaml(path, cache, yolo_config_dir), "counted from its folders and lists"
        else:
            counts, source = _count_builtin(where, cache, yolo_config_dir)
    finally:
        cache.save()
    if counts["train"] == 0:
        raise UsageError(f"data {where}: the train split has 0 images")
    keypoints = where in KEYPOINT_DATASETS if path is None else _names_keypoints(path)
    return DatasetCounts(where, counts["train"], counts["val"], source, keypoints=keypoints)


def _published_folder(name: str, yolo_config_dir: str) -> DatasetCounts:
    """A classification dataset not downloaded yet, planned from its published sizes (ultralytics
    fetches it into its datasets_dir when the job starts, which needs the network)."""
    from slurm_yolo.core.spec import ultralytics_cfg

    entry = CLASSIFY[name]
    datasets = _datasets_dir(yolo_config_dir)
    where = f"no {datasets / name} yet" if datasets else f"no datasets_dir in {settings_file(yolo_config_dir)}"
    how = (
        f"ultralytics {ultralytics_cfg()['ultralytics']}'s published sizes ({entry.source}; {where}: ultralytics"
        " downloads it when the job starts, which needs the network)"
    )
    return DatasetCounts(name, entry.train_images, entry.val_images, how, folder=True)


KEYPOINT_DATASETS = frozenset(
    {"coco-pose.yaml", "coco8-pose.yaml", "dog-pose.yaml", "hand-keypoints.yaml", "tiger-pose.yaml"}
)
_KPT = re.compile(rb"^kpt_shape\s*:", re.MULTILINE)


def _names_keypoints(path: Path) -> bool:
    """Whether the data yaml has a top-level ``kpt_shape`` (read as text: no YAML parser on a warm path)."""
    try:
        with open(path, "rb") as f:
            return _KPT.search(f.read(1 << 20)) is not None
    except OSError:
        return False


# ultralytics 8.4.190's bundled datasets whose labels are polygons or rotated boxes; the others' are boxes.
SEGMENT_DATASETS = frozenset(
    {"carparts-seg.yaml", "coco128-seg.yaml", "coco8-seg.yaml", "crack-seg.yaml", "package-seg.yaml"}
)
OBB_DATASETS = frozenset({"DOTAv1.yaml", "DOTAv1.5.yaml", "dota128.yaml", "dota8.yaml", "dota8-multispectral.yaml"})
LABEL_SAMPLE = 8  # non-empty label files read (an image without one is a background image)
LABEL_LOOKS = 200  # directory entries looked at, at most: a 120k-image folder is not listed for this
LABEL_BYTES = 1 << 16


def _label_path(image: str) -> str:
    """ultralytics' ``img2label_paths``: the last ``/images/`` becomes ``/labels/``, the suffix ``.txt``."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(image.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


def _some_images(source: Path) -> list[str]:
    """A few image paths of a train source (a folder, searched breadth-first, or a ``.txt`` list), the
    way ultralytics names them; bounded, whatever the dataset's size."""
    if source.is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            with open(source, encoding="utf-8") as f:
                lines = [x.strip() for x in f.read(LABEL_BYTES).splitlines()[:LABEL_LOOKS] if x.strip()]
            parent = str(source.parent) + os.sep
            return [x.replace("./", parent, 1) if x.startswith("./") else x for x in lines]
        return []
    found: list[str] = []
    queue, looked = [source], 0
    while queue and looked < LABEL_LOOKS and len(found) < LABEL_LOOKS // 4:
        with contextlib.suppress(OSError), os.scandir(queue.pop(0)) as it:
            for entry in it:
                looked += 1
                if looked > LABEL_LOOKS:
                    break
                with contextlib.suppress(OSError):
                    if entry.is_dir():
                        queue.append(Path(entry.path))
                    elif entry.name.rpartition(".")[2].lower() in IMG_SUFFIXES:
                        found.append(entry.path)
    return found


def _label_rows(path: str) -> list[int] | None:
    """The number of values on each line of one label file (None: none there, or not a plain file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = f.read(LABEL_BYTES).decode("utf-8", "replace")
    return [len(line.split()) for line in text.splitlines() if line.strip()]


def box_labels(counts: DatasetCounts, yolo_config_dir: str = "") -> str:
    """A label file of the dataset that holds boxes alone (``class x y w h``: a detect dataset's), or ''.

    ultralytics refuses such a dataset for a segment or OBB model when the job starts ("requires equal
    numbers of boxes and segments"). A bundled dataset is known by its name; a user's is sampled: a
    few label files of its train split, found as ultralytics finds them."""
    name = Path(counts.yaml_path).name
    if counts.yaml_path in BUILTIN:
        return "" if name in SEGMENT_DATASETS | OBB_DATASETS else f"{name} (a detect dataset)"
    try:
        sources = resolve_sources(Path(counts.yaml_path), yolo_config_dir)["train"]
    except UsageError:
        return ""
    read = 0
    for source in sources:
        for label in map(_label_path, _some_images(source)):
            rows = _label_rows(label)
            if not rows:
                continue
            if all(n == 5 for n in rows):
                return label
            read += 1
            if read >= LABEL_SAMPLE:
                return ""
    return ""


def check_task(task: str, model: str, counts: DatasetCounts, yolo_config_dir: str = "") -> None:
    """Refuse, at submission, a model its data cannot train (ultralytics would fail in the job, after
    it started and was charged): a classify model needs a folder of class folders, every other model a
    data yaml, a pose model one with ``kpt_shape``, and a segment or OBB model labels that are more
    than boxes. ``task``: the model's (''; a custom model)."""
    if not task:
        return
    if task == "classify" and not counts.folder:
        raise UsageError(
            f"{model} is a classify model: data= must be a folder of train/ and val/ class folders, not {counts.yaml_path}"
        )
    if task != "classify" and counts.folder:
        raise UsageError(
            f"{model} is a {task} model: data= must be a data yaml ({counts.yaml_path} is a folder: a"
            " classification dataset, for a -cls model)"
        )
    if task == "pose" and not counts.keypoints:
        raise UsageError(
            f"{model} is a pose model: its data yaml needs kpt_shape (a pose dataset); {counts.yaml_path} has none"
        )
    if task in ("segment", "obb") and (boxes := box_labels(counts, yolo_config_dir)):
        wants, example = ("polygons", "coco8-seg.yaml") if task == "segment" else ("4 corners", "dota8.yaml")
        raise UsageError(
            f"{model} is a {task} model: its labels need {wants} (a {task} dataset, as {example}); {boxes} has"
            " boxes alone (class x y w h), which ultralytics refuses when the job starts"
        )
