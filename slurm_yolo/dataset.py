"""Counting a dataset's images from its ultralytics data yaml, fast and cached.

Sources follow ultralytics' rules: ``train``/``val`` may be a folder (searched recursively), a ``.txt``
list of image paths (``./`` relative to the list), or a list of those; relative entries resolve
against ``path:``, which itself resolves like ultralytics (its datasets_dir, then the yaml's folder).
Counts are cached per source by path and the mtimes of the folder and its direct subfolders, so a
120k-image dataset is scanned once (os.scandir, no stat per file) and is instant afterwards. The
yaml's resolved sources are cached by its own mtime too: a warm count imports no YAML parser.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from .errors import UsageError

# ultralytics.data.utils.IMG_FORMATS (8.4.190)
IMG_SUFFIXES = frozenset(
    {"avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp"}
)


class DatasetCounts(NamedTuple):
    """Images per split of one data yaml."""

    yaml_path: str
    train: int
    val: int


def _is_image(name: str) -> bool:
    return name.rpartition(".")[2].lower() in IMG_SUFFIXES


def count_dir(path: str) -> int:
    """Images anywhere under ``path`` (os.scandir, no per-file stat)."""
    total = 0
    stack = [path]
    try:
        st = os.stat(path)
        seen = {(st.st_dev, st.st_ino)}
    except OSError:
        return 0
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir():
                        st = entry.stat()
                        if (st.st_dev, st.st_ino) not in seen:  # symlink loops
                            seen.add((st.st_dev, st.st_ino))
                            stack.append(entry.path)
                    elif _is_image(entry.name):
                        total += 1
        except (PermissionError, FileNotFoundError, NotADirectoryError):
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
    """mtimes of the source and its direct subfolders: what changes when images are added or removed."""
    st = path.stat()
    marks = [st.st_mtime, float(st.st_size) if path.is_file() else 0.0]
    if path.is_dir():
        with os.scandir(path) as it:
            marks += sorted(e.stat().st_mtime for e in it if e.is_dir())
    return marks


class CountCache:
    """A JSON file of counts per source, written atomically; a broken cache is just a cold one."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, Any] = {}
        self.dirty = False
        if path and path.exists():
            try:
                self.entries = json.loads(path.read_text())
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


def _datasets_dir() -> Path | None:
    """ultralytics' settings datasets_dir, read without importing ultralytics."""
    base = os.environ.get("YOLO_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".config")
    try:
        settings = json.loads((Path(base) / "Ultralytics" / "settings.json").read_text())
        return Path(settings["datasets_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _root(data: dict[str, Any], yaml_path: Path) -> Path:
    raw = data.get("path")
    if not raw:
        return yaml_path.parent
    root = Path(str(raw)).expanduser()
    if root.is_absolute():
        return root
    for base in (_datasets_dir(), yaml_path.parent, Path.cwd()):
        if base is not None and (base / root).exists():
            return (base / root).resolve()
    return (yaml_path.parent / root).resolve()


def _sources(value: Any, root: Path, split: str, yaml_path: Path) -> list[Path]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise UsageError(f"data {yaml_path}: '{split}' must be a path or a list of paths")
        p = Path(item).expanduser()
        if not p.is_absolute():
            p = root / p
            if not p.exists() and item.startswith("../"):
                p = root / item[3:]  # ultralytics' own fallback
        if not p.exists():
            raise UsageError(f"data {yaml_path}: {split} path {p} does not exist")
        out.append(p.resolve())
    return out


def load_yaml(yaml_path: Path) -> dict[str, Any]:
    """The data yaml as a mapping, or one clear error."""
    import yaml  # only on a cache miss: the parser costs the login path ~20 ms

    if not yaml_path.is_file():
        raise UsageError(f"data yaml {yaml_path} not found")
    try:
        data = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"data yaml {yaml_path} is not readable YAML: {reason}") from None
    if not isinstance(data, dict):
        raise UsageError(f"data yaml {yaml_path} is not a mapping")
    return data


def resolve_sources(yaml_path: Path) -> dict[str, list[Path]]:
    """The train and val sources a data yaml names, resolved like ultralytics and checked to exist."""
    data = load_yaml(yaml_path)
    for split in ("train", "val"):
        if not data.get(split):
            raise UsageError(f"data {yaml_path}: no '{split}' entry")
    root = _root(data, yaml_path)
    return {split: _sources(data[split], root, split, yaml_path) for split in ("train", "val")}


def count(yaml_path: str | Path, cache_path: Path | None = None) -> DatasetCounts:
    """Train and val image counts of a data yaml (cached in ``cache_path``)."""
    yaml_path = Path(yaml_path).expanduser().resolve()
    if not yaml_path.is_file():
        raise UsageError(f"data yaml {yaml_path} not found")
    cache = CountCache(cache_path)
    counts = {}
    try:
        try:
            splits = cache.sources(yaml_path)
            if splits is not None:
                counts = {split: sum(cache.count(s) for s in paths) for split, paths in splits.items()}
        except OSError:
            splits = None  # a cached source vanished: resolve again, and say which
        if splits is None:
            splits = resolve_sources(yaml_path)
            counts = {split: sum(cache.count(s) for s in paths) for split, paths in splits.items()}
            cache.remember_sources(yaml_path, splits)
    finally:
        cache.save()
    if counts["train"] == 0:
        raise UsageError(f"data {yaml_path}: the train split has 0 images")
    return DatasetCounts(yaml_path=str(yaml_path), train=counts["train"], val=counts["val"])
