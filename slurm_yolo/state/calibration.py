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
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from slurm_yolo.core import gputypes
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model import gpu_priors, priors
from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import RECORDED_OPTIONS, Sample, TimeModel, median, quantile
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
    # A sample an admin's calibrate left out (``--exclude-user``, ``--exclude-job``): why, empty when
    # not. Saved with the fit, so the cron's refits leave it out too.
    "ALTER TABLE samples ADD COLUMN excluded TEXT NOT NULL DEFAULT ''",
    # The newest sample of the partition when an admin's fit was saved: the later ones are runs that
    # fit never saw, which calibrate judges a new fit on (NULL: saved before this column).
    "ALTER TABLE history ADD COLUMN samples_upto INTEGER",
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


def sample_sources(config: Config, partition: str) -> dict[str, int]:
    """How many of a partition's stored samples came from each source (jobs' feedback, run folders,
    probes): doctor's evidence for a poor fit's cause (read-only; {} without a store)."""
    conn = db.connect_read(db_path(config), config.public_dir)
    if conn is None:
        return {}
    try:
        rows = conn.execute(
            "SELECT source, COUNT(*) FROM samples WHERE partition = ? GROUP BY source", (partition,)
        ).fetchall()
    finally:
        conn.close()
    return {str(r[0]): int(r[1]) for r in rows}


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

    def moved_by(self, partition: str, uid: int | None) -> tuple[float, float, float]:
        """(k, fixed terms, start-up): the factors one user's jobs (``uid``; None: every user's
        together) have moved the partition by in this window."""
        rows = self.conn.execute(
            "SELECT k_applied, fixed_applied, startup_applied FROM moves"
            " WHERE partition = ? AND (? IS NULL OR uid = ?) AND window_id = ?",
            (partition, uid, uid, self.window(partition)),
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
        """The newest samples of a partition (recorded at or after ``since``, an ISO time), but those
        an admin's calibrate excluded."""
        return [r.sample for r in self.sample_rows(partition, limit, since)]

    def sample_rows(self, partition: str, limit: int = WINDOW, since: str = "") -> list[SampleRow]:
        """``samples`` with what ``calibrate`` lists of each: whose, which job, when recorded."""
        rows = self.conn.execute(
            "SELECT * FROM samples WHERE partition = ? AND recorded_at >= ? AND excluded = '' ORDER BY id DESC LIMIT ?",
            (partition, since, limit),
        ).fetchall()
        return [
            SampleRow(
                r["id"],
                Sample(
                    Workload(**json.loads(r["workload"])),
                    r["gpus"],
                    r["train_seconds"],
                    r["key"],
                    r["total_seconds"],
                    r["cpus"],
                    json.loads(r["options"]) or None,
                    r["uid"] if r["source"] == "job" else None,  # a job's summary: its user wrote it
                ),
                r["source"],
                r["uid"],
                r["recorded_at"],
            )
            for r in rows
        ]

    def exclude(self, partition: str, keys: dict[str, str]) -> None:
        """Leave these samples (key: why) out of every later fit of the partition."""
        self.conn.executemany(
            "UPDATE samples SET excluded = ? WHERE partition = ? AND key = ?",
            [(why, partition, key) for key, why in keys.items()],
        )

    def last_admin_save(self, partition: str) -> tuple[str, int | None]:
        """When an admin's fit (calibrate, recalibrate: a save without a uid) last saved the partition's
        model ("" never), and the newest sample id it could have seen (None: not recorded): the samples
        after it are runs that model was not fitted on."""
        row = self.conn.execute(
            "SELECT at, samples_upto FROM history WHERE partition = ? AND uid IS NULL ORDER BY id DESC LIMIT 1",
            (partition,),
        ).fetchone()
        return (str(row[0]), row[1]) if row else ("", None)

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
                "INSERT INTO history (partition, at, model, source, uid, samples_upto) VALUES (?, ?, ?, ?, ?,"
                " CASE WHEN ? IS NULL THEN (SELECT COALESCE(MAX(id), 0) FROM samples WHERE partition = ?) END)",
                (partition, at, text, source, uid, uid, partition),
            )

    def partitions(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT partition FROM samples ORDER BY partition")]


class SampleRow(NamedTuple):
    """A stored sample with whose it is and when it was recorded."""

    id: int  # 0: not stored (yet)
    sample: Sample
    source: str  # "run-dir" (a calibrate's) or "job" (a finished job's feedback)
    uid: int | None  # the job's user, or the run folder's owner (None: not recorded)
    recorded_at: str


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


# The comparison calibrate makes before any save (docs/time-model.md, "Calibrating"): a new fit whose
# cross-validated median error on the runs the current model was not fitted on exceeds the current
# model's on the same runs by more than TOLERANCE is not saved without --force; with fewer than
# MIN_JUDGED such runs there is nothing to judge by, and it is saved as before (unless UNJUDGED_MOVE).
TOLERANCE = 0.005
MIN_JUDGED = 2
# A fit with fewer new runs than MIN_JUDGED has no verdict; over an admin's fit (not the prior: a first
# calibration may move far from it) it is still not saved without --force when it moves a reference
# job's prediction by more than this either way (an exclusion that drops most runs)
UNJUDGED_MOVE = 2.0
# Reference jobs whose predictions calibrate shows before and after (one GPU, the site's CPUs per
# GPU): (model, imgsz, dataset, train images, val images, epochs). A small dataset's long run (fixed
# costs weigh) and one COCO epoch of two model sizes (compute weighs).
REFERENCES = (
    ("yolov8n", 640, "coco128", 128, 128, 100),
    ("yolov8s", 640, "COCO", 118_287, 5_000, 1),
    ("yolov8m", 640, "COCO", 118_287, 5_000, 1),
)


@dataclass(frozen=True)
class CalibrateOptions:
    """How ``calibrate`` saves: a preview only, over a worse fit, without some users' or jobs' runs."""

    dry_run: bool = False
    force: bool = False
    exclude_users: tuple[int, ...] = ()  # uids
    exclude_jobs: tuple[int, ...] = ()
    probe_job: int | None = None  # the probe job whose runs these are (the history's source names it)


class ErrorStats(NamedTuple):
    """A model's relative errors (predicted - actual) / actual on some runs."""

    runs: int
    median: float | None  # of |error|
    p90: float | None
    bias: float | None  # mean error: < 0 predicts short

    @classmethod
    def of(cls, pairs: list[tuple[float, float]]) -> ErrorStats:
        errors = [(pred - actual) / actual for pred, actual in pairs if actual > 0]
        if not errors:
            return cls(0, None, None, None)
        absolute = sorted(abs(e) for e in errors)
        return cls(len(errors), median(absolute), quantile(absolute, 0.9), sum(errors) / len(errors))


NO_ERRORS = ErrorStats(0, None, None, None)


@dataclass(frozen=True)
class Listed:
    """One sample as calibrate lists it."""

    key: str  # the run folder, or job:CLUSTER:ID
    source: str  # "run-dir" or "job"
    user: str  # the job's user or the run folder's owner ("" not recorded)
    job: int | None
    new: bool  # read by this calibrate
    judged: bool  # a run the current model was not fitted on: scored in the comparison
    shared_with: list[int] | None  # the other jobs on its node while it ran (None: not known)
    weight: float  # in the fit: 1 / (1 + jobs it shared its node with)
    excluded: str = ""  # why it is left out ("": in the fit)


@dataclass
class CalibrationResult:
    """What ``slurm-yolo calibrate`` did, or would do (``--dry-run``)."""

    partition: str
    added: int
    skipped: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)  # the samples the fit used, per source
    model: TimeModel | None = None
    previous: TimeModel | None = None
    previous_source: str = ""
    samples: list[Listed] = field(default_factory=list)
    current_errors: ErrorStats = NO_ERRORS
    new_errors: ErrorStats = NO_ERRORS
    judged_on: str = ""  # which runs the two were compared on, in words
    references: list[tuple[str, float, float]] = field(default_factory=list)  # (job, before, after) seconds
    worse: str = ""  # why the fit is worse than the current model ("": it is not, or no verdict)
    saved: bool = False
    source: str = ""  # what the history names as the change's cause
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "added": self.added,
            "skipped": self.skipped,
            "sources": self.sources,
            "model": asdict(self.model) if self.model else None,
            "previous": asdict(self.previous) if self.previous else None,
            "previous_source": self.previous_source,
            "samples": [asdict(s) for s in self.samples],
            "comparison": {
                "judged_on": self.judged_on,
                "current": self.current_errors._asdict(),
                "new": self.new_errors._asdict(),
                "worse": self.worse,
            },
            "references": [{"job": n, "current_s": b, "new_s": a} for n, b, a in self.references],
            "saved": self.saved,
            "source": self.source,
            "notes": self.notes,
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


def fit_partition_cv(
    config: Config, partition: str, samples: list[Sample], current: TimeModel, weights: list[float] | None = None
) -> tuple[TimeModel, list[tuple[Sample, float, float]]]:
    """The partition's model fitted to ``samples`` (with cross-validation and its coverage), and each
    run's cross-validated (run, predicted, actual) seconds."""
    from slurm_yolo.core.model import fitting  # numpy: admin and cron path only, and the hooks import this module

    e = config.estimate
    part = config.partition(partition)
    return fitting.fit_cv(
        samples,
        partition_prior(config, current, partition),
        part.ddp_efficiency,
        e.reference_gflops,
        e.coverage,
        weights,
    )


def fit_partition(config: Config, partition: str, samples: list[Sample], current: TimeModel) -> TimeModel:
    """The partition's model fitted to ``samples`` (with cross-validation and its coverage)."""
    return fit_partition_cv(config, partition, samples, current)[0]


def refit(store: Store, partition: str, source: str) -> TimeModel:
    """Refit a partition from its recorded samples and store the result."""
    tm = fit_partition(store.config, partition, store.samples(partition), load(store.config, partition).model)
    store.save(partition, tm, source)
    return tm


def job_of(key: str) -> tuple[str, int] | None:
    """(cluster, job id) of a finished job's sample key (``job:CLUSTER:ID``), None for a run folder."""
    parts = key.split(":")
    if len(parts) == 3 and parts[0] == "job" and parts[2].isdigit():
        return parts[1], int(parts[2])
    return None


def user_name(uid: int | None) -> str:
    import pwd

    if uid is None:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def shared_nodes(
    config: Config, keys: list[str], probe: list[str], probe_job: int | None
) -> tuple[dict[str, list[int]], str]:
    """For each finished job's sample of this cluster, and each of the probe job's runs (``probe``):
    the other jobs that ran on its node while it ran (Slurm's accounting), and a note when Slurm
    could not say."""
    jobs = {key: found for key in keys if (found := job_of(key))}
    if not jobs and probe_job is None:
        return {}, ""
    from slurm_yolo.core.errors import SlurmYoloError
    from slurm_yolo.slurm import commands, occupancy

    try:
        cluster = commands.cluster_name(config.bin_dir)
        mine = {key: job for key, (c, job) in jobs.items() if c == cluster}
        mine |= {key: probe_job for key in probe if probe_job is not None}
        others = occupancy.shared(sorted(set(mine.values())), config.bin_dir, config.slurm.timeout_seconds)
    except (SlurmYoloError, ValueError) as e:
        return {}, f"whether the jobs shared their nodes is unknown (Slurm: {e}); each weighs 1"
    return {key: others[job] for key, job in mine.items() if job in others}, ""


def uids(users: Sequence[str]) -> tuple[int, ...]:
    """``--exclude-user`` names (or uids) as uids; a name this host does not know is refused."""
    import pwd

    out = []
    for user in users:
        try:
            out.append(int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid)
        except KeyError:
            raise UsageError(f"--exclude-user {user!r}: no such user here") from None
    return tuple(out)


def job_ids(jobs: Sequence[int]) -> tuple[int, ...]:
    """``--exclude-job`` ids, each a job's number."""
    for job in jobs:
        if job <= 0:
            raise UsageError(f"--exclude-job {job}: a job id is a positive number")
    return tuple(jobs)


def _exclusion(row: SampleRow, options: CalibrateOptions) -> str:
    found = job_of(row.sample.key)
    if row.uid is not None and row.uid in options.exclude_users:
        return f"--exclude-user {user_name(row.uid)}"
    if found and found[1] in options.exclude_jobs:
        return f"--exclude-job {found[1]}"
    return ""


def reference_predictions(
    config: Config, partition: str, before: TimeModel, after: TimeModel
) -> list[tuple[str, float, float]]:
    """(job, seconds before, seconds after) of each of ``REFERENCES`` on one GPU of the partition."""
    from slurm_yolo.core import spec
    from slurm_yolo.core.model import estimate
    from slurm_yolo.core.model.timemodel import predict_seconds

    part, e = config.partition(partition), config.estimate
    out = []
    for name, imgsz, data, train, val, epochs in REFERENCES:
        info = estimate.lookup_model(name)
        assert info is not None  # the tables have them
        words = ["train", f"model={name}.pt", f"data={data}.yaml", f"epochs={epochs}", f"imgsz={imgsz}"]
        w = estimate.workload(spec.parse(words), train, val, info)
        was, will = (
            predict_seconds(w, tm, 1, part.ddp_efficiency, e.reference_gflops, config.job.cpus_per_gpu)
            for tm in (before, after)
        )
        out.append((f"{name} {imgsz} px, {data} ({train} images) x{epochs} epoch{'s' * (epochs > 1)}", was, will))
    return out


class Judgement(NamedTuple):
    """A new fit beside the current model on the runs the current model was not fitted on."""

    judged: frozenset[str]  # the keys of those runs
    current: ErrorStats  # the current model's predictions of them
    new: ErrorStats  # the new fit's cross-validated ones
    on: str  # which runs, in words
    worse: str  # "the new fit's ... is worse ..." ("": it is not, or too few runs to judge by)
    fitted: bool = True  # the current model was fitted by an admin (not the prior, nor set aside)


def judge(
    store: Store,
    partition: str,
    rows: list[SampleRow],
    fresh: set[str],
    current: Calibrated,
    cv: list[tuple[Sample, float, float]],
) -> Judgement:
    """Compare a fit (``cv``: its cross-validated predictions of ``rows``) with the current model on
    the rows it was not fitted on: ``fresh`` (not stored yet) and those stored after its last admin
    fit; every row when it is the prior. Both are then predictions of runs neither saw."""
    from slurm_yolo.core.model import fitting

    config = store.config
    fitted_on_none = (
        current.stale or not store.conn.execute("SELECT 1 FROM params WHERE partition = ?", (partition,)).fetchone()
    )
    since, upto = ("", None) if fitted_on_none else store.last_admin_save(partition)
    keys = frozenset(
        r.sample.key
        for r in rows
        if r.sample.key in fresh or (r.id > upto if upto is not None else r.recorded_at > since)
    )
    part, e = config.partition(partition), config.estimate
    new = ErrorStats.of([(pred, actual) for s, pred, actual in cv if s.key in keys])
    now_errors = ErrorStats.of(
        [
            fitting.scored(r.sample, current.model, part.ddp_efficiency, e.reference_gflops)
            for r in rows
            if r.sample.key in keys
        ]
    )
    if fitted_on_none:
        on = f"all {len(keys)} runs in the fit (the current model, {current.source}, was fitted on none)"
    else:
        on = f"the {len(keys)} runs recorded since {partition}'s model was last fitted ({since or 'never'})"
    worse = ""
    if new.runs < MIN_JUDGED:
        on += f": too few to judge the fit by (fewer than {MIN_JUDGED})"
    elif (new.median or 0.0) > (now_errors.median or 0.0) + TOLERANCE:
        worse = (
            f"the new fit's cross-validated error (median {new.median:.1%}) is worse than the current model's"
            f" ({now_errors.median:.1%}) on the same {new.runs} runs"
        )
    return Judgement(keys, now_errors, new, on, worse, not fitted_on_none)


def preview(
    store: Store, partition: str, new: list[tuple[Sample, int | None]], options: CalibrateOptions
) -> CalibrationResult:
    """The fit calibrate would save, compared with the partition's current model on the same runs;
    changes nothing. ``new``: the run folders read (sample, owner's uid)."""
    config = store.config
    current = load(config, partition)
    stored = dict(store.conn.execute("SELECT key, excluded FROM samples WHERE partition = ?", (partition,)).fetchall())
    fresh: dict[str, tuple[Sample, int | None]] = {}
    for s, uid in new:
        if s.key not in stored:
            fresh.setdefault(s.key, (s, uid))
    stamp = now()
    rows = [SampleRow(0, s, "run-dir", uid, stamp) for s, uid in fresh.values()]
    rows = (rows + store.sample_rows(partition))[:WINDOW]
    excluded = {r.sample.key: why for r in rows if (why := _exclusion(r, options))}
    kept = [r for r in rows if r.sample.key not in excluded]
    if not kept:
        raise UsageError(f"partition {partition}: every sample is excluded: nothing to fit")
    shared, note = shared_nodes(
        config, [r.sample.key for r in kept], [k for k in fresh if k not in excluded], options.probe_job
    )
    weights = [1.0 / (1 + len(shared.get(r.sample.key, []))) for r in kept]
    tm, cv = fit_partition_cv(config, partition, [r.sample for r in kept], current.model, weights)
    verdict = judge(store, partition, kept, set(fresh), current, cv)
    listed = []
    for r in rows:
        job = job_of(r.sample.key)
        others = shared.get(r.sample.key)
        listed.append(
            Listed(
                r.sample.key,
                r.source,
                user_name(r.uid),
                job[1] if job else None,
                r.sample.key in fresh,
                r.sample.key in verdict.judged,
                others,
                1.0 / (1 + len(others or [])) if r.sample.key not in excluded else 0.0,
                excluded.get(r.sample.key, ""),
            )
        )
    counts: dict[str, int] = {}
    for r in kept:
        counts[r.source] = counts.get(r.source, 0) + 1
    source = f"calibrate by {user_name(os.getuid())}: " + (
        f"probe job {options.probe_job}, " if options.probe_job is not None else ""
    )
    source += f"{len(kept)} runs" + (f", {len(excluded)} excluded" if excluded else "")
    references = reference_predictions(config, partition, current.model, tm)
    worse = verdict.worse
    if verdict.worse:
        source += (
            f" (forced over a worse cross-validated error: {verdict.new.median:.1%} > {verdict.current.median:.1%})"
        )
    elif verdict.fitted and verdict.new.runs < MIN_JUDGED and (moved := _moved(references)) > UNJUDGED_MOVE:
        worse = (
            f"with too few runs to judge it by, the new fit moves the reference predictions up to x{moved:.1f}"
            f" (more than x{UNJUDGED_MOVE:g})"
        )
        source += f" (forced: too few runs to judge it, reference predictions moved up to x{moved:.1f})"
    return CalibrationResult(
        partition=partition,
        added=len(fresh),
        sources=dict(sorted(counts.items())),
        model=tm,
        previous=current.model,
        previous_source=current.source,
        samples=listed,
        current_errors=verdict.current,
        new_errors=verdict.new,
        judged_on=verdict.on,
        references=references,
        worse=f"partition {partition}: {worse}: not saved (--force saves it)" if worse else "",
        source=source,
        notes=[note] if note else [],
    )


def _moved(references: list[tuple[str, float, float]]) -> float:
    """The largest factor (either way) a fit moves the reference jobs' predictions by (1: none)."""
    return max((max(a / b, b / a) for _, b, a in references if a > 0 and b > 0), default=1.0)


def _folder_owner(path: Path) -> int | None:
    """Whose run folder this is (``named_owner`` as root; else its owner)."""
    try:
        return named_owner(path) if os.geteuid() == 0 else path.stat().st_uid
    except (UsageError, OSError):
        return None


def calibrate_runs(
    config: Config, partition: str, paths: list[Path], options: CalibrateOptions | None = None
) -> CalibrationResult:
    """Add ultralytics run folders as samples of ``partition`` and refit its model, unless the fit
    is worse than the current model (``result.worse``: nothing saved without ``force``) or this is a
    dry run; the caller raises on ``worse`` after showing the comparison."""
    options = options or CalibrateOptions()
    if not partition or any(ch in partition for ch in "\n\r\x00"):
        raise UsageError("--partition must be a plain name")
    Store(config).close()  # refuse a user without write access before reading any run
    skipped: list[str] = []
    new: list[
        tuple[Sample, int | None]
    ] = []  # read as ourselves, not as the state's owner: a custom model's child drops to its owner
    for path in paths:
        try:
            new.append((sample_from_run_dir(path, config), _folder_owner(path)))
        except UsageError as e:
            skipped.append(str(e))
    if not new and not (options.exclude_users or options.exclude_jobs):  # a refit alone only leaves runs out
        raise UsageError(f"no usable run among {len(paths)} given: " + (skipped[0] if skipped else ""))
    with Store(config) as store:
        result = preview(store, partition, new, options)
        result.skipped = skipped
        if options.dry_run or (result.worse and not options.force):
            return result
        assert result.model is not None
        with store.transaction():
            result.added = sum(store.add_sample(partition, s, "run-dir", uid) for s, uid in new)
            store.exclude(partition, {s.key: s.excluded for s in result.samples if s.excluded})
            store.save(partition, result.model, result.source)
        result.saved = True
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
    added = "added" if result.saved else "read, not added"
    return (
        f"partition {result.partition}: {result.added} new run(s) {added}; its samples, all in the fit: {where}"
        f" ({tm.n} in all){moved}"
    )
