"""``slurm-yolo stage``: ultralytics' datasets and weights fetched on a login node (which has the
network) into the folders the offline compute nodes' jobs read (``core/assets``).

The fetching is ultralytics' own (``check_det_dataset``, ``check_cls_dataset``,
``attempt_download_asset``: its URLs, archives, progress bars and unpacking), imported here alone,
never on yolo-sbatch's path. A dataset is unpacked in a private folder beside its place and renamed
into it whole, so a job never sees half of one and a second run finds it staged. The files are made
readable by every user (the jobs of whoever trains on them), and written as the user who runs the
command: it never changes identity. As root it stages into the site's folders only (an admin's copy
for everyone), never into root's own settings' folders, which no job reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core import assets, dataset
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError, UsageError

logger = logging.getLogger(__name__)
LOCK = ".slurm-yolo-stage.lock"
LOCK_WAIT = 1800  # seconds a stager waits for another (a COCO download takes minutes), then says so


class Staged(NamedTuple):
    """One name's outcome: where it is, and whether this run fetched it."""

    name: str
    path: Path
    fetched: bool


def _kind(name: str) -> tuple[str, str]:
    """The name as ultralytics knows it (``coco8`` is ``coco8.yaml``), and 'weights' or 'data'; one
    line for anything else."""
    if assets.is_weights_name(name):
        return name, "weights"
    known = assets.dataset_name(name)
    if known is not None:
        return known, "data"
    raise UsageError(
        f"{name!r}: give ultralytics' dataset names (coco8-seg.yaml, mnist160) or released weights"
        " (yolo11n.pt); a dataset or weights of your own are files already, with nothing to fetch"
    )


def _folder(path: Path, what: str, create: bool) -> None:
    """The target folder exists (made, for a user's own) and this user may write it."""
    if create:
        with contextlib.suppress(OSError):
            path.mkdir(parents=True, exist_ok=True)
    if not path.is_dir():
        raise UsageError(f"{what} {path} does not exist: ask your admin to make it (docs/admins.md, staging)")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(
            f"{what} {path} is not writable by you: ask your admin to let users write it (group-writable, or"
            " mode 1777 as /tmp), or to stage it"
        )


@contextlib.contextmanager
def _locked(folder: Path, say: Callable[[str], None]) -> Iterator[None]:
    """One stager at a time per folder (a second one waits, then finds the work done). The lock file
    lies in a folder users write: never a link, a FIFO or a device, and never waited on for ever (any
    user may hold a lock on a file she can open)."""
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}: not a lock file (a link?): ask your admin to remove it") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path} is not a plain file: ask your admin to remove it")
        deadline, told = time.monotonic() + LOCK_WAIT, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UsageError(
                        f"{folder}: another stager held its lock for {LOCK_WAIT // 60} min: try again later"
                    ) from None
                if not told:
                    say(f"waiting for another stager of {folder}")
                    told = True
                time.sleep(1)
        yield
    finally:
        os.close(fd)


def _readable(root: Path) -> None:
    """Every file and folder under ``root`` (this run's own, just made) readable by every user."""
    for path in (root, *root.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        extra = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        if stat.S_ISDIR(st.st_mode):
            extra |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        path.chmod(stat.S_IMODE(st.st_mode) | extra)


def _mirror(mirror: str) -> None:
    """ultralytics' downloads of GitHub URLs go to the site's mirror instead (every module that holds
    its ``safe_download``)."""
    if not mirror:
        return
    import ultralytics.data.utils as data_utils
    import ultralytics.utils.downloads as downloads

    original = downloads.safe_download

    def fetch(url: Any, *args: Any, **kwargs: Any) -> Any:
        return original(assets.mirrored(str(url), mirror), *args, **kwargs)

    downloads.safe_download = data_utils.safe_download = fetch  # type: ignore[assignment]


def _dataset(name: str, target: Path, scratch: Path) -> Staged:
    """Fetch dataset ``name`` (ultralytics unpacks it in ``scratch``, its datasets_dir for this run),
    then rename it into ``target`` whole."""
    from ultralytics.data.utils import check_cls_dataset, check_det_dataset

    builtin = dataset.BUILTIN.get(name)
    final = target / (builtin.root if builtin else name)
    if final.is_symlink():  # the rename below would not replace it: an admin's to remove
        raise UsageError(f"{final} is a link, not a staged dataset: ask your admin to remove it")
    if assets.dataset_staged(name, (target,)):
        return Staged(name, final, False)
    got = Path(check_det_dataset(name)["path"] if builtin else check_cls_dataset(name)["train"].parent)
    if got.parent != scratch or not got.is_dir():
        raise UsageError(f"{name}: ultralytics put it in {got}, not in {scratch}")
    _readable(got)
    if final.exists():  # staged meanwhile by a stager of another folder's lock: theirs stands
        return Staged(name, final, False)
    got.rename(final)
    return Staged(name, final, True)


def _weights(name: str, target: Path) -> Staged:
    """Fetch released weights ``name`` into ``target`` (ultralytics writes a part file, then renames it)."""
    from ultralytics.utils.downloads import GITHUB_ASSETS_NAMES, attempt_download_asset

    final = target / name
    foreign = assets.untrusted(final, os.getuid())
    if foreign:  # a planted file or link: neither "staged" nor written through
        raise UsageError(
            f"{final} is {foreign}, not staged by you or root: jobs will not load it; ask your admin to remove it"
        )
    if final.is_file():
        return Staged(name, final, False)
    if name not in GITHUB_ASSETS_NAMES:
        raise UsageError(f"{name} is not one of ultralytics' released weights: nothing to fetch it from")
    got = Path(attempt_download_asset(final))
    if not got.is_file():
        raise UsageError(f"{name}: the download left no file at {final}")
    _readable(got)
    return Staged(name, got, True)


def stage(config: Config, names: list[str], say: Callable[[str], None] = logger.info) -> list[Staged]:
    """Fetch each name into the folders the config's jobs read; what each became. Nothing is fetched
    when a name or a folder is wrong."""
    if not names:
        raise UsageError("give the datasets and weights to stage: slurm-yolo stage coco8-seg.yaml yolo11n.pt")
    kinds = dict(map(_kind, names))
    where = assets.places(config.stage, config.job.yolo_config_dir, Path.cwd())
    targets = {"data": where.datasets, "weights": where.weights}
    setting = {"data": "datasets_dir", "weights": "weights_dir"}
    site = {kind: getattr(config.stage, key) for kind, key in setting.items()}
    wanted = sorted(set(kinds.values()))
    if os.geteuid() == 0:
        unset = [f"stage.{setting[k]}" for k in wanted if not site[k]]
        if unset:  # root's own settings' folders: no job of a user reads them
            raise UsageError(
                f"as root, slurm-yolo stage fills the site's folders, and the config sets no {' or '.join(unset)}:"
                " set it (docs/admins.md), or run slurm-yolo stage as the user who trains"
            )
        say("staging as root: the files are root's, readable by every user")
    for kind in wanted:
        what = f"stage.{setting[kind]}" if site[kind] else f"your ultralytics {setting[kind]}"
        _folder(targets[kind], what, create=not site[kind])
    if config.stage.mirror:
        say(f"fetching from the site's mirror {config.stage.mirror}")
    done = []
    scratch = Path(tempfile.mkdtemp(prefix=".stage-", dir=where.datasets)) if "data" in kinds.values() else None
    try:  # in the scratch folder: ultralytics takes a dataset's relative path from the working folder first
        with (
            contextlib.chdir(scratch or where.weights),
            assets.ultralytics_folders(str(scratch or ""), str(where.weights), config.job.yolo_config_dir),
        ):
            _mirror(config.stage.mirror)
            for name, kind in kinds.items():
                with _locked(targets[kind], say):
                    done.append(_fetch(name, targets[kind], scratch))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return done


def _fetch(name: str, target: Path, scratch: Path | None) -> Staged:
    """One name, its failure as one line: ultralytics' own last word (a download, an archive)."""
    try:
        return (
            _dataset(name, target, scratch)
            if scratch is not None and not assets.is_weights_name(name)
            else _weights(name, target)
        )
    except SlurmYoloError:
        raise
    except Exception as e:  # noqa: BLE001 - ultralytics raises what its download or archive met
        line = next((x for x in reversed(str(e).splitlines()) if x.strip()), type(e).__name__)
        raise UsageError(f"staging {name} failed: {line.strip()}") from None
