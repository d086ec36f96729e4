"""The in-job runner: trains as the user asked and keeps the job's usage records (job side only).

One mechanism for one GPU and for eight. The training runs in a child process (``trainer.py``, in a
session of its own), and this process follows it from outside, through what ultralytics writes for
any number of GPUs: one ``results.csv`` row per finished epoch, ``weights/last.pt`` saved after it,
and the child's exit. Callbacks on the model would not do: under several GPUs ultralytics trains in
DDP workers it spawns, which get the callbacks pickled but report nowhere this process reads.

The usage records (JSON lines, ``yolo-usage-JOBID.jsonl``) go to the job's work dir, the folder the
job starts in (``--chdir``, else the submit dir), where the epilog, ``watch`` and the watchdog look:
``start`` (the workload, GPUs and CPUs: what the k feedback needs), ``epoch`` per results.csv row
(images, tokens, seconds, metrics, and GPU memory and utilisation of the training's processes from
NVML when there is a GPU), ``checkpoint`` per saved last.pt, ``requeue``, ``resume`` and ``end``.
The controller reads none of them (it may not mount the work dir): their summary, and when the
training last showed progress, go to the job's own Comment (``beacon``), where the epilog's feedback
and the watchdog read it.

USR2 (Slurm's ``--signal=B:USR2@N`` near the time limit, passed on by the batch script) asks for a
requeue: at the next saved epoch (a new row, and a whole last.pt written after it) the training's
processes are frozen, the checkpoints checked whole, the processes killed (DDP workers included) and
the job requeued; its next run (SLURM_RESTART_COUNT > 0) resumes from that last.pt. USR1 is a
preemption (the batch script's watch step passes on the SIGTERM slurmctld sends the job's steps when
a higher tier takes its GPUs): the same, within the site's GraceTime, so the GPUs are handed over at
the first saved epoch instead of at the grace's end; the ``requeue`` record says ``why``. A grace
that ends first requeues the job all the same (Slurm's SIGTERM, then SIGKILL): it resumes from the
last epoch saved before it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from slurm_yolo.core import assets, dataset
from slurm_yolo.core import config as config_mod
from slurm_yolo.core import resume as resume_mod
from slurm_yolo.core import spec as spec_mod
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.core.model import estimate
from slurm_yolo.parse import beacon
from slurm_yolo.parse.records import USAGE_NAME, iter_records
from slurm_yolo.parse.results import EpochRow, read_results_csv
from slurm_yolo.slurm import commands

logger = logging.getLogger(__name__)
POLL_SECONDS = 1.0  # how often the run folder is read: an epoch's record is at most this late
REQUEUE_POLL_SECONDS = 0.1  # once USR2 asked: a look must fall between a saved last.pt and the next row
STOP_GRACE_SECONDS = 10.0  # SIGTERM to the training's processes, then SIGKILL
BEACON_SECONDS = 60.0  # the least time between two summaries in the Comment: each is an RPC to slurmctld
# + the plan (JSON) and the report's file descriptor. SLURM_YOLO_TRAINER names another module with the
# same interface: the site replay's stand-in (bench/site_standin.py), which sleeps a job's true time.
# It is the user's own job: a module she names runs as her, as anything in her script does.
_TRAINER_MODULE = os.environ.get("SLURM_YOLO_TRAINER", "")
TRAINER = [
    sys.executable,
    "-m",
    _TRAINER_MODULE if re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", _TRAINER_MODULE) else "slurm_yolo.job.trainer",
]


def _cpus() -> int:
    try:
        return max(1, int(os.environ.get("SLURM_CPUS_PER_TASK", "")))
    except ValueError:
        return max(1, len(os.sched_getaffinity(0)))


def _ranks() -> int:
    """Training processes the job's GPUs make (DDP: one per GPU): Slurm's count of the node's GPUs,
    else the devices CUDA may see; 1 for a shard or a CPU run."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return max(1, len(visible))


def loader_workers(args: dict[str, Any], cpus: int, ranks: int) -> int:
    """ultralytics' ``workers`` (per training process): the user's own where she set it; else the
    job's CPUs per process less the one that trains. ultralytics itself counts the node's CPUs, not
    the job's cgroup, and would start 8 whatever the job was given."""
    if "workers" in args:
        return max(0, int(args["workers"]))
    return max(0, cpus // max(1, ranks) - 1)


def usage_path() -> Path:
    """The job's usage file, in the folder the job started in: Slurm's work dir for it."""
    return Path.cwd() / USAGE_NAME.format(job=os.environ.get("SLURM_JOB_ID", str(os.getpid())))


class UsageLog:
    """Appends usage records, each with the time, the job and which run of it (restart) wrote it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        record = {
            "time": time.time(),
            "job_id": os.environ.get("SLURM_JOB_ID"),
            "restart": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
            **record,
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=float) + "\n")


def _bin_dir() -> Path | None:
    """Slurm's commands as the config names them; None (where they usually are) without a readable config."""
    try:
        return Path(config_mod.load().slurm.bin_dir)
    except SlurmYoloError:
        return None


def _job_target() -> str | None:
    """This job as scontrol names it alone (an array task by ``ARRAY_TASK``); None outside a job."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return commands.job_target(
        int(os.environ["SLURM_JOB_ID"]),
        os.environ.get("SLURM_ARRAY_JOB_ID", ""),
        os.environ.get("SLURM_ARRAY_TASK_ID", ""),
    )


class CommentReporter:
    """Keeps the job's summary (``beacon``) in its Comment, after the estimate yolo-sbatch put there:
    when the usage records or the job's output have moved, at most every ``BEACON_SECONDS``, and
    always at the end and before a requeue. Progress is the records or the job's own stdout and stderr
    (the fds this process writes to, wherever Slurm opened them) growing or being written. A failed
    update is said once on stderr and never stops the training."""

    def __init__(self, path: Path) -> None:
        self.path, self.target, self.bin_dir = path, _job_target(), _bin_dir()
        self.head, self.failed = "", False
        if self.target is not None:
            try:
                self.head = commands.job_comment(self.target, bin_dir=self.bin_dir)
            except SlurmYoloError as e:  # writing without it would drop yolo-sbatch's estimate
                self._fail(e)
                self.target = None
        self.marks = self._marks()
        self.progress_at = time.time()
        self.sent, self.sent_at = "", float("-inf")

    def _marks(self) -> tuple[float, ...]:
        marks: list[float] = []
        for stat in (lambda: os.stat(self.path), lambda: os.fstat(1), lambda: os.fstat(2)):
            try:
                st = stat()
                marks += [st.st_size, st.st_mtime]
            except OSError:
                marks += [-1.0, -1.0]
        return tuple(marks)

    def poll(self, force: bool = False) -> None:
        marks = self._marks()
        if marks != self.marks:
            self.marks, self.progress_at = marks, time.time()
        if self.target is None or (not force and time.monotonic() - self.sent_at < BEACON_SECONDS):
            return
        summary = beacon.from_records(self.path, self.progress_at)
        text = beacon.with_beacon(self.head, summary) if summary else ""
        if not text or text == self.sent:
            return
        try:
            commands.set_job_comment(self.target, text, bin_dir=self.bin_dir)
            self.sent, self.sent_at = text, time.monotonic()
        except SlurmYoloError as e:
            self.sent_at = time.monotonic()  # try again after the interval, not on every poll
            self._fail(e)

    def _fail(self, e: SlurmYoloError) -> None:
        if not self.failed:
            print(
                f"slurm-yolo: the job's summary could not be written to its Comment ({e}); the controller "
                "learns nothing from this run",
                file=sys.stderr,
            )
        self.failed = True


def start_record(
    s: spec_mod.TrainSpec, gpus: int, cpus: int, planned: spec_mod.TrainSpec | None = None
) -> dict[str, Any]:
    """The workload this job trains (dataset counted, model resolved as yolo-sbatch did: ``planned``,
    a resumed run's epochs left, else ``s``), the run's epochs as its results.csv numbers them (``s``:
    a resumed run's all), and the CPUs it has (a GPU site's data-loader term reads them)."""
    batch = s.get("batch")  # a batch the user named; auto (-1, a memory fraction) is ultralytics' choice: unknown
    record: dict[str, Any] = {
        "kind": "start",
        "imgsz": s.imgsz,
        "epochs": s.epochs,
        "batch": s.batch if isinstance(batch, (int, float)) and batch >= 1 else None,
        "gpus": max(1, gpus),
        "cpus": cpus,
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
    }
    try:
        cfg = config_mod.load()
        counts = dataset.count(str(s.get("data")), cfg.cache_dir / "datasets.json")
        model = estimate.resolve_model(s.model, cfg.estimate.reference_gflops, sys.executable, cfg.cache_dir)
        record["workload"] = estimate.workload(planned or s, counts.train, counts.val, model).to_dict()
    except SlurmYoloError as e:
        record["warning"] = f"workload unknown: {e}"
    return record


def finished_before(path: Path) -> bool:
    """An earlier run of this job trained to its end (its ``end`` record): Slurm may run the job once
    more all the same (24.11 requeues a preempted job that ends in its grace, finished or not)."""
    return any(rec.get("kind") == "end" for rec in iter_records(path))


def last_checkpoint(path: Path) -> str | None:
    """The newest checkpoint an earlier run of this job recorded, if it still exists."""
    last = None
    for rec in iter_records(path):
        if rec.get("kind") == "checkpoint":
            last = rec.get("last")
    return last if last and Path(last).exists() else None


ZIP_END = b"PK\x05\x06"  # a zip's end-of-central-directory record, its last 22 bytes when it has no comment


def whole_checkpoint(path: Path) -> bool:
    """A checkpoint written to its end. torch saves a zip without a comment, so its last 22 bytes are
    the record that ends the zip; a file ultralytics is still writing (in place) ends in tensor data."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < 22:
                return False
            f.seek(-22, os.SEEK_END)
            tail = f.read(22)
    except OSError:
        return False
    return tail[:4] == ZIP_END and tail[-2:] == b"\0\0"


class RunFolder:
    """An ultralytics run folder as training writes it: the results.csv rows added since this run
    began (one per finished epoch), and whether last.pt was saved, whole, after the newest row
    (ultralytics writes the row, then last.pt, then best.pt)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.csv = path / "results.csv"
        self.last = path / "weights" / "last.pt"
        self._stamp: tuple[int, int] | None = None
        rows = self._rows()
        self.seen = len(rows)  # rows of earlier runs (a resumed run appends to their file)
        self.epoch = rows[-1].epoch if rows else 0

    def _rows(self) -> list[EpochRow]:
        try:
            return read_results_csv(self.csv, whole_lines=True)
        except UsageError:  # not written yet (or gone: a DDP start remakes the folder)
            return []

    @staticmethod
    def _mtime(path: Path) -> int | None:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return None

    def new_rows(self) -> list[EpochRow]:
        """Rows written since the last call (the file is read only when it changed)."""
        try:
            st = self.csv.stat()
        except OSError:
            return []
        if (st.st_mtime_ns, st.st_size) == self._stamp:
            return []
        self._stamp = (st.st_mtime_ns, st.st_size)
        rows = self._rows()
        new, self.seen = rows[self.seen :], max(self.seen, len(rows))
        if new:
            self.epoch = new[-1].epoch
        return new

    def saved(self) -> bool:
        """last.pt saved after the newest row, and every checkpoint written since that row whole
        (best.pt follows last.pt: stopping while it is written would leave it cut short)."""
        rows_at, last_at = self._mtime(self.csv), self._mtime(self.last)
        if rows_at is None or last_at is None or last_at < rows_at:
            return False
        recent = [p for p in self.last.parent.glob("*.pt") if (self._mtime(p) or 0) >= rows_at]
        return all(whole_checkpoint(p) for p in recent)


PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_parent() -> None:
    """In the training child, before it runs: SIGKILL when the launcher dies, however it dies. In a
    session of its own, the child is out of reach of a kill aimed at the launcher's process group,
    and a Slurm that tracks a job's processes by their parents (proctrack/linuxproc) loses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it. A process group would not do: torch's DDP
    launcher starts each worker in a session of its own."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def running(pids: set[int]) -> set[int]:
    """Those of ``pids`` not yet ended (a zombie has: only its exit status is left)."""
    left = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                left.add(pid)
        except OSError:
            continue
    return left


def signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def freeze(root: int) -> set[int]:
    """SIGSTOP ``root``'s tree, again until no process in it is left running (one may fork while its
    parent is being stopped); the stopped processes."""
    frozen: set[int] = set()
    while True:
        pids = process_tree(root) - frozen
        if not pids:
            return frozen
        signal_all(pids, signal.SIGSTOP)
        frozen |= pids
        time.sleep(0.05)  # let the stops land before looking for children again


class GpuUsage:
    """Peak GPU memory, mean utilisation and the hottest temperature of the training's GPUs between two
    epoch records, and the GPU's memory, sampled by NVML from outside (DDP workers included). Nothing
    without a GPU, NVML or a process of the training on a GPU (a GPU is counted only while the
    training's processes use it: a shard job shares it with others). ``efficiency`` reads them."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.total_bytes = 0
        self.hottest: float | None = None
        self.utilisation: list[float] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml: Any = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: no telemetry
            self.handles = []

    def sample(self, pids: set[int]) -> None:
        for h in self.handles:
            try:
                used = sum(
                    p.usedGpuMemory or 0 for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid in pids
                )
                if used:
                    self.peak_bytes = max(self.peak_bytes, used)
                    self.total_bytes = max(self.total_bytes, int(self.nvml.nvmlDeviceGetMemoryInfo(h).total))
                    self.utilisation.append(float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu))
                    temp = float(self.nvml.nvmlDeviceGetTemperature(h, self.nvml.NVML_TEMPERATURE_GPU))
                    self.hottest = temp if self.hottest is None else max(self.hottest, temp)
            except self.nvml.NVMLError:
                continue

    def take(self) -> dict[str, float]:
        """What was seen since the last call, as the epoch record's fields."""
        out = {}
        if self.peak_bytes:
            out["gpu_mem_gb"] = self.peak_bytes / 1e9
        if self.total_bytes:
            out["gpu_mem_total_gb"] = self.total_bytes / 1e9
        if self.utilisation:
            out["gpu_util_pct"] = sum(self.utilisation) / len(self.utilisation)
        if self.hottest is not None:
            out["gpu_temp_c"] = self.hottest
        self.peak_bytes, self.total_bytes, self.hottest, self.utilisation = 0, 0, None, []
        return out


class Supervisor:
    """Follows one training child to its end, writing the usage records; USR2 (the time limit) and
    USR1 (a preemption) checkpoint and requeue, SIGTERM and SIGINT stop the training."""

    def __init__(
        self,
        s: spec_mod.TrainSpec,
        log: UsageLog,
        cpus: int,
        resume_from: str | None,
        planned: spec_mod.TrainSpec | None = None,
    ) -> None:
        self.spec, self.log, self.cpus, self.resume_from = s, log, cpus, resume_from
        self.planned = planned  # a resumed run: the epochs it has left (``s``: the whole run's)
        self.started = time.monotonic()
        self.images = 0
        self.folder: RunFolder | None = None
        self.gpu = GpuUsage()
        self.requeue_after: int | None = None  # USR2/USR1: requeue at the first checkpoint after this many rows
        self.requeue_why = "time limit"
        self.stop_signal = 0
        self.saved_rows = 0  # results.csv rows when last.pt was last saved after the newest
        self.checkpoint_epoch = 0
        self.row_time = 0.0  # results.csv's time of the previous row of this run (it restarts at 0 on resume)
        self.row_seen = time.monotonic()
        self.metrics: dict[str, float] = {}
        self.reporter = CommentReporter(log.path)

    def _on_requeue(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGUSR1:
            self.requeue_why = "preempted"
        if self.requeue_after is None:
            self.requeue_after = self.saved_rows

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stop_signal = signum

    def run(self, plan: dict[str, Any]) -> int:
        """Start the training child for ``plan`` and follow it; the exit code for the job."""
        signal.signal(signal.SIGUSR2, self._on_requeue)
        signal.signal(signal.SIGUSR1, self._on_requeue)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        if self.resume_from:  # its rows are there before the child starts: count them as earlier runs'
            self.folder = RunFolder(Path(self.resume_from).parent.parent)
            self.saved_rows = self.folder.seen
        report, write_end = os.pipe()
        self.child = subprocess.Popen(
            [*TRAINER, json.dumps(plan), str(write_end)],
            pass_fds=(write_end,),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        os.close(write_end)
        try:
            with os.fdopen(report, "rb") as reader:
                return self._follow(reader)
        except BaseException:  # the training must not outlive its launcher (Slurm's kill may miss it)
            signal_all(process_tree(self.child.pid), signal.SIGKILL)
            raise

    def _follow(self, reader: BinaryIO) -> int:
        """Every poll: the child's report until it comes, the run folder, the child's exit, a stop or
        a requeue that is due; the exit code."""
        pending: BinaryIO | None = reader
        buffer = b""
        while True:
            wait = POLL_SECONDS if self.requeue_after is None else REQUEUE_POLL_SECONDS
            if pending is not None and select.select([pending], [], [], wait)[0]:
                chunk = os.read(pending.fileno(), 4096)
                buffer += chunk
                if not chunk or b"\n" in buffer:
                    pending = None
                    self._started(buffer)
            elif pending is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.child.wait(wait)  # an exit ends the wait at once
            self._read_folder()
            self.reporter.poll()
            code = self.child.poll()
            if code is not None:
                break
            if self.stop_signal:
                return self._terminate()
            if self._requeue_due() and self._stop_at_checkpoint():
                return self._requeue()
        self._read_folder()
        if code == 0 and self.folder is not None:
            self.log.write(
                {
                    "kind": "end",
                    "epochs_completed": self.folder.epoch,
                    "seconds": time.monotonic() - self.started,
                    "metrics": self.metrics,
                }
            )
            self.reporter.poll(force=True)  # before the job ends: the epilog reads the Comment as it is then
        return code if code >= 0 else 128 - code

    def _started(self, report: bytes) -> None:
        """The child's one report (where the run folder is, how many GPUs train): the start record."""
        try:
            facts = json.loads(report.split(b"\n")[0])
        except ValueError:
            return  # it ended before training: its exit code says how
        record = start_record(self.spec, int(facts["gpus"]), self.cpus, self.planned)
        self.images = int((record.get("workload") or {}).get("train_images") or 0)  # 0: the data yaml did not count
        self.log.write(record)
        if self.resume_from:
            self.log.write({"kind": "resume", "from": self.resume_from})
        else:
            self.folder = RunFolder(Path(facts["save_dir"]))

    def _read_folder(self) -> None:
        """Records for what the run folder shows that is new: finished epochs, a saved checkpoint."""
        if self.folder is None:
            return
        if self.gpu.handles:
            self.gpu.sample(process_tree(self.child.pid))
        for row in self.folder.new_rows():
            now = time.monotonic()
            seconds = row.time - self.row_time if row.time is not None else now - self.row_seen
            self.row_time, self.row_seen = row.time or 0.0, now
            self.metrics = {k: v for k, v in row.values.items() if k not in ("epoch", "time")}
            images = self.images
            self.log.write(
                {
                    "kind": "epoch",
                    "epoch": row.epoch,
                    "epochs": self.spec.epochs,
                    "images": images,
                    "tokens": images * self.spec.imgsz**2,
                    "seconds": seconds,
                    "images_per_s": images / seconds if seconds > 0 else None,
                    "metrics": self.metrics,
                    **self.gpu.take(),
                }
            )
        if self.folder.seen > self.saved_rows and self.folder.saved():  # not the final strip of last.pt: no new row
            self.saved_rows, self.checkpoint_epoch = self.folder.seen, self.folder.epoch
            self.log.write({"kind": "checkpoint", "epoch": self.checkpoint_epoch, "last": str(self.folder.last)})

    def _requeue_due(self) -> bool:
        """A requeue was asked for, this is a job, and an epoch after the ask is saved. Not after the
        last epoch: only the final validation is left, which a requeued run would do again anyway."""
        return (
            self.requeue_after is not None
            and "SLURM_JOB_ID" in os.environ
            and self.saved_rows > self.requeue_after
            and self.checkpoint_epoch < self.spec.epochs
        )

    def _stop_at_checkpoint(self) -> bool:
        """Freeze the training, and kill it if its newest epoch is checkpointed and every checkpoint
        whole (it may have gone on since the last look); else let it go on."""
        frozen = freeze(self.child.pid)
        self._read_folder()
        if self.folder is None or self.folder.seen > self.saved_rows or not self.folder.saved():
            signal_all(frozen, signal.SIGCONT)
            return False
        signal_all(frozen, signal.SIGKILL)
        self.child.wait()
        return True

    def _requeue(self) -> int:
        """Record the requeue, then ask Slurm for it (an array task alone, never its whole array);
        in a preemption's grace, a Slurm that requeues a preempted job ending there
        (``commands.requeues_when_preempted_job_ends``) is left to do it: the job just ends."""
        job = _job_target()
        assert job is not None  # _requeue_due: this is a job
        bin_dir = _bin_dir()
        why = self.requeue_why
        preempted = why == "preempted" and commands.preempted(job, bin_dir=bin_dir)
        if why == "preempted" and not preempted:
            why = "USR1 without a preemption"
        self.log.write({"kind": "requeue", "epoch": self.checkpoint_epoch, "why": why})
        self.reporter.poll(force=True)
        if not (preempted and commands.requeues_when_preempted_job_ends(bin_dir=bin_dir)):
            commands.requeue(job, bin_dir=bin_dir)
        return 0

    def _terminate(self) -> int:
        """SIGTERM the training (DDP workers too), SIGKILL what is left after a grace; 128 + the signal."""
        tree = process_tree(self.child.pid)
        signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while running(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        signal_all(running(tree | process_tree(self.child.pid)), signal.SIGKILL)
        self.child.wait()
        return 128 + self.stop_signal


def run_start(restart: int) -> str:
    """The line each run of the job starts with in its log (the script appends: --open-mode=append),
    with the limit it runs under: a run requeued for time may come back with a longer one (``limits``)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    limit = ""
    if job.isdigit():
        try:
            limit = commands.show_job(int(job), bin_dir=_bin_dir()).get("TimeLimit", "")
        except SlurmYoloError:
            limit = ""
    return (
        f"slurm-yolo: run {restart + 1} of job {job or '-'} starts {time.strftime('%Y-%m-%d %H:%M:%S')}"
        + (f", time limit {limit}" if limit else "")
        + (" (requeued)" if restart else "")
    )


def run(words: list[str]) -> int:
    """Train as the user asked, inside the allocation; the process exit code."""
    s = spec_mod.parse(words)
    cpus = _cpus()
    args = dict(s.args)
    args.pop("model", None)
    args["workers"] = loader_workers(args, cpus, _ranks())
    if s.model.endswith(".yaml"):
        args.setdefault("pretrained", False)
    log = UsageLog(usage_path())
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    restarted = restart > 0
    logger.info("%s", run_start(restart))
    if restarted and finished_before(log.path):
        logger.info("slurm-yolo: an earlier run of this job finished its training; nothing left to do")
        return 0
    asked = resume_mod.checkpoint(s)  # the user's own resume (resume model=last.pt, resume=last.pt)
    resume_from = last_checkpoint(log.path) if restarted else (str(asked) if asked else None)
    plan = {"model": s.model, "task": s.task, "args": args, "resume": resume_from, "cpus": cpus}
    whole, planned = checkpoint_run(s) if asked else (s, None)
    # the site's datasets and weights folders (the script exports them): the training's, DDP workers' too
    with assets.ultralytics_folders(os.environ.get(assets.ENV_DATASETS, ""), os.environ.get(assets.ENV_WEIGHTS, "")):
        return Supervisor(whole, log, cpus, resume_from, planned).run(plan)


def checkpoint_run(s: spec_mod.TrainSpec) -> tuple[spec_mod.TrainSpec, spec_mod.TrainSpec | None]:
    """A user's resume (``train resume model=RUN/weights/last.pt``) as its checkpoint's run folder
    says (``resume.checkpoint_run``): the whole run, whose epochs the records count against (25/40,
    not ultralytics' default 100) with its own data's images, and the epochs it has left, which this
    job trains (the workload, as yolo-sbatch planned it). ``s`` itself, where the folder says too
    little: the records then know less, and the training goes on all the same."""
    try:
        found = resume_mod.checkpoint_run(s)
    except UsageError as e:
        logger.warning("slurm-yolo: %s: the usage records count this run as its command line says", e)
        return s, None
    if found is None:
        return s, None
    _, whole, done = found
    return whole, whole._replace(args={**whole.args, "epochs": max(1, whole.epochs - done)})
