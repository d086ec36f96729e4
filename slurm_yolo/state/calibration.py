"""k per partition: the samples it is fitted from, the current fit and its history (calibration.db).

The database is written by admins and the SlurmUser (calibrate, job feedback, cron refits) and read
by every user's ``yolo-sbatch``. It stays in rollback-journal mode: writes are rare, and readers
without write access can then always read it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from slurm_yolo.core import gputypes
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model import gpu_priors, priors
from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import RECORDED_OPTIONS, Sample, TimeModel
from slurm_yolo.slurm import visibility
from slurm_yolo.state import db

if TYPE_CHECKING:
    from slurm_yolo.core.spec import TrainSpec

MIGRATIONS = (
    """
CREATE TABLE samples (
    id INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    key TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    source TEXT NOT NULL,
    workload TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    train_seconds REAL NOT NULL,
    total_seconds REAL,
    UNIQUE (partition, key)
);
CREATE TABLE params (
    partition TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source TEXT NOT NULL
);
CREATE TABLE history (
    id INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    at TEXT NOT NULL,
    model TEXT NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX history_partition ON history (partition, at)
""",
    # CPUs the run had: a GPU site's data-loader term needs them (images per second per loader CPU).
    "ALTER TABLE samples ADD COLUMN cpus INTEGER NOT NULL DEFAULT 0",
    # Whose job each run and each feedback change was (an admin's save has no uid: it opens a new
    # budget window), and what each job's feedback asked to move and was allowed to (feedback.py):
    # a user's jobs together move a partition's terms by a bounded factor per window.
    """
ALTER TABLE samples ADD COLUMN uid INTEGER;
ALTER TABLE history ADD COLUMN uid INTEGER;
CREATE TABLE moves (
    id INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    key TEXT NOT NULL,
    uid INTEGER NOT NULL,
    window_id INTEGER NOT NULL,
    at TEXT NOT NULL,
    k_asked REAL NOT NULL,
    k_applied REAL NOT NULL,
    startup_asked REAL NOT NULL,
    startup_applied REAL NOT NULL,
    UNIQUE (partition, key)
);
CREATE INDEX moves_user ON moves (partition, uid, window_id)
""",
    # The options of a run the model has no term for yet (timemodel.RECORDED_OPTIONS): JSON, {} unknown.
    "ALTER TABLE samples ADD COLUMN options TEXT NOT NULL DEFAULT '{}'",
    # The fixed time terms' own factor: a user's budget covers each term the feedback moves, not k
    # alone (moves recorded before moved them with k or not at all: counted as not at all).
    """
ALTER TABLE moves ADD COLUMN fixed_asked REAL NOT NULL DEFAULT 1.0;
ALTER TABLE moves ADD COLUMN fixed_applied REAL NOT NULL DEFAULT 1.0
""",
)

WINDOW = 500  # most recent samples a refit reads


def now() -> str:
    """UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


# The [estimate] keys that are priors of the time model's terms (same names as TimeModel's fields).
PRIOR_KEYS = (
    "k",
    "overhead_seconds",
    "val_weight",
    "iteration_seconds",
    "startup_seconds",
    "epoch_seconds",
    "val_pass_seconds",
    "imgsz_exponent",
    "imgsz_curvature",
    "batch_exponent",
    "iteration_exponent",
    "startup_exponent",
    "loader_seconds",
    "image_seconds",
    "val_image_seconds",
)


def _gpu_prior(config: Config, partition: str) -> tuple[TimeModel, str] | None:
    """The GPU-type prior of a partition whose card is known (``gputypes.card``), with its name."""
    if not partition or config.estimate.priors != "shipped":
        return None
    card = gputypes.card(config.partition(partition))
    if card.type is None:
        return None
    base = TimeModel(**{key: getattr(config.estimate, key) for key in PRIOR_KEYS})
    return gpu_priors.model_for(base, card, gpu_priors.shipped())


def prior(config: Config, partition: str = "") -> TimeModel:
    """The model of a partition nobody has calibrated, and what every fit shrinks toward: on a known
    GPU type, its GPU-type priors (``gpu_priors``); else the config's priors, with the shipped CPU
    corpus' shape, fixed costs and factors where ``estimate.priors`` is "shipped" (``priors``)."""
    gpu = _gpu_prior(config, partition)
    if gpu:
        return gpu[0]
    e = config.estimate
    base = TimeModel(**{key: getattr(e, key) for key in PRIOR_KEYS})
    return priors.apply(base, priors.shipped()) if e.priors == "shipped" else base


def prior_name(config: Config, partition: str = "") -> str:
    """Where an uncalibrated partition's model comes from, for ``--explain``."""
    gpu = _gpu_prior(config, partition)
    if gpu:
        return gpu[1]
    unknown = gputypes.unknown_line(config.partition(partition)) if partition in config.partitions else ""
    if config.estimate.priors == "shipped":
        return "shipped priors (the corpus' shape and costs, the config's k and start-up)" + (
            f"; {unknown}" if unknown else ""
        )
    return "config priors"


def _model_json(tm: TimeModel) -> str:
    return json.dumps(asdict(tm), sort_keys=True)


def _model_from_json(text: str) -> TimeModel:
    return TimeModel.from_dict(json.loads(text))


class Calibrated(NamedTuple):
    """A partition's time model and where it came from (shown by --explain)."""

    model: TimeModel
    source: str  # "shipped priors (...)", "config priors (...)" or "calibrate 2026-11-30T... (12 runs)"
    stale: str = ""  # a calibration set aside: it was fitted on another card than the partition has now


def db_path(config: Config) -> Path:
    """The SlurmUser's own database (users read its published copy: ``db.connect_read``)."""
    return db.private_dir(config.state_dir) / "calibration.db"


def load(config: Config, partition: str) -> Calibrated:
    """The partition's current model (read-only; the prior when uncalibrated)."""
    conn = db.connect_read(db_path(config), config.public_dir)
    if conn is None:
        return Calibrated(prior(config, partition), f"{prior_name(config, partition)} (no calibration database)")
    try:
        row = conn.execute("SELECT * FROM params WHERE partition = ?", (partition,)).fetchone()
    except sqlite3.OperationalError:
        row = None  # a database older than its schema
    finally:
        conn.close()
    if row is None:
        return Calibrated(
            prior(config, partition), f"{prior_name(config, partition)} (partition {partition} not calibrated)"
        )
    tm = _model_from_json(row["model"])
    fitted, now_card = tm.fitted_on(), gputypes.card_key(config.partition(partition))
    if fitted and fitted != now_card:
        stale = (
            f"partition {partition}'s calibration ({row['source']} {row['updated_at']}, {tm.n} runs) was fitted on"
            f" card {fitted}, and its card is now {now_card}"
        )
        return Calibrated(
            prior(config, partition),
            f"{prior_name(config, partition)} ({stale}: set aside until calibrated again)",
            stale,
        )
    return Calibrated(tm, f"{row['source']} {row['updated_at']} ({tm.n} runs, form {tm.form})")


class HistoryEntry(NamedTuple):
    """One change of a partition's model."""

    partition: str
    at: str
    source: str
    model: TimeModel


def history(config: Config, partition: str | None = None) -> list[HistoryEntry]:
    """Every model a partition (or every partition) has had, oldest first (read-only)."""
    conn = db.connect_read(db_path(config), config.public_dir)
    if conn is None:
        return []
    try:
        rows = conn.execute(
            "SELECT partition, at, source, model FROM history WHERE ? IS NULL OR partition = ? ORDER BY id",
            (partition, partition),
        ).fetchall()
    finally:
        conn.close()
    return [HistoryEntry(r["partition"], r["at"], r["source"], _model_from_json(r["model"])) for r in rows]


def publish(config: Config) -> None:
    """Write calibration.db's published copy again, changed or not (``ledger publish``: a new public
    folder has the time models before their next save)."""
    with Store(config) as store:
        store.publish()


def redact_runs(copy: sqlite3.Connection) -> None:
    """Leave each job's and run folder's sample, and who moved a model, out of a published copy
    (Slurm's PrivateData hides other users' jobs): the models and their history stay, which is all a
    login node plans with."""
    copy.executescript("""
        BEGIN;
        DELETE FROM samples; DELETE FROM moves;
        UPDATE history SET source = 'a job''s feedback' WHERE uid IS NOT NULL;
        UPDATE history SET uid = NULL;
        UPDATE params SET source = 'a job''s feedback' WHERE source LIKE 'job %';
        COMMIT;
    """)


class Store:
    """Read-write access to calibration.db; a context manager, so root writes as the state's owner."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._stack = ExitStack()
        self._stack.enter_context(db.as_state_owner(config.state_dir, config.paths.owner))
        try:
            self.conn = db.connect_write(db.writable(db_path(config), config.paths.owner), MIGRATIONS)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Publish what changed (still as the state's owner), then let go."""
        try:
            if self.conn.total_changes:
                self.publish()
        finally:
            self.conn.close()
            self._stack.close()

    def publish(self) -> None:
        """Write the published copy (as the state's owner), without what PrivateData hides."""
        redact = redact_runs if visibility.hides_jobs(self.config) else None
        db.publish_copy(db.backup_into(self.conn), db_path(self.config), self.config.public_dir, redact)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (taken at once: no other writer between a read and its write);
        inside one already, part of it."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def add_sample(self, partition: str, sample: Sample, source: str, uid: int | None = None) -> bool:
        """Record a run (``uid``: the job's user); False when this key was recorded already
        (calibrating twice changes nothing)."""
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO samples (partition, key, recorded_at, source, workload, gpus, train_seconds,"
            " total_seconds, cpus, uid, options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                partition,
                sample.key,
                now(),
                source,
                json.dumps(sample.workload.to_dict()),
                sample.gpus,
                sample.train_seconds,
                sample.total_seconds,
                sample.cpus,
                uid,
                json.dumps(sample.options or {}, sort_keys=True),
            ),
        )
        return cur.rowcount == 1

    def sample_sources(self, partition: str) -> dict[str, int]:
        """How many of the partition's samples each source gave (``run-dir``: calibrations, ``job``:
        finished jobs' feedback): a refit uses them all, not only the runs just added."""
        rows = self.conn.execute(
            "SELECT source, COUNT(*) FROM samples WHERE partition = ? GROUP BY source ORDER BY source", (partition,)
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def window(self, partition: str) -> int:
        """The budget window feedback moves fall in: the history id of the partition's last save
        without a uid (an admin's: calibrate, recalibrate), 0 before any."""
        row = self.conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM history WHERE partition = ? AND uid IS NULL", (partition,)
        ).fetchone()
        return int(row[0])

    def moved_by(self, partition: str, uid: int) -> tuple[float, float, float]:
        """(k, fixed terms, start-up): the factors one user's jobs have moved the partition by in this
        window."""
        rows = self.conn.execute(
            "SELECT k_applied, fixed_applied, startup_applied FROM moves"
            " WHERE partition = ? AND uid = ? AND window_id = ?",
            (partition, uid, self.window(partition)),
        ).fetchall()
        k, fixed, startup = (math.prod(r[i] for r in rows) for i in range(3))
        return k, fixed, startup

    def add_move(
        self, partition: str, key: str, uid: int, asked: tuple[float, float, float], applied: tuple[float, float, float]
    ) -> None:
        """Record what one job's feedback asked to move (k, fixed terms, start-up factors) and what it
        moved: the difference waits for the next refit, which reads the job's sample."""
        self.conn.execute(
            "INSERT INTO moves (partition, key, uid, window_id, at, k_asked, fixed_asked, startup_asked,"
            " k_applied, fixed_applied, startup_applied) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (partition, key, uid, self.window(partition), now(), *asked, *applied),
        )

    def samples(self, partition: str, limit: int = WINDOW, since: str = "") -> list[Sample]:
        """The newest samples of a partition (recorded at or after ``since``, an ISO time)."""
        rows = self.conn.execute(
            "SELECT * FROM samples WHERE partition = ? AND recorded_at >= ? ORDER BY id DESC LIMIT ?",
            (partition, since, limit),
        ).fetchall()
        return [
            Sample(
                Workload(**json.loads(r["workload"])),
                r["gpus"],
                r["train_seconds"],
                r["key"],
                r["total_seconds"],
                r["cpus"],
                json.loads(r["options"]) or None,
                r["uid"] if r["source"] == "job" else None,  # a job's summary: its user wrote it
            )
            for r in rows
        ]

    def save(self, partition: str, tm: TimeModel, source: str, uid: int | None = None) -> None:
        """Make ``tm`` the partition's model and append it to the history, in one transaction.
        ``uid``: the user whose job's feedback this is; without one, an admin's save, which opens a
        new budget window for the users' feedback."""
        at = now()
        text = _model_json(replace(tm, card=gputypes.card_key(self.config.partition(partition))))
        with self.transaction():
            self.conn.execute(
                "INSERT INTO params (partition, model, updated_at, source) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (partition) DO UPDATE SET model = excluded.model, updated_at = excluded.updated_at,"
                " source = excluded.source",
                (partition, text, at, source),
            )
            self.conn.execute(
                "INSERT INTO history (partition, at, model, source, uid) VALUES (?, ?, ?, ?, ?)",
                (partition, at, text, source, uid),
            )

    def partitions(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT partition FROM samples ORDER BY partition")]


def run_data(run: Path, data: str) -> str | None:
    """A run's ``data:`` as its training read it. A relative path was read from the folder the training
    ran in, which the run folder sits below (``runs/detect/train*``, or PROJECT/NAME), not from where
    ``calibrate`` runs: the nearest folder at or above the run that has it (None: none has it)."""
    if os.path.isabs(data):
        return data
    run = run.resolve()
    for folder in (run, *run.parents):
        if (folder / data).is_file():
            return str(folder / data)
    return None


class RunFacts(NamedTuple):
    """What a run folder says, read with its owner's rights: args.yaml, results.csv's time and
    epochs, and its data yaml's image counts."""

    args: dict[str, Any]
    seconds: float
    epochs: int
    counts: tuple[str, int, int, str]  # dataset.DatasetCounts


def _run_facts(path: Path, cache: Path | None) -> RunFacts:
    from slurm_yolo.core import dataset, spec  # admin path only: the hooks import this module too
    from slurm_yolo.parse.results import read_run_dir

    run = read_run_dir(path)
    seconds = run.train_seconds
    if not seconds or seconds <= 0:
        raise UsageError(f"{path}: results.csv has no training time")
    known = set(spec.ultralytics_cfg()["defaults"])
    args = {k: v for k, v in run.args.items() if k in known and k not in ("task", "mode")}
    data = args.get("data")
    if not data:
        raise UsageError(f"{path}/args.yaml names no data yaml")
    found, builtin = run_data(path, str(data)), dataset.builtin_name(str(data)) is not None
    if found is None and not builtin:
        raise UsageError(
            f"{path}: its data yaml {data} is a relative path, and neither the run's folder nor "
            "any folder above it (where its training ran) has it"
        )
    try:
        counts = dataset.count(found or str(data), cache)
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from None
    return RunFacts(
        {**args, "task": run.args.get("task")},
        float(seconds),
        run.epochs_completed,
        (counts.yaml_path, counts.train, counts.val, counts.source),
    )


def named_owner(path: Path) -> int:
    """Whose rights a run folder is read with: the user who owns it, or a link on the way to it, as
    named (root's own run only where root owns them all). Two users on the way is refused: one could
    lead root into the other's files."""
    users = set()
    here = Path(os.path.abspath(path))
    for part in (*reversed(here.parents), here):
        try:
            st = part.lstat()
        except OSError:
            break
        if stat.S_ISLNK(st.st_mode) and st.st_uid != 0:
            users.add(st.st_uid)
    try:
        owner = path.stat().st_uid
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    users |= {owner} - {0}
    if len(users) > 1:
        raise UsageError(
            f"{path}: reached through links of other users (uids {', '.join(map(str, sorted(users)))}): not read"
        )
    return users.pop() if users else 0


def _as_user(uid: int, path: Path, read: Callable[[], RunFacts]) -> RunFacts:
    """``read()`` in a child that is user ``uid`` for good (real and effective ids, her groups): root
    reads for a user only what the kernel lets her read, every path on the way (the data yaml, its
    image and label folders, lists, links), and its errors are those she would get herself."""
    import pwd

    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise UsageError(f"uid {uid} owns the run folder but is no user here: not read") from None
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(rfd)
        try:
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(uid)
            out: dict[str, Any] = {"facts": read()._asdict()}
        except UsageError as e:
            out = {"error": str(e)}
        except OSError as e:
            out = {"error": f"{path}: {e.strerror or type(e).__name__} for its owner (uid {uid}): not read"}
        except BaseException as e:  # noqa: BLE001 - the child reports, the parent raises
            out = {"error": f"{path}: {type(e).__name__}: not read"}
        with os.fdopen(wfd, "w") as f:
            f.write(json.dumps(out, default=str))
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        text = f.read()
    os.waitpid(pid, 0)
    try:
        out = json.loads(text)
    except ValueError:
        raise UsageError("the run folder's reader died: not read") from None
    if "error" in out:
        raise UsageError(str(out["error"]))
    return RunFacts(**out["facts"])


def sample_from_run_dir(path: Path, config: Config) -> Sample:
    """A calibration sample from an ultralytics run folder (its data yaml must still be readable).
    Root reads it as the user it is named by (``named_owner``), without the dataset cache."""
    from slurm_yolo.core import spec
    from slurm_yolo.core.model import estimate

    owner = named_owner(path) if os.geteuid() == 0 else 0
    if owner:
        from slurm_yolo.core import dataset  # noqa: F401 - imported here, so the child reads no code as the user
        from slurm_yolo.parse import results  # noqa: F401

        spec.ultralytics_cfg()
        facts = _as_user(owner, path, lambda: _run_facts(path, None))
    else:
        facts = _run_facts(path, config.cache_dir / "datasets.json")
    args = dict(facts.args)
    s = spec.TrainSpec(task=args.pop("task"), mode="train", args=args)
    _, train, val, _ = facts.counts
    reference = config.estimate.reference_gflops
    model = estimate.resolve_model(s.model, reference, config.job.python, config.cache_dir)
    try:
        w = estimate.workload(s, train, val, model, epochs_done=facts.epochs)
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from None
    gpus = max(1, s.devices or 0)  # device=cpu counts as one device
    sample = Sample(workload=w, gpus=gpus, train_seconds=facts.seconds, key=str(path.resolve()), options=run_options(s))
    if why := implausible(sample, s.epochs):
        raise UsageError(f"{path}: {why}: not a run this partition's model may learn from")
    return sample


# What a real run can be: a run folder is its user's file, and one impossible run would move the model
# every user's limits come from, and stretch its calibrated range to nothing.
PLAUSIBLE = {"imgsz": (32, 16384), "batch": (1, 1 << 16), "gpus": (1, 64), "train_seconds": (1e-3, 366 * 86400.0)}


def implausible(s: Sample, epochs_asked: int) -> str:
    """Why a run folder's sample is not a run (empty: it may be one)."""
    values = {"imgsz": s.workload.imgsz, "batch": s.workload.batch, "gpus": s.gpus, "train_seconds": s.train_seconds}
    for key, value in values.items():
        low, high = PLAUSIBLE[key]
        if not (math.isfinite(value) and low <= value <= high):
            return f"{key} {value:g} is outside {low:g}-{high:g}"
    if s.workload.epochs > max(1, epochs_asked):
        return f"{s.workload.epochs} epochs in results.csv, {epochs_asked} asked"
    return ""


def run_options(s: TrainSpec) -> dict[str, bool | int | str]:
    """The run's ``RECORDED_OPTIONS`` as ultralytics used them (its defaults where args.yaml is
    silent); a value of another shape than the option's (the folder is a user's) is left out."""
    out: dict[str, bool | int | str] = {}
    for key in RECORDED_OPTIONS:
        value = s.get(key)
        if (
            isinstance(value, bool)
            or (isinstance(value, int) and 0 <= value < 1 << 16)
            or (isinstance(value, str) and re.fullmatch(r"[a-z]{1,8}", value))
        ):
            out[key] = value
    return out


@dataclass
class CalibrationResult:
    """What ``slurm-yolo calibrate`` did."""

    partition: str
    added: int
    skipped: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)  # the samples the fit used, per source
    model: TimeModel | None = None
    previous: TimeModel | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "added": self.added,
            "skipped": self.skipped,
            "sources": self.sources,
            "model": asdict(self.model) if self.model else None,
            "previous": asdict(self.previous) if self.previous else None,
        }


def partition_prior(config: Config, current: TimeModel, partition: str = "") -> TimeModel:
    """What a refit shrinks toward: the config's priors, with what the partition's history knows that
    its samples may not: family and model factors, and the start-up jobs measured (run folders cannot)."""
    p = replace(
        prior(config, partition),
        family_factors=current.family_factors,
        model_factors=current.model_factors,
        step_factors=current.step_factors,
    )
    if current.startup_n:
        p = replace(
            p,
            startup_seconds=current.startup_seconds,
            startup_exponent=current.startup_exponent,
            startup_factors=current.startup_factors,
            startup_n=current.startup_n,
        )
    return p


def fit_partition(config: Config, partition: str, samples: list[Sample], current: TimeModel) -> TimeModel:
    """The partition's model fitted to ``samples`` (with cross-validation and its coverage)."""
    from slurm_yolo.core.model import fitting  # numpy: admin and cron path only, and the hooks import this module

    e = config.estimate
    part = config.partition(partition)
    return fitting.fit(
        samples, partition_prior(config, current, partition), part.ddp_efficiency, e.reference_gflops, e.coverage
    )


def refit(store: Store, partition: str, source: str) -> TimeModel:
    """Refit a partition from its recorded samples and store the result."""
    tm = fit_partition(store.config, partition, store.samples(partition), load(store.config, partition).model)
    store.save(partition, tm, source)
    return tm


def calibrate_runs(config: Config, partition: str, paths: list[Path]) -> CalibrationResult:
    """Add ultralytics run folders as samples of ``partition`` and refit its model."""
    if not partition or any(ch in partition for ch in "\n\r\x00"):
        raise UsageError("--partition must be a plain name")
    result = CalibrationResult(partition=partition, added=0, previous=load(config, partition).model)
    Store(config).close()  # refuse a user without write access before reading any run
    samples = []  # read as ourselves, not as the state's owner: a custom model's child drops to its owner
    for path in paths:
        try:
            samples.append(sample_from_run_dir(path, config))
        except UsageError as e:
            result.skipped.append(str(e))
    if not samples:
        raise UsageError(f"no usable run among {len(paths)} given: " + (result.skipped[0] if result.skipped else ""))
    with Store(config) as store:
        for s in samples:
            result.added += store.add_sample(partition, s, "run-dir")
        result.model = refit(store, partition, "calibrate")
        result.sources = store.sample_sources(partition)
    return result


def calibrate_summary(result: CalibrationResult) -> str:
    """What a calibration did, in words: the runs it added, every sample the fit rests on (earlier
    calibrations' and finished jobs' too) and how far k moved, so a change of k from one new run
    does not look like the work of that run alone."""
    tm = result.model
    assert tm is not None
    names = {"run-dir": "run folders", "job": "finished jobs"}
    where = ", ".join(f"{n} from {names.get(src, src)}" for src, n in result.sources.items())
    before = result.previous.k if result.previous else None
    moved = f"; k {before:.4g} -> {tm.k:.4g} s/Mpx" if before is not None else f"; k {tm.k:.4g} s/Mpx"
    return (
        f"partition {result.partition}: {result.added} new run(s) added; its samples, all in the fit: {where}"
        f" ({tm.n} in all){moved}"
    )
