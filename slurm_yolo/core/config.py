"""Settings from one TOML file, with the origin of every value.

Lookup: ``$SLURM_YOLO_CONFIG``, else ``$SLURM_YOLO_HOME/config.toml``, else ``/etc/slurm-yolo/config.toml``.
``SLURM_YOLO_HOME`` also moves the state (SQLite databases, caches) into that folder, so trials and
tests stay isolated from the system install. Unknown keys are errors: a typo in an admin's file must
not silently fall back to a default.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core.errors import UsageError

SYSTEM_CONFIG = Path("/etc/slurm-yolo/config.toml")
SYSTEM_STATE = Path("/var/lib/slurm-yolo")
ENV_OVERRIDES = ("SLURM_YOLO_CONFIG", "SLURM_YOLO_HOME")

# The schema: every section, key and default. Partition tables are open-ended (one per partition).
DEFAULTS: dict[str, dict[str, Any]] = {
    "paths": {
        "state_dir": str(SYSTEM_STATE),  # calibration.db, ledger.db (owned by the SlurmUser)
        "owner": "slurm",  # the SlurmUser: owns the state; root writes it as this user
        "cache_dir": "",  # per-user caches (dataset counts); default ~/.cache/slurm-yolo
        # The published, world-readable copies (ledger.db, calibration.db, availability, audit.json):
        # "" keeps them in state_dir; a folder of their own can be shared read-only with login nodes,
        # which then plan with the site's time models and prices and never see the state dir.
        "public_dir": "",
    },
    "slurm": {
        "bin_dir": "/usr/bin",  # absolute: slurmctld-side hooks run with no PATH
        "timeout_seconds": 30.0,
        "spank_tokens": False,  # the SPANK plugin is loaded: jobs carry --yolo-tokens
    },
    "job": {
        # What the job script runs: the interpreter of the install that carries the [train] extra.
        "python": sys.executable,
        "cpus_per_gpu": 2,
        "mem_per_cpu_mb": 0,  # 0: the cluster's DefMemPerCPU
        "signal_seconds": 120,  # USR2 this long before the time limit: checkpoint and requeue
        "yolo_config_dir": "",  # YOLO_CONFIG_DIR for jobs (offline font); empty: ultralytics' default
    },
    "estimate": {
        "buffer": 0.20,  # minimum headroom of the time limit over the prediction
        "reference_gflops": 8.86,  # yolov8n at 640: a model factor of 1.0
        "k": 1.0,  # prior seconds per million effective tokens per GPU, until a partition is calibrated
        "overhead_seconds": 5.0,  # prior fixed cost inside training (dataloaders, first batch)
        "startup_seconds": 20.0,  # process start, model build, dataset scan: not in results.csv
        "val_weight": 0.5,  # prior cost of a validation token relative to a training token
        "iteration_seconds": 0.02,  # prior per-iteration cost (optimizer step, collation, logging)
        "epoch_seconds": 0.5,  # prior per-epoch cost (loader restart, metrics, checkpoint)
        "val_pass_seconds": 0.5,  # prior per-validation-pass cost (set-up, NMS, metrics)
        # "shipped": the time model's shape, fixed costs and factors fitted on the project's corpus of real
        # runs (slurm_yolo/data/priors.json), with their spreads; k and the start-up from here. "config":
        # every prior from this table, and wide spreads.
        "priors": "shipped",
        "imgsz_exponent": 0.3,  # cost per token ~ (imgsz / 640) ^ -this: small images cost more per pixel
        "imgsz_curvature": 0.0,  # x exp(this x ln(imgsz / 640)^2): a cost per pixel U-shaped in imgsz
        "batch_exponent": 0.0,  # cost per token ~ (batch pixels / 16 x 640^2) ^ this (CPU: > 0, GPU: < 0)
        "iteration_exponent": 0.3,  # per-step cost ~ model factor ^ this: far from FLOPs-proportional
        "startup_exponent": 0.2,  # start-up ~ model factor ^ this (build, load, save weights)
        "loader_seconds": 0.0,  # CPU-seconds per image in the data loader; > 0: a GPU site fits a loader bound
        "image_seconds": 0.001,  # prior cost per training image that compute does not hide (decode, augment)
        "val_image_seconds": 0.001,  # prior cost per validated image outside compute (decode, NMS, metrics)
        "coverage": 0.99,  # share of runs the time limit covers (cross-validated), buffer never below "buffer"
        "default_priority": "dev",
    },
    "light": {
        # Jobs this small run on a share of a GPU (shard GRES) instead of a whole one.
        "max_model_gflops": 30.0,
        "max_batch_pixels": 16 * 640 * 640,
        "gpu_share": 0.5,
    },
    "ledger": {
        # Where the books are: "sqlite" (a file in state_dir, one controller) or "mariadb" (the site's
        # server: backup controllers, several clusters on one budget; `slurm-yolo ledger migrate`).
        "backend": "sqlite",
        # The MariaDB option file ([client] host or socket, port, user, password, database), readable
        # by the SlurmUser alone (mode 600); used with backend = "mariadb".
        "mariadb_options": "/etc/slurm-yolo/ledger.cnf",
        # Accepted and ignored, so that an older site config still loads: a prolog that cannot record
        # its hold always cancels its job (fail closed); "open" let GPU runs go unheld.
        "prolog_errors": "cancel",
        "refund_node_fail": True,  # NODE_FAIL / BOOT_FAIL runs are refunded in full
        "refund_preempted": False,  # a PREEMPTED run pays what it ran (billing.policy.charge says why)
        "charge_timeout_full": True,  # a job's own TIMEOUT is charged its whole hold
        # A GPU job its account cannot cover now, but whose quota's refill will within this many minutes,
        # is accepted and waits (its begin time) until then; 0: refused, as beyond it.
        "credit_wait_minutes": 0.0,
        "cancel_over_budget": True,  # a run whose hold the account cannot cover (admitted before it lost tokens) is cancelled at start
        "enforce": True,  # a dry account's GPU jobs are stopped by Slurm (GrpTRESRunMins gres=0)
        "admin_comment": True,  # the epilog writes its summary into the job's AdminComment (sacctmgr)
        "feedback": True,  # the epilog feeds a completed job's measured throughput into its partition's k
        # Tokens per GPU-second for a partition without a price of its own (`slurm-yolo ledger price`).
        # 1,000,000 bills a GPU-second as the prior k (1 s per million tokens) would process.
        "default_price": 1_000_000,
        "currency": "",  # the name of the money cost_per_gpu_hour is in (EUR, USD, credits), for every line that shows it
        "unlimited_hold_hours": 168.0,  # what a job with no time limit (an INFINITE partition) holds
        "reconcile_days": 7.0,  # how far back `ledger reconcile` looks in sacct for runs the hooks missed
        # Accepted and ignored, so that an older site config still loads: runs are keyed by Slurm's own
        # ClusterName, which a setting changed while jobs run could not follow (it charged them twice).
        "cluster": "",
        "expire_days": 0.0,  # tokens unspent this long after they were credited expire (0: never)
    },
    "hookd": {
        # The resident hook server (slurm-yolo hookd) and its client slurm-yolo-hook, whose build
        # bakes in the same default path.
        "socket": "/run/slurm-yolo/hookd.sock",
        "client": "/opt/slurm-yolo/bin/slurm-yolo-hook",  # job_submit.lua asks a shared ledger through it
        "workers": 32,  # accepted and ignored, for older configs: one settler thread settles in batches
    },
    "watchdog": {
        "stall_minutes": 30.0,  # no new usage record or stdout for this long: a zombie
        "action": "requeue",  # or "cancel"
    },
    "efficiency": {
        # GPU efficiency and health (slurm_yolo/admin/efficiency.py, from the launcher's NVML samples): the
        # report's under-used GPU-hours and the alerts.
        "low_util_pct": 85.0,  # GPU time of epochs under this utilisation is under-used
        "idle_minutes": 30.0,  # a running job under low_util_pct this long is an alert (0: never)
        "temp_limit_c": 85.0,  # a GPU hotter than this in a running job's latest epoch is an alert
    },
    "qos": {
        "short": "yolo-short",
        "short_max_minutes": 60,
        "prod": "yolo-prod",
        "dev": "yolo-dev",
        "explore": "yolo-explore",
    },
}

PARTITION_DEFAULTS: dict[str, Any] = {
    "gpu_type": "",
    "gpus_per_node": 1,
    "shards_per_gpu": 0,  # 0: no shard GRES on this partition
    "cost_per_gpu_hour": 0.0,
    "ddp_efficiency": 0.9,  # speed-up kept per doubling of GPUs
    # The card, where its GRES type does not say it (gputypes): a known type's name ("a100", "h100"),
    # or "cpu" for GRES that are device nodes and train on the CPUs (the bundled test clusters)
    "gpu_like": "",
    "gpu_tflops": 0.0,  # a card none of the known types is: its dense FP16 tensor TFLOPs
    "gpu_memory_gb": 0.0,  # and its memory (GB); also overrides a known type's (a MIG slice, a variant)
}

PRIORITIES = ("prod", "dev", "explore")


class Partition(NamedTuple):
    """One partition as the planner sees it."""

    name: str
    gpu_type: str = ""
    gpus_per_node: int = 1
    shards_per_gpu: int = 0
    cost_per_gpu_hour: float = 0.0
    ddp_efficiency: float = 0.9
    gpu_like: str = ""
    gpu_tflops: float = 0.0
    gpu_memory_gb: float = 0.0


@dataclass
class Config:
    """Effective settings; ``sources`` maps ``section.key`` to where the value came from."""

    values: dict[str, dict[str, Any]]
    partitions: dict[str, Partition]
    sources: dict[str, str] = field(default_factory=dict)
    path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # the SLURM_YOLO_* that chose it, for child processes

    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.values[section]

    @property
    def state_dir(self) -> Path:
        return Path(self.values["paths"]["state_dir"])

    @property
    def public_dir(self) -> Path:
        """Where the published copies are (``paths.public_dir``, else the state dir)."""
        return Path(self.values["paths"]["public_dir"] or self.values["paths"]["state_dir"])

    @property
    def cache_dir(self) -> Path:
        if self.values["paths"]["cache_dir"]:
            return Path(self.values["paths"]["cache_dir"])
        home = os.environ.get("SLURM_YOLO_HOME")
        if home:
            return Path(home) / "cache"
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "slurm-yolo"

    def partition(self, name: str) -> Partition:
        """A configured partition, or a bare one: planning offline for an unknown partition is allowed."""
        return self.partitions.get(name) or Partition(name=name)

    def flat(self) -> list[tuple[str, Any, str]]:
        """Every effective value as (key, value, source), for ``slurm-yolo config show``."""
        rows = [
            (f"{s}.{k}", v, self.sources.get(f"{s}.{k}", "default"))
            for s, section in self.values.items()
            for k, v in section.items()
        ]
        for p in self.partitions.values():
            for k in PARTITION_DEFAULTS:
                key = f"partitions.{p.name}.{k}"
                rows.append((key, getattr(p, k), self.sources.get(key, "default")))
        return rows


def missing(config: Config) -> str:
    """A line for a config that read no file where one was expected ('' otherwise): its settings are
    the built-in defaults (no partitions, the prior k), rarely what a user on a site wants. A
    ``SLURM_YOLO_HOME`` without a config.toml is a deliberate trial of the defaults: no line."""
    if config.path is not None or (config.env.get("SLURM_YOLO_HOME") and not config.env.get("SLURM_YOLO_CONFIG")):
        return ""
    why = "from SLURM_YOLO_CONFIG" if config.env.get("SLURM_YOLO_CONFIG") else "SLURM_YOLO_CONFIG is not set"
    return (
        f"no slurm-yolo config at {config_path(config.env)} ({why}): the built-in defaults are in force;"
        " export SLURM_YOLO_CONFIG=<your site's config.toml>"
    )


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    """The TOML file in force (it may not exist)."""
    if env.get("SLURM_YOLO_CONFIG"):
        return Path(env["SLURM_YOLO_CONFIG"])
    if env.get("SLURM_YOLO_HOME"):
        return Path(env["SLURM_YOLO_HOME"]) / "config.toml"
    return SYSTEM_CONFIG


def _check_type(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise UsageError(f"config {key}: expected {type(default).__name__}, got {value!r}")
    return value


def load(path: Path | None = None, env: Mapping[str, str] = os.environ) -> Config:
    """Read the config file (if any) over the defaults; ``env`` holds the SLURM_YOLO_* overrides
    (hookd serves hooks whose environment is not its own)."""
    path = path or config_path(env)
    values = {s: dict(v) for s, v in DEFAULTS.items()}
    sources: dict[str, str] = {}
    raw: dict[str, Any] = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise UsageError(f"config {path}: {e}") from None
    partitions: dict[str, Partition] = {}
    for section, table in raw.items():
        if section == "partitions":
            if not isinstance(table, dict):
                raise UsageError(f"config {path}: [partitions] must be a table")
            for name, ptable in table.items():
                partitions[name] = _partition(name, ptable, path, sources)
            continue
        if section not in DEFAULTS or not isinstance(table, dict):
            raise UsageError(
                f"config {path}: unknown section [{section}] (valid: {', '.join([*DEFAULTS, 'partitions'])})"
            )
        for key, value in table.items():
            if key not in DEFAULTS[section]:
                raise UsageError(f"config {path}: unknown key {section}.{key} (valid: {', '.join(DEFAULTS[section])})")
            values[section][key] = _check_type(f"{section}.{key}", value, DEFAULTS[section][key])
            sources[f"{section}.{key}"] = str(path)
    home = env.get("SLURM_YOLO_HOME")
    if home:
        values["paths"]["state_dir"] = home
        values["paths"]["public_dir"] = ""  # a trial's own state: its copies beside it
        sources["paths.state_dir"] = sources["paths.public_dir"] = "env SLURM_YOLO_HOME"
    if values["watchdog"]["action"] not in ("requeue", "cancel"):
        raise UsageError("config watchdog.action: must be 'requeue' or 'cancel'")
    if values["estimate"]["priors"] not in ("shipped", "config"):
        raise UsageError("config estimate.priors: must be 'shipped' or 'config'")
    if values["ledger"]["backend"] not in ("sqlite", "mariadb"):
        raise UsageError("config ledger.backend: must be 'sqlite' or 'mariadb'")
    if values["ledger"]["prolog_errors"] not in ("open", "cancel"):
        raise UsageError("config ledger.prolog_errors: must be 'open' or 'cancel'")
    if values["estimate"]["default_priority"] not in PRIORITIES:
        raise UsageError(f"config estimate.default_priority: must be one of {', '.join(PRIORITIES)}")
    chosen = {k: env[k] for k in ENV_OVERRIDES if env.get(k)}
    return Config(
        values=values, partitions=partitions, sources=sources, path=path if path.exists() else None, env=chosen
    )


def _partition(name: str, table: Any, path: Path, sources: dict[str, str]) -> Partition:
    if not isinstance(table, dict):
        raise UsageError(f"config {path}: [partitions.{name}] must be a table")
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in PARTITION_DEFAULTS:
            raise UsageError(
                f"config {path}: unknown key partitions.{name}.{key} (valid: {', '.join(PARTITION_DEFAULTS)})"
            )
        kwargs[key] = _check_type(f"partitions.{name}.{key}", value, PARTITION_DEFAULTS[key])
        sources[f"partitions.{name}.{key}"] = str(path)
    for key, top in (("gpu_tflops", 100_000.0), ("gpu_memory_gb", 4096.0)):  # a typo must not plan nonsense
        value = kwargs.get(key, 0.0)
        if not (value == 0 or 0.01 <= value <= top):  # NaN fails both
            raise UsageError(f"config {path}: partitions.{name}.{key} = {value!r}: 0 (unset) or 0.01-{top:g}")
    return Partition(name=name, **kwargs)
