"""ultralytics' datasets and weights for compute nodes without the network.

A job finds them where its ultralytics looks: the site's shared ``stage.datasets_dir`` and
``stage.weights_dir`` where the config sets them, else the user's own ultralytics settings. A plan
whose named dataset (``coco8-seg.yaml``, ``mnist160``) or released weights (``yolo11n.pt``) are not
there would download them when the job starts, which an offline node cannot: the login node says
which, and ``slurm-yolo stage`` fetches them there.

ultralytics reads those folders from ``settings.json`` in ``$YOLO_CONFIG_DIR/Ultralytics``, once, when
it is imported, and each DDP worker it spawns imports it afresh: a settings folder of the process's
own, named in the environment, is the one way all of a job's processes see the same folders. It
holds a copy of the user's settings with the two folders replaced; her own file is never changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core import dataset, spec
from slurm_yolo.core.config import StageSettings

# What the job script exports for the launcher: the site's folders (absent: the user's own settings).
ENV_DATASETS = "SLURM_YOLO_DATASETS_DIR"
ENV_WEIGHTS = "SLURM_YOLO_WEIGHTS_DIR"
GITHUB = "https://github.com/"  # where ultralytics' datasets and weights are released (its ASSETS_URL)


class Places(NamedTuple):
    """Where a job's ultralytics finds datasets and weights."""

    datasets: Path
    weights: Path


class Unstaged(NamedTuple):
    """A dataset or weights a job would have to download: its name, as ``slurm-yolo stage`` takes
    it, and the folder it is not in; or weights there that are not to be trusted (``foreign``)."""

    name: str
    folder: Path
    foreign: str = ""  # why the file there is not loaded: another user's, or a link


def places(settings: StageSettings, yolo_config_dir: str, workdir: Path) -> Places:
    """The site's folders, else the user's ultralytics settings' (a relative one, and ultralytics'
    defaults where she has no settings, from the job's work dir)."""

    def folder(key: str, site: str) -> Path:
        if site:
            return Path(site)
        own = dataset.ultralytics_folder(key, yolo_config_dir) or Path(key.removesuffix("_dir"))
        return workdir / own.expanduser()

    return Places(folder("datasets_dir", settings.datasets_dir), folder("weights_dir", settings.weights_dir))


def job_environment(settings: StageSettings) -> dict[str, str]:
    """What a job script exports so that its ultralytics uses the site's folders (none set: nothing)."""
    named = {ENV_DATASETS: settings.datasets_dir, ENV_WEIGHTS: settings.weights_dir}
    return {k: v for k, v in named.items() if v}


def is_weights_name(value: object) -> bool:
    """Weights named the way ultralytics downloads them (``yolo11n.pt``): a bare file name, not a path."""
    return isinstance(value, str) and value.endswith(".pt") and "/" not in value and not value.startswith("~")


def dataset_name(data: object) -> str | None:
    """The name ``slurm-yolo stage`` takes for ``data=``, when ultralytics would download it by that
    name: one of its bundled data yamls, or a classification dataset it fetches by name (mnist160).
    None for anything else: the user's own files, which there is nothing to fetch for."""
    if not isinstance(data, str):
        return None
    return dataset.builtin_name(data) or (data if data in dataset.CLASSIFY else None)


def dataset_staged(name: str, folders: tuple[Path, ...]) -> bool:
    """Whether ultralytics finds dataset ``name`` in one of ``folders`` (the work dir, the datasets
    folder): a bundled yaml's ``path:`` with its val split, or a classification folder."""
    entry = dataset.BUILTIN.get(name)
    for base in folders:
        try:
            if entry is None:
                if (base / name).is_dir():
                    return True
            elif (base / entry.root).is_dir():  # ultralytics takes the first that exists, whole or not
                return all((base / entry.root / v).exists() for v in entry.val)
        except (OSError, ValueError):
            continue
    return False


def unstaged(s: spec.TrainSpec, where: Places, workdir: Path) -> list[Unstaged]:
    """The plan's dataset and weights that its job would download (ultralytics looks in the work dir
    first, then in its folders)."""
    out = []
    name = dataset_name(s.get("data"))
    if name is not None and not dataset_staged(name, (workdir, where.datasets)):
        out.append(Unstaged(name, where.datasets))
    for value in (s.model, s.args.get("pretrained")):
        if not is_weights_name(value) or _is_file(workdir / str(value)):  # her own folder: her own files
            continue
        foreign = untrusted(where.weights / str(value), os.getuid())
        if foreign or not _is_file(where.weights / str(value)):
            out.append(Unstaged(str(value), where.weights, foreign))
    return list(dict.fromkeys(out))


def untrusted(path: Path, uid: int) -> str:
    """Why weights at ``path`` in a shared folder are not to be loaded ('' when absent, or a plain file
    of root's or ``uid``'s): a .pt file is a pickle, so a job that loads another user's runs her code."""
    try:
        st = path.lstat()
    except (OSError, ValueError):
        return ""
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    if not stat.S_ISREG(st.st_mode):
        return "not a plain file"
    if st.st_uid not in (0, uid):
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = f"uid {st.st_uid}"
        return f"{owner}'s"
    return ""


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def stage_command(missing: list[Unstaged]) -> str:
    """The one command that fetches them all (a weights name is the user's own words: quoted)."""
    return "slurm-yolo stage " + " ".join(shlex.quote(m.name) for m in missing)


def unstaged_line(missing: list[Unstaged]) -> str:
    """One line naming what the offline nodes would lack, where, and the command that stages it."""
    foreign = [m for m in missing if m.foreign]
    if foreign:  # restaging would not help: the file stands in its place
        m = foreign[0]
        return (
            f"{m.folder / m.name} is {m.foreign}, not staged by you or root: a job would load it as code;"
            " ask your admin to remove it (then stage it), or give model= a path of your own"
        )
    parts = [f"{m.name} is not in {m.folder}" for m in missing]
    them = "them" if len(missing) > 1 else "it"
    return (
        f"{'; '.join(parts)}, and the compute nodes have no network to download {them}: stage {them} first"
        f" with `{stage_command(missing)}` (on a login node)"
    )


def mirrored(url: str, mirror: str) -> str:
    """A GitHub URL on the site's mirror (path for path); another URL, or no mirror, as it is."""
    if mirror and url.startswith(GITHUB):
        return f"{mirror.rstrip('/')}/{url.removeprefix(GITHUB)}"
    return url


@contextlib.contextmanager
def ultralytics_folders(datasets: str, weights: str, yolo_config_dir: str = "") -> Iterator[Path | None]:
    """For as long as the block runs, this process's ultralytics (imported after it starts) and its
    children's use ``datasets`` and ``weights``: a private ``YOLO_CONFIG_DIR`` holding the user's
    settings with those two replaced, and links to her fonts (ultralytics would download one that
    is missing). Nothing to replace: nothing changes (None)."""
    if not (datasets or weights):
        yield None
        return
    values = dataset.ultralytics_settings(yolo_config_dir)
    values |= {k: v for k, v in (("datasets_dir", datasets), ("weights_dir", weights)) if v}
    own = dataset.settings_file(yolo_config_dir).parent
    folder = Path(tempfile.mkdtemp(prefix="slurm-yolo-ultralytics-"))
    before = os.environ.get("YOLO_CONFIG_DIR")
    try:
        (folder / "Ultralytics").mkdir()
        (folder / "Ultralytics" / "settings.json").write_text(json.dumps(values, indent=2))
        with contextlib.suppress(OSError):
            for font in own.glob("*.ttf"):
                (folder / "Ultralytics" / font.name).symlink_to(font)
        os.environ["YOLO_CONFIG_DIR"] = str(folder)
        yield folder
    finally:
        if before is None:
            os.environ.pop("YOLO_CONFIG_DIR", None)
        else:
            os.environ["YOLO_CONFIG_DIR"] = before
        shutil.rmtree(folder, ignore_errors=True)
