"""``slurm-yolo calibrate --probe PARTITION``: a site's first calibration from one short real job.

A partition nobody has run YOLO on plans with its GPU type's priors (``gpu_priors``). The probe
submits one job there (``sbatch_templates/probe.sbatch``: one GPU, the site's CPUs per GPU, a limit
of ``LIMIT_MINUTES``, billed like any GPU job to the account the admin names), which makes a synthetic
dataset on the node and trains a few tiny runs of different model sizes, image sizes and batches
(``probe_job``); once it has ended, its run folders are calibrated as users' are
(``calibration.calibrate_runs``), so the partition's ``k`` is its own from the first day.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core import gputypes
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError, SlurmYoloError, UsageError
from slurm_yolo.login.render import fill, template
from slurm_yolo.slurm import commands
from slurm_yolo.state import calibration

LIMIT_MINUTES = 20  # a few minutes of training on a GPU; the bundled clusters' CPUs need about two


class Probe(NamedTuple):
    job_id: int
    folder: Path
    result: calibration.CalibrationResult


def script(config: Config, partition: str, folder: Path) -> str:
    """The probe job's script (its options go on sbatch's command line)."""
    card = gputypes.card(config.partition(partition))
    env = {"YOLO_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if config.job.yolo_config_dir:
        env["YOLO_CONFIG_DIR"] = config.job.yolo_config_dir
    return fill(
        template("probe.sbatch"),
        {
            "environment": "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
            "command": " ".join(
                shlex.quote(w)
                for w in (
                    config.job.python,
                    "-m",
                    "slurm_yolo.job.probe_job",
                    str(folder),
                    "cpu" if card.cpu else "0",
                )
            ),
        },
    )


def sbatch_args(config: Config, partition: str, account: str | None, folder: Path) -> list[str]:
    part = config.partition(partition)
    gres = f"gpu:{part.gpu_type}:1" if part.gpu_type else "gpu:1"
    args = [
        f"--partition={partition}",
        f"--gres={gres}",
        f"--time={LIMIT_MINUTES}",
        "--job-name=yolo-probe",
        f"--cpus-per-task={config.job.cpus_per_gpu}",
        "--no-requeue",
        f"--output={folder}/probe-%j.log",
    ]
    if account:
        args.append(f"--account={commands.plain_name(account)}")
    return args


def trusted(where: Path) -> None:
    """``where`` (the folder the probe's own folder is made in), every folder on the way to it and
    every link the way takes are the caller's or root's, and no one else may replace what they hold
    (sticky folders like /tmp excepted: there only an entry's owner may rename it): otherwise another
    user could swap the probe's folder for a link between its making and the job that writes in it
    as the caller, or hand calibrate runs of their own."""
    me = os.geteuid()

    def check(path: Path) -> os.stat_result:
        try:
            st = path.lstat()
        except OSError as e:
            raise UsageError(f"--dir {where}: {path}: {e.strerror}") from None
        writable = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX and not stat.S_ISLNK(st.st_mode)
        if st.st_uid not in (0, me) or writable:
            raise UsageError(
                f"--dir {where}: {path} is another user's, or others can change it: give a folder of your own"
            )
        return st

    given = Path(where.anchor)
    for part in where.parts[1:]:  # the way as written: its links
        given = given / part
        check(given)
    real = where.resolve()
    for path in (*reversed(real.parents), real):  # the folders it leads to
        if not stat.S_ISDIR(check(path).st_mode):
            raise UsageError(f"--dir {where}: {path} is not a folder")


def run(
    config: Config,
    partition: str,
    account: str | None,
    where: Path,
    timeout: float = 3600.0,
    say: Callable[[str], object] = print,
    options: calibration.CalibrateOptions | None = None,
) -> Probe:
    """Submit the probe (its folder made in ``where``), wait for its end (``say`` tells the caller
    while it waits), calibrate the partition from its runs (``options``: calibrate's, the job named)."""
    if not partition or not commands.PLAIN_NAME.fullmatch(partition):
        raise UsageError(f"--probe {partition!r}: a partition's plain name")
    where = where.absolute()
    sbatch_args(config, partition, account, where)  # a bad account is refused before anything is made
    calibration.Store(config).close()  # an admin who cannot write the time models learns it before the job
    trusted(where)
    try:  # a new folder of its own (mode 700), no one else's to write in: the job and calibrate trust it
        folder = Path(tempfile.mkdtemp(prefix=f"yolo-probe-{partition}-{time.strftime('%Y%m%dT%H%M%S')}-", dir=where))
    except OSError as e:
        raise UsageError(f"--dir {where}: {e.strerror}") from None
    args = sbatch_args(config, partition, account, folder)
    bin_dir = config.bin_dir
    try:
        job_id = commands.submit(
            script(config, partition, folder), args, bin_dir=bin_dir, timeout=config.slurm.timeout_seconds
        )
    except SlurmYoloError:
        folder.rmdir()  # Slurm refused it (a partition or an account it does not have): nothing left behind
        raise
    started = time.monotonic()
    say(f"probe job {job_id} submitted to {partition}; waiting for its end (its log: {folder}/probe-{job_id}.log)")
    state = commands.wait_for_end(job_id, timeout=timeout, bin_dir=bin_dir)
    if state != "COMPLETED":
        raise SlurmError(
            f"probe job {job_id} on {partition} ended {state} after {time.monotonic() - started:.0f} s:"
            f" its log is {folder}/probe-{job_id}.log; nothing calibrated"
        )
    runs = sorted((folder / "runs").iterdir()) if (folder / "runs").is_dir() else []
    options = dataclasses.replace(options or calibration.CalibrateOptions(), probe_job=job_id)
    return Probe(job_id, folder, calibration.calibrate_runs(config, partition, runs, options))
