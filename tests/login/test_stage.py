"""Offline compute nodes: a plan that would download its data or weights is refused with the command
that stages them (``--dry-run`` says it), and ``slurm-yolo stage`` fetches them with ultralytics' own
download code from a mirror, here one served on loopback with archives this test builds: tiny
coco8-seg, coco8-pose, dota8 and mnist160 in ultralytics' layout and label formats."""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import random
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import USERS_FS, VENV_BIN, Slurm, poll

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import assets, spec
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.synthetic import image
from slurm_yolo.login import render, submission
from slurm_yolo.login import stage as stage_mod

RELEASES = "ultralytics/assets/releases/download"  # the path GitHub serves them at, which a mirror keeps
DATASETS = ("coco8-seg", "coco8-pose", "dota8")
WEIGHTS_BYTES = 200_000  # ultralytics takes a download under 100 kB for an error page


def _corners(line: str) -> list[float]:
    _, x, y, w, h = map(float, line.split())
    return [x - w / 2, y - h / 2, x + w / 2, y - h / 2, x + w / 2, y + h / 2, x - w / 2, y + h / 2]


def _label(task: str, line: str) -> str:
    """A box label (``class x y w h``) as the task's label: a polygon, 17 keypoints, or 4 corners."""
    cls, *box = line.split()
    if task == "pose":  # one class (person), the box, then x y visible for each keypoint
        x, y = float(box[0]), float(box[1])
        return " ".join(["0", *box, *(f"{x:.4f} {y:.4f} 2" for _ in range(17))])
    return " ".join([cls, *(f"{v:.4f}" for v in _corners(line))])


def archive(name: str) -> bytes:
    """``name``.zip as ultralytics publishes it: one top folder; images/ and labels/ (train, val), or
    for mnist160 train/ and test/ of class folders, with a few 32-pixel images each."""
    rng = random.Random(name)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for split in ("train", "val") if name in DATASETS else ("train", "test"):
            for i in range(4):
                png, labels = image(32, rng)
                if name == "mnist160":
                    z.writestr(f"{name}/{split}/{i % 2}/{i}.png", png)
                    continue
                task = {"coco8-seg": "segment", "coco8-pose": "pose", "dota8": "obb"}[name]
                z.writestr(f"{name}/images/{split}/{i}.png", png)
                z.writestr(f"{name}/labels/{split}/{i}.txt", "".join(_label(task, x) + "\n" for x in labels))
    return out.getvalue()


class Mirror:
    """A loopback HTTP server of GitHub's release paths, counting what it served."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.served: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                mirror.served.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=root))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    root = tmp_path_factory.mktemp("mirror")
    for name in (*DATASETS, "mnist160"):
        target = root / RELEASES / "v0.0.0" / f"{name}.zip"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(archive(name))
    weights = root / RELEASES / "v8.4.0" / "yolov8n.pt"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(os.urandom(WEIGHTS_BYTES))
    served = Mirror(root)
    yield served
    served.server.shutdown()


def stage_config(path: Path, folder: Path, mirror: str, base: str = "") -> Path:
    """``base`` (a config's text) with this test's own staging folders and mirror."""
    (folder / "datasets").mkdir(parents=True, exist_ok=True)
    (folder / "weights").mkdir(exist_ok=True)
    path.write_text(
        f'{base}\n[stage]\ndatasets_dir = "{folder / "datasets"}"\nweights_dir = "{folder / "weights"}"\n'
        f'mirror = "{mirror}"\n'
    )
    return path


def stage_cli(*names: str, env: dict[str, str], user: str | None = None) -> subprocess.CompletedProcess[str]:
    """``slurm-yolo stage NAMES`` as a user runs it (its own process: ultralytics reads its settings
    once, at import)."""
    argv = [str(VENV_BIN / "slurm-yolo"), "stage", *names]
    if user:
        argv = ["/usr/sbin/runuser", "-u", user, "--", *argv]
    env = env | {"no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1", "YOLO_OFFLINE": "1"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/tmp", timeout=300)


def test_stage_fetches_from_the_mirror_once_readable_by_all(
    mirror: Mirror, home: Path, tmp_path: Path, yolo_env: dict[str, str]
) -> None:
    """Each name lands where the jobs' ultralytics looks (its layout, readable by every user); a second
    run fetches nothing and says so; a name of no ultralytics dataset, or a path, is one Error line."""
    stage_config(home / "config.toml", tmp_path, mirror.url)
    env = yolo_env | {"SLURM_YOLO_HOME": str(home)}
    names = ("coco8-seg.yaml", "coco8-pose", "dota8.yaml", "mnist160", "yolov8n.pt")
    res = stage_cli(*names, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    d, w = tmp_path / "datasets", tmp_path / "weights"
    assert res.stdout.splitlines() == [
        f"staged coco8-seg.yaml in {d / 'coco8-seg'}",
        f"staged coco8-pose.yaml in {d / 'coco8-pose'}",
        f"staged dota8.yaml in {d / 'dota8'}",
        f"staged mnist160 in {d / 'mnist160'}",
        f"staged yolov8n.pt in {w / 'yolov8n.pt'}",
    ]
    assert sorted(p.name for p in d.iterdir()) == [
        ".slurm-yolo-stage.lock",
        "coco8-pose",
        "coco8-seg",
        "dota8",
        "mnist160",
    ]
    assert len(list((d / "dota8" / "labels" / "val").glob("*.txt"))) == 4 and (d / "mnist160" / "test" / "1").is_dir()
    assert (w / "yolov8n.pt").stat().st_size == WEIGHTS_BYTES
    for p in [*d.rglob("*"), w / "yolov8n.pt"]:
        if p.name != ".slurm-yolo-stage.lock":
            assert p.stat().st_mode & (stat.S_IROTH | (stat.S_IXOTH if p.is_dir() else 0)), p
    assert len(mirror.served) == 5 and all("/ultralytics/assets/releases/download/" in s for s in mirror.served)
    again = stage_cli(*names, env=env)
    assert again.returncode == 0 and len(mirror.served) == 5, again.stderr
    assert again.stdout.splitlines()[0] == f"coco8-seg.yaml: already staged in {d / 'coco8-seg'}"
    assert all("already staged" in line for line in again.stdout.splitlines())
    for bad, said in (
        ("./mine.yaml", "'./mine.yaml': give ultralytics' dataset names"),
        ("nosuch", "'nosuch': give ultralytics' dataset names"),
        ("mystery.pt", "mystery.pt is not one of ultralytics' released weights"),
    ):
        res = stage_cli(bad, env=env)
        assert res.returncode == 1 and res.stderr.strip().splitlines()[-1].startswith(f"Error: {said}"), res.stderr


def test_a_failed_download_is_one_line_and_leaves_nothing(
    mirror: Mirror, home: Path, tmp_path: Path, yolo_env: dict[str, str]
) -> None:
    stage_config(home / "config.toml", tmp_path, mirror.url + "/nowhere")
    res = stage_cli("coco8-seg.yaml", env=yolo_env | {"SLURM_YOLO_HOME": str(home)})
    assert res.returncode == 1 and res.stderr.splitlines()[-1].startswith("Error: staging coco8-seg.yaml failed:")
    assert [p.name for p in (tmp_path / "datasets").iterdir()] == [".slurm-yolo-stage.lock"]


def test_the_settings_are_checked() -> None:
    for text, said in (
        ('[stage]\ndatasets_dir = "datasets"\n', "config stage.datasets_dir: an absolute path"),
        ('[stage]\nmirror = "ftp://mirror"\n', "config stage.mirror: an http:// or https:// base URL"),
    ):
        path = Path(tempfile.mkdtemp()) / "config.toml"
        path.write_text(text)
        with pytest.raises(UsageError, match=said):
            config_mod.load(path)
    assert (
        assets.mirrored(f"{assets.GITHUB}ultralytics/assets/x.zip", "http://m/") == "http://m/ultralytics/assets/x.zip"
    )
    assert assets.mirrored("http://images.cocodataset.org/x.zip", "http://m") == "http://images.cocodataset.org/x.zip"


def test_a_job_reads_the_site_folders_through_settings_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's ultralytics (and its DDP workers) read the site's folders from a settings file of
    the run's own: the user's other settings kept, her file unchanged, gone after the run."""
    own = tmp_path / "own"
    (own / "Ultralytics").mkdir(parents=True)
    mine = {"runs_dir": "/home/alice/runs", "datasets_dir": "/home/alice/datasets"}
    (own / "Ultralytics" / "settings.json").write_text(json.dumps(mine))
    (own / "Ultralytics" / "Arial.ttf").write_bytes(b"font")
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(own))
    with assets.ultralytics_folders("/shared/datasets", "/shared/weights") as folder:
        assert folder is not None and os.environ["YOLO_CONFIG_DIR"] == str(folder)
        values = json.loads((folder / "Ultralytics" / "settings.json").read_text())
        assert values == mine | {"datasets_dir": "/shared/datasets", "weights_dir": "/shared/weights"}
        assert (folder / "Ultralytics" / "Arial.ttf").read_bytes() == b"font"
    assert os.environ["YOLO_CONFIG_DIR"] == str(own) and not folder.exists()
    assert json.loads((own / "Ultralytics" / "settings.json").read_text()) == mine
    with assets.ultralytics_folders("", "") as nothing:
        assert nothing is None and os.environ["YOLO_CONFIG_DIR"] == str(own)


def _plan(config: config_mod.Config, words: list[str], cwd: Path) -> submission.Prepared:
    options = submission.job_options(config)
    return submission.prepare(config, words, submission.plan.Request(partition="t4"), options)


def test_a_plan_that_would_download_is_refused_naming_the_stage_command(
    site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline nodes (the default): --dry-run plans and says in one line what is missing and the command;
    a submission is one Error line and calls no Slurm command. Staged (or on a site whose nodes have the
    network), nothing is said; the script points the job's ultralytics at the site's folders."""
    monkeypatch.chdir(tmp_path)
    stage_config(site_config, tmp_path / "site", "", site_config.read_text())
    d, w = tmp_path / "site" / "datasets", tmp_path / "site" / "weights"
    words = ["segment", "train", "model=yolov8n-seg.pt", "data=coco8-seg.yaml", "epochs=1", "imgsz=64"]
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "t4", *words])
    line = (
        f"coco8-seg.yaml is not in {d}; yolov8n-seg.pt is not in {w}, and the compute nodes have no network to"
        " download them: stage them first with `slurm-yolo stage coco8-seg.yaml yolov8n-seg.pt` (on a login node)"
    )
    assert res.exit_code == 0 and res.stderr == f"warning: {line} (a submission is refused until then)\n", res.stderr
    assert (
        f"\nexport {assets.ENV_DATASETS}={d}\n" in res.stdout and f"\nexport {assets.ENV_WEIGHTS}={w}\n" in res.stdout
    )
    config = config_mod.load(site_config)

    def nothing(*args: object, **kwargs: object) -> None:
        raise AssertionError("refused before the budget and sbatch are asked")

    monkeypatch.setattr(submission.admission, "check", nothing)
    monkeypatch.setattr(submission.commands, "submit_told", nothing)
    refused = CliRunner().invoke(yolo_sbatch, ["-p", "t4", *words])
    assert refused.exit_code == 1 and refused.stderr == f"Error: job not submitted: {line}\n", refused.stderr
    (d / "coco8-seg" / "images" / "val").mkdir(parents=True)
    (w / "yolov8n-seg.pt").write_bytes(b"w")
    assert _plan(config, words, tmp_path).unstaged == ()
    (w / "yolov8n-seg.pt").unlink()
    assert [u.name for u in _plan(config, words, tmp_path).unstaged] == ["yolov8n-seg.pt"]
    (tmp_path / "yolov8n-seg.pt").write_bytes(b"w")  # in the work dir, where ultralytics looks first
    assert _plan(config, words, tmp_path).unstaged == ()
    online = site_config.read_text().replace("[stage]\n", "[stage]\nnodes_online = true\n")
    site_config.write_text(online)
    words = ["classify", "train", "model=yolov8n-cls.yaml", "data=mnist160", "epochs=1", "imgsz=32"]
    assert _plan(config_mod.load(site_config), words, tmp_path).unstaged == ()
    assert [u.name for u in _plan(config, words, tmp_path).unstaged] == ["mnist160"]


def test_the_script_exports_nothing_where_the_site_sets_no_folders(site_config: Path) -> None:
    config = config_mod.load(site_config)
    assert submission.job_options(config).environment == {}
    assert render.JobOptions().environment == {} and assets.job_environment(config.stage) == {}
    s = spec.parse(["train", "data=coco8.yaml", "model=yolo11n.pt", "pretrained=yolov8s.pt"])
    where = assets.Places(Path("/d"), Path("/w"))
    assert [u.name for u in assets.unstaged(s, where, Path("/nonexistent"))] == [
        "coco8.yaml",
        "yolo11n.pt",
        "yolov8s.pt",
    ]


# The cluster's: ultralytics' demo datasets of each task, trained side by side on the bundled 22.05 cluster.
JOBS = {
    "coco8-seg.yaml": ["segment", "train", "model=yolov8n-seg.yaml", "data=coco8-seg.yaml"],
    "coco8-pose.yaml": ["pose", "train", "model=yolov8n-pose.yaml", "data=coco8-pose.yaml"],
    "dota8.yaml": ["obb", "train", "model=yolov8n-obb.yaml", "data=dota8.yaml"],
    "mnist160": ["classify", "train", "model=yolov8n-cls.yaml", "data=mnist160"],
}


def test_staged_datasets_train_on_the_offline_cluster(cluster: Slurm, mirror: Mirror) -> None:
    """As alice, on a config of the test's own (the cluster's, with its own staging folders): each of
    the four is refused before staging, naming the stage command, and the account's balance does not
    move; ``--dry-run`` plans it; after ``slurm-yolo stage`` from the loopback mirror all four,
    submitted at once, train to COMPLETED."""
    top = Path(tempfile.mkdtemp(dir=USERS_FS, prefix="stage-"))
    top.chmod(0o755)
    try:
        config = stage_config(top / "config.toml", top / "site", mirror.url, cluster.config_path.read_text())
        for p in (top / "site", top / "site" / "datasets", top / "site" / "weights"):
            shutil.chown(p, "alice")
        work = top / "work"
        work.mkdir()
        shutil.chown(work, "alice")
        env = cluster.env("alice") | {"SLURM_YOLO_CONFIG": str(config)}

        def sbatch(*args: str) -> subprocess.CompletedProcess[str]:
            argv = ["/usr/sbin/runuser", "-u", "alice", "--", str(VENV_BIN / "yolo-sbatch"), "-A", "vision", *args]
            return subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work, timeout=120)

        with cluster.ledger() as lg:
            before = lg.account("vision")["balance"]
        tiny = ["epochs=1", "imgsz=32", "batch=4", "workers=0", f"project={work}/runs", "plots=False"]
        for name, words in JOBS.items():
            res = sbatch("-p", "t4", "-t", "5", *words, *tiny)
            assert res.returncode == 1 and res.stderr.startswith("Error: job not submitted: "), res.stderr
            assert f"`slurm-yolo stage {name}`" in res.stderr and res.stderr.count("\n") == 1, res.stderr
            dry = sbatch("--dry-run", "-p", "t4", *words, *tiny)
            assert dry.returncode == 0 and f"`slurm-yolo stage {name}`" in dry.stderr, dry.stderr
        with cluster.ledger() as lg:
            assert lg.account("vision")["balance"] == before
        staged = stage_cli(*JOBS, env=env, user="alice")
        assert staged.returncode == 0 and staged.stdout.count("staged ") == 4, staged.stdout + staged.stderr
        jobs = []
        for words in JOBS.values():  # a run folder each: side by side, two could take the same next name
            res = sbatch("-p", "t4", "-t", "5", *words, *tiny, f"name={words[0]}")
            assert res.returncode == 0 and res.stderr == "", res.stderr
            jobs.append(int(res.stdout.split()[3]))
        started = time.monotonic()
        states = {job: cluster.ended(job, timeout=170)[0]["State"] for job in jobs}
        logs = {
            j: (work / f"yolo-{j}.out").read_text(errors="replace")[-3000:]
            for j, s in states.items()
            if s != "COMPLETED"
        }
        assert set(states.values()) == {"COMPLETED"}, (states, logs)
        assert time.monotonic() - started < 170
    finally:
        for job in locals().get("jobs", []):
            cluster.cmd("scancel", str(job), check=False)
        shutil.rmtree(top, ignore_errors=True)
    poll("the test's folder gone", lambda: not top.exists(), 5)


def test_root_stages_only_into_the_sites_folders(home: Path, yolo_env: dict[str, str]) -> None:
    """Root's own ultralytics folders are no user's job's: without the site's, root is refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    (home / "config.toml").write_text("")
    res = stage_cli("coco8-seg.yaml", env=yolo_env | {"SLURM_YOLO_HOME": str(home)})
    assert res.returncode == 1 and res.stderr == (
        "Error: as root, slurm-yolo stage fills the site's folders, and the config sets no stage.datasets_dir: set it"
        " (docs/admins.md), or run slurm-yolo stage as the user who trains\n"
    )


def test_planted_weights_and_a_fifo_lock_in_the_shared_folder_are_refused(
    site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging folders are written by users: another user's .pt (a pickle: code a job would run) or
    a link there is neither 'staged' for a submission nor for stage, and a FIFO put where the lock goes
    is refused at once instead of hanging every stager."""
    if os.geteuid() != 0:
        pytest.skip("needs root (files of another user)")
    monkeypatch.chdir(tmp_path)
    stage_config(site_config, tmp_path / "site", "", site_config.read_text())
    w = tmp_path / "site" / "weights"
    (w / "yolov8n-seg.pt").write_bytes(b"not weights")
    os.chown(w / "yolov8n-seg.pt", 65534, 65534)
    (w / "yolov8s-seg.pt").symlink_to("/etc/shadow")
    config = config_mod.load(site_config)
    for name, why in (("yolov8n-seg.pt", "nobody's"), ("yolov8s-seg.pt", "a link")):
        words = ["segment", "train", f"model={name}", "data=coco8-seg.yaml", "epochs=1", "imgsz=64"]
        (missing,) = [u for u in _plan(config, words, tmp_path).unstaged if u.name == name]
        assert missing.foreign == why
        res = CliRunner().invoke(yolo_sbatch, ["-p", "t4", *words])
        assert res.exit_code == 1 and res.stderr == (
            f"Error: job not submitted: {w / name} is {why}, not staged by you or root: a job would load it as"
            " code; ask your admin to remove it (then stage it), or give model= a path of your own\n"
        ), res.stderr
        with pytest.raises(UsageError, match=f"is {why}, not staged by you or root: jobs will not load it"):
            stage_mod._weights(name, w)
    os.mkfifo(w / stage_mod.LOCK)
    with pytest.raises(UsageError, match="is not a plain file"), stage_mod._locked(w, lambda line: None):
        pass
