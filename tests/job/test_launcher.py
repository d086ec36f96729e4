"""The launcher follows a training child from outside, as it must for one GPU and for eight: records
from the run folder, USR2 -> checkpoint -> requeue (an array task alone) -> resume, SIGTERM stops the
whole tree. A stand-in trainer writes the run folder as ultralytics does (a results.csv row, then
last.pt written in place, then best.pt; a DDP-like worker in a session of its own), so these run in a
second; the real training under Slurm is test_jobside's."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_yolo.job import launcher
from slurm_yolo.parse import beacon

FAKE_TRAINER = r"""
import json, os, subprocess, sys, time, zipfile
from pathlib import Path

plan, fd = json.loads(sys.argv[1]), int(sys.argv[2])
args = plan["args"]
if plan["resume"]:
    last = Path(plan["resume"])
    folder = last.parent.parent
    with zipfile.ZipFile(last) as z:
        epoch = json.loads(z.read("ckpt"))["epoch"]
else:
    folder = Path(args["project"]) / args["name"]
    (folder / "weights").mkdir(parents=True, exist_ok=True)
    (folder / "results.csv").unlink(missing_ok=True)
    epoch = 0
with os.fdopen(fd, "w") as report:
    report.write(json.dumps({"save_dir": str(folder), "gpus": 0}) + "\n")
# a DDP worker: a session of its own, as torch's launcher starts them
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
(folder / "worker.pid").write_text(str(worker.pid))
csv = folder / "results.csv"
started = time.monotonic()
while epoch < args["epochs"]:
    time.sleep(float(os.environ.get("FAKE_EPOCH_SECONDS", "0.15")))
    epoch += 1
    header = "" if csv.exists() else "epoch,time,train/box_loss,metrics/mAP50-95(B)\n"
    with open(csv, "a") as f:
        f.write(header + f"{epoch},{time.monotonic() - started:.4f},{1 / epoch:.4f},{epoch / 100:.4f}\n")
    time.sleep(0.05)  # validation done, saving
    for name in ("last.pt", "best.pt"):
        path = folder / "weights" / name
        with open(path, "wb") as f:  # in place, as ultralytics writes
            with zipfile.ZipFile(f, "w") as z:
                z.writestr("ckpt", json.dumps({"epoch": epoch}))
                z.writestr("data", os.urandom(200_000))
worker.kill()
"""


@pytest.fixture
def job(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A job's work dir, a stand-in trainer, and Slurm's commands as stubs that log their arguments."""
    trainer = tmp_path / "fake_trainer.py"
    trainer.write_text(FAKE_TRAINER)
    monkeypatch.setattr(launcher, "TRAINER", [sys.executable, str(trainer)])
    monkeypatch.setattr(launcher, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(launcher, "REQUEUE_POLL_SECONDS", 0.01)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "scancel"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/slurm.log\n')
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    squeue = bin_dir / "squeue"  # the job's Comment, as yolo-sbatch wrote it: -O Comment:DELIMITER
    squeue.write_text('#!/bin/sh\nfor a; do d="${a#Comment:}"; done\nprintf "%s%s\\n" "yolo:eff=7,pred_s=1" "$d"\n')
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{bin_dir}"\n')
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for var in (
        "SLURM_JOB_ID",
        "SLURM_RESTART_COUNT",
        "SLURM_ARRAY_JOB_ID",
        "SLURM_ARRAY_TASK_ID",
        "SLURM_CPUS_PER_TASK",
    ):
        monkeypatch.delenv(var, raising=False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)}
    yield work
    for s, handler in handlers.items():
        signal.signal(s, handler)


def words(dataset: Path, project: Path, epochs: int) -> list[str]:
    return [
        "train",
        "model=yolov8n.yaml",
        f"data={dataset}",
        f"epochs={epochs}",
        "imgsz=64",
        f"project={project}",
        "name=run",
    ]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ended(pid: int) -> bool:
    """The process is gone (or a zombie) within a few seconds: a signal's effect is not instant."""
    deadline = time.monotonic() + 5
    while launcher.running({pid}) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not launcher.running({pid})


def signal_when(path: Path, sig: int, ready: Callable[[list[dict]], bool]) -> threading.Thread:
    """Send ``sig`` to this process (the launcher's) once the usage records satisfy ``ready``."""

    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not ready(records(path)):
            time.sleep(0.02)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_records_come_from_the_run_folder(job: Path, dataset: Path) -> None:
    assert launcher.run(words(dataset, job / "runs", 3)) == 0
    recs = records(job / f"yolo-usage-{os.getpid()}.jsonl")  # outside Slurm: named for the launcher's pid
    assert recs[0]["kind"] == "start" and recs[-1]["kind"] == "end"
    start = recs[0]
    assert start["gpus"] == 1 and start["cpus"] >= 1 and start["workload"]["train_images"] == 16
    epochs = [r for r in recs if r["kind"] == "epoch"]
    rows = launcher.read_results_csv(job / "runs" / "run" / "results.csv")
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and all(e["epochs"] == 3 for e in epochs)
    assert [e["seconds"] for e in epochs] == pytest.approx(
        [rows[0].time, rows[1].time - rows[0].time, rows[2].time - rows[1].time]
    )
    assert all(e["images"] == 16 and e["tokens"] == 16 * 64**2 for e in epochs)
    assert epochs[-1]["metrics"] == {"train/box_loss": pytest.approx(1 / 3, abs=1e-4), "metrics/mAP50-95(B)": 0.03}
    assert recs[-1]["epochs_completed"] == 3 and recs[-1]["metrics"]["metrics/mAP50-95(B)"] == 0.03
    saved = [r["epoch"] for r in recs if r["kind"] == "checkpoint"]
    assert saved == sorted(set(saved)) and saved[-1] == 3  # one per saved epoch (a slow look may see two rows at once)


def test_usr2_requeues_the_array_task_at_the_next_checkpoint_and_the_next_run_resumes(
    job: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "101")  # an array task's own id: may be the array's, naming every task
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "100")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    usage = job / "yolo-usage-101.jsonl"
    signal_when(usage, signal.SIGUSR2, lambda recs: any(r["kind"] == "epoch" and r["epoch"] >= 2 for r in recs))
    assert launcher.run(words(dataset, job / "runs", 40)) == 0
    recs = records(usage)
    asked = next(i for i, r in enumerate(recs) if r["kind"] == "epoch" and r["epoch"] >= 2)
    requeue = next(r for r in recs if r["kind"] == "requeue")
    assert 2 <= requeue["epoch"] < 40 and recs[-1] == requeue
    assert any(r["kind"] == "checkpoint" and r["epoch"] == requeue["epoch"] for r in recs[asked:])  # saved after USR2
    assert not any(r["kind"] == "end" for r in recs)
    shown, *updates, last = (tmp_path / "slurm.log").read_text().splitlines()
    assert shown == "scontrol show job -o 101"  # the run's start line in the log names its time limit
    assert last == "scontrol requeue 100_5"  # after the summary of what was done, for the epilog's feedback
    assert updates and all(
        u.startswith("scontrol update JobId=100_5 Comment=yolo:eff=7,pred_s=1;run:at=") for u in updates
    )
    summary = beacon.decode(beacon.summary_text(updates[-1].split("Comment=", 1)[1]))
    assert summary is not None and summary.epochs_done == requeue["epoch"] and summary.one_run is False
    assert summary.workload is not None and summary.workload.train_images == 16
    folder = job / "runs" / "run"
    assert ended(int((folder / "worker.pid").read_text()))  # the DDP-like worker went with the training
    rows = launcher.read_results_csv(folder / "results.csv")
    assert rows[-1].epoch == requeue["epoch"]  # stopped at the checkpoint: no epoch past it
    for name in ("last.pt", "best.pt"):
        with zipfile.ZipFile(folder / "weights" / name) as z:
            assert json.loads(z.read("ckpt"))["epoch"] == requeue["epoch"]

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("FAKE_EPOCH_SECONDS", "0.01")
    assert launcher.run(words(dataset, job / "runs", 40)) == 0
    second = [r for r in records(usage) if r["restart"] == 1]
    assert [r["kind"] for r in second[:2]] == ["start", "resume"] and second[1]["from"] == str(
        folder / "weights" / "last.pt"
    )
    assert second[-1]["kind"] == "end" and second[-1]["epochs_completed"] == 40
    epochs = [r["epoch"] for r in records(usage) if r["kind"] == "epoch"]
    assert epochs == list(range(1, 41))  # every epoch once, across both runs
    assert next(r for r in second if r["kind"] == "epoch")["seconds"] < 1  # time restarts with the resumed run


@pytest.mark.parametrize(
    ("version", "preempt_time", "why", "asks"),
    [
        ("slurm-wlm 22.05.8", "2026-12-03T11:19:35", "preempted", True),
        ("slurm 24.11.5", "2026-12-03T11:19:35", "preempted", False),
        ("slurm 24.11.5", "N/A", "USR1 without a preemption", True),  # her own scancel -s USR1: no preemption
    ],
)
def test_usr1_a_preemption_hands_over_at_the_next_checkpoint(
    job: Path,
    dataset: Path,
    tmp_path: Path,
    version: str,
    preempt_time: str,
    why: str,
    asks: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch script's watch step passes a preemption on as USR1: the training stops at its next
    saved epoch and the job requeues, by asking for it where Slurm would complete a job that ends in
    its grace (22.05), by ending where Slurm requeues it itself (23.02 and later). A USR1 while
    slurmctld preempts nothing (squeue's PreemptTime N/A) is no preemption, and is not recorded as one."""
    monkeypatch.setenv("SLURM_JOB_ID", "102")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    bin_dir = tmp_path / "bin"
    (bin_dir / "scontrol").write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}\n'
        f'echo "scontrol $*" >> {tmp_path}/slurm.log\n'
    )
    (bin_dir / "squeue").write_text(  # the job's Comment, or the PreemptTime slurmctld set, each with its delimiter
        '#!/bin/sh\nfor a; do case "$a" in Comment:*) printf "yolo:eff=7%s\\n" "${a#Comment:}";; '
        f'PreemptTime:*) printf "{preempt_time}%s\\n" "${{a#PreemptTime:}}";; esac; done\n'
    )
    usage = job / "yolo-usage-102.jsonl"
    signal_when(usage, signal.SIGUSR1, lambda recs: any(r["kind"] == "epoch" and r["epoch"] >= 2 for r in recs))
    assert launcher.run(words(dataset, job / "runs", 40)) == 0
    recs = records(usage)
    requeue = next(r for r in recs if r["kind"] == "requeue")
    assert requeue["why"] == why and 2 <= requeue["epoch"] < 40 and recs[-1] == requeue
    assert any(r["kind"] == "checkpoint" and r["epoch"] == requeue["epoch"] for r in recs)
    assert launcher.read_results_csv(job / "runs" / "run" / "results.csv")[-1].epoch == requeue["epoch"]
    asked = [line for line in (tmp_path / "slurm.log").read_text().splitlines() if "requeue" in line]
    assert asked == (["scontrol requeue 102"] if asks else [])


def test_a_run_after_one_that_finished_trains_nothing(
    job: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24.11 requeues a preempted job that ends in its grace even when its training had finished: the
    next run ends at once (resuming a finished run would fail), so the work is neither done nor paid twice."""
    monkeypatch.setenv("SLURM_JOB_ID", "103")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert launcher.run(words(dataset, job / "runs", 2)) == 0
    usage = job / "yolo-usage-103.jsonl"
    before = usage.read_text()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setattr(launcher, "TRAINER", ["/bin/false"])  # never started
    assert launcher.run(words(dataset, job / "runs", 2)) == 0
    assert usage.read_text() == before


def test_a_launcher_that_fails_takes_its_training_with_it(
    job: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training runs in a session of its own: a launcher that fails (here, reading the run folder)
    kills it and its worker, which would otherwise train on past the job's end, unbilled."""

    def broken(self: launcher.Supervisor) -> None:
        if self.folder is not None and (self.folder.path / "worker.pid").exists():
            raise PermissionError("a stand-in failure")

    monkeypatch.setattr(launcher.Supervisor, "_read_folder", broken)
    with pytest.raises(PermissionError):
        launcher.run(words(dataset, job / "runs", 400))
    assert ended(int((job / "runs" / "run" / "worker.pid").read_text()))


def test_sigterm_stops_the_whole_training(job: Path, dataset: Path) -> None:
    usage = job / f"yolo-usage-{os.getpid()}.jsonl"
    signal_when(usage, signal.SIGTERM, lambda recs: any(r["kind"] == "epoch" for r in recs))
    assert launcher.run(words(dataset, job / "runs", 400)) == 128 + signal.SIGTERM
    assert ended(int((job / "runs" / "run" / "worker.pid").read_text()))
    assert not any(r["kind"] in ("end", "requeue") for r in records(usage))


def test_usr2_outside_slurm_changes_nothing(job: Path, dataset: Path) -> None:
    usage = job / f"yolo-usage-{os.getpid()}.jsonl"
    signal_when(usage, signal.SIGUSR2, lambda recs: any(r["kind"] == "epoch" for r in recs))
    assert launcher.run(words(dataset, job / "runs", 5)) == 0
    assert [r["kind"] for r in records(usage)][-1] == "end"


def test_a_checkpoint_is_whole_only_once_written_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", os.urandom(100_000))
    assert launcher.whole_checkpoint(path)
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        assert not launcher.whole_checkpoint(path)
    assert not launcher.whole_checkpoint(tmp_path / "missing.pt")


SAVING = """
import os, signal, sys
from pathlib import Path
from slurm_yolo.job.trainer import WholeCheckpoints

def write(self):
    os.kill(os.getpid(), signal.SIGTERM)  # Slurm's, in the middle of ultralytics' write
    Path(sys.argv[1]).write_bytes(b"whole")
    return True

class Trainer:
    save_model = final_eval = write

trainer = Trainer()
WholeCheckpoints()(trainer)
assert getattr(trainer, sys.argv[2])()
print("not ended", flush=True)
"""


@pytest.mark.parametrize("save", ["save_model", "final_eval"])
def test_a_sigterm_in_a_checkpoint_s_write_waits_for_its_end(tmp_path: Path, save: str) -> None:
    """The process ends by the signal, as it would have, once the checkpoint is written whole (each
    epoch's save, and the final one); a SIGTERM outside a write ends it at once."""
    last = tmp_path / "last.pt"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", SAVING, str(last), save], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, last.read_bytes()) == (-signal.SIGTERM, "", b"whole"), done.stderr
    outside = SAVING.replace("assert getattr(trainer, sys.argv[2])()", "os.kill(os.getpid(), signal.SIGTERM)")
    stopped = subprocess.run(
        [sys.executable, "-c", outside, str(tmp_path / "none.pt"), save], env=env, capture_output=True
    )
    assert (stopped.returncode, stopped.stdout) == (-signal.SIGTERM, b"")


DDP_STATE = """
import sys, types
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.utils import callbacks
from ultralytics.utils.dist import generate_ddp_file
from slurm_yolo.job.trainer import WholeCheckpoints

trainer = DetectionTrainer.__new__(DetectionTrainer)  # what generate_ddp_file reads of a trainer, no dataset
trainer.args, trainer.model = types.SimpleNamespace(epochs=1, device="0,1"), None
trainer.callbacks = callbacks.get_default_callbacks()
trainer.callbacks["on_pretrain_routine_start"].append(WholeCheckpoints())  # as trainer.main adds it
print(generate_ddp_file(trainer))
"""

DDP_WORKER = """
import sys
from ultralytics.utils.patches import torch_load
state = torch_load(sys.argv[1].removesuffix(".py") + ".pt", map_location="cpu")
print(" ".join(f"{type(c).__module__}.{type(c).__name__}" for c in state["callbacks"]["on_pretrain_routine_start"]))
"""


def test_ddp_workers_get_the_checkpoint_guard_offline(yolo_env: dict[str, str]) -> None:
    """Under several GPUs ultralytics 8.4 pickles the trainer's callbacks (cloudpickle) for its DDP
    workers, so each worker's save is guarded too; cloudpickle comes with the [train] extra: offline
    (a compute node) ultralytics cannot install it, and every multi-GPU job would fail at launch.
    Written and read as ultralytics' DDP file is, in a fresh interpreter (no GPU is needed for that)."""
    env = yolo_env | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    made = subprocess.run([sys.executable, "-c", DDP_STATE], env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "not found" not in made.stdout + made.stderr  # no AutoUpdate attempted: cloudpickle is there
    ddp_file = made.stdout.strip().splitlines()[-1]
    try:
        read = subprocess.run(
            [sys.executable, "-c", DDP_WORKER, ddp_file], env=env, capture_output=True, text=True, timeout=300
        )
        assert read.returncode == 0, read.stderr
        assert "slurm_yolo.job.trainer.WholeCheckpoints" in read.stdout.split()
    finally:
        for path in (Path(ddp_file), Path(ddp_file).with_suffix(".pt")):
            path.unlink(missing_ok=True)


def test_loader_workers_follow_the_jobs_cpus_unless_the_user_set_them() -> None:
    """ultralytics counts the node's CPUs, not the job's: the launcher gives each training process
    the job's CPUs per GPU less the one that trains, and keeps a user's own ``workers=``."""
    from slurm_yolo.job.launcher import loader_workers

    assert loader_workers({}, 12, 1) == 11
    assert loader_workers({}, 16, 2) == 7  # DDP: per GPU
    assert loader_workers({}, 1, 1) == 0
    assert loader_workers({"workers": 16}, 4, 1) == 16
    assert loader_workers({"workers": 0}, 8, 1) == 0
