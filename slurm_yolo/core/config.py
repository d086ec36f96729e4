"""Settings from one TOML file, with the origin of every value.

Lookup: ``$SLURM_YOLO_CONFIG``, else ``$SLURM_YOLO_HOME/config.toml``, else ``/etc/slurm-yolo/config.toml``.
``SLURM_YOLO_HOME`` also moves the state (SQLite databases, caches) into that folder, so trials and
tests stay isolated from the system install. Unknown keys are errors: a typo in an admin's file must
not silently fall back to a default.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core.errors import UsageError

SYSTEM_CONFIG = Path("/etc/slurm-yolo/config.toml")
SYSTEM_STATE = Path("/var/lib/slurm-yolo")
ENV_OVERRIDES = ("SLURM_YOLO_CONFIG", "SLURM_YOLO_HOME")


NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")  # a name as Slurm makes them: safe in every file and command


# The schema: every section, key and default, one frozen dataclass a section (typed settings).
@dataclass(frozen=True)
class PathsSettings:
    """Where the state and its published copies are."""

    state_dir: str = str(SYSTEM_STATE)  # calibration.db, ledger.db (owned by the SlurmUser)
    owner: str = "slurm"  # the SlurmUser: owns the state; root writes it as this user
    cache_dir: str = ""  # per-user caches (dataset counts); default ~/.cache/slurm-yolo
    # The published, world-readable copies (ledger.db, calibration.db, availability, audit.json):
    # "" keeps them in state_dir; a folder of their own can be shared read-only with login nodes,
    # which then plan with the site's time models and prices and never see the state dir.
    public_dir: str = ""


@dataclass(frozen=True)
class SlurmSettings:
    """How Slurm's commands are run."""

    bin_dir: str = "/usr/bin"  # absolute: slurmctld-side hooks run with no PATH
    timeout_seconds: float = 30.0
    spank_tokens: bool = False  # the SPANK plugin is loaded: jobs carry --yolo-tokens


@dataclass(frozen=True)
class JobSettings:
    """What the job script asks of Slurm and runs."""

    # What the job script runs: the interpreter of the install that carries the [train] extra.
    python: str = sys.executable
    cpus_per_gpu: int = 2
    mem_per_cpu_mb: int = 0  # 0: the cluster's DefMemPerCPU
    signal_seconds: int = 120  # USR2 this long before the time limit: checkpoint and requeue (0: none)
    yolo_config_dir: str = ""  # YOLO_CONFIG_DIR for jobs (offline font); empty: ultralytics' default


@dataclass(frozen=True)
class StageSettings:
    """Where jobs find ultralytics' datasets and weights, and whether their nodes could download them."""

    # Folders on shared storage every node mounts (absolute): the jobs' ultralytics datasets_dir and
    # weights_dir, which `slurm-yolo stage` fills on a login node. "": each user's own ultralytics settings.
    datasets_dir: str = ""
    weights_dir: str = ""
    # The compute nodes reach the network, so a job may download what it lacks: submissions are not
    # checked for it. false: a plan whose data or weights need a download is refused with its stage command.
    nodes_online: bool = False
    # A base URL that serves what https://github.com/ serves, path for path (a site's mirror or proxy of
    # ultralytics' release assets): `slurm-yolo stage` fetches from it instead. "": GitHub itself.
    mirror: str = ""


@dataclass(frozen=True)
class EstimateSettings:
    """The time model's priors and the limit's buffer."""

    buffer: float = 0.20  # minimum headroom of the time limit over the prediction
    reference_gflops: float = 8.86  # yolov8n at 640: a model factor of 1.0
    k: float = 1.0  # prior seconds per million pixels of work (s/Mpx) per GPU, until a partition is calibrated
    overhead_seconds: float = 5.0  # prior fixed cost inside training (dataloaders, first batch)
    startup_seconds: float = 20.0  # process start, model build, dataset scan: not in results.csv
    val_weight: float = 0.5  # prior cost of a validation token relative to a training token
    iteration_seconds: float = 0.02  # prior per-iteration cost (optimizer step, collation, logging)
    epoch_seconds: float = 0.5  # prior per-epoch cost (loader restart, metrics, checkpoint)
    val_pass_seconds: float = 0.5  # prior per-validation-pass cost (set-up, NMS, metrics)
    # "shipped": the time model's shape, fixed costs and factors fitted on the project's corpus of real
    # runs (slurm_yolo/data/priors.json), with their spreads; k and the start-up from here. "config":
    # every prior from this table, and wide spreads.
    priors: str = "shipped"
    imgsz_exponent: float = 0.3  # cost per token ~ (imgsz / 640) ^ -this: small images cost more per pixel
    imgsz_curvature: float = 0.0  # x exp(this x ln(imgsz / 640)^2): a cost per pixel U-shaped in imgsz
    batch_exponent: float = 0.0  # cost per token ~ (batch pixels / 16 x 640^2) ^ this (CPU: > 0, GPU: < 0)
    iteration_exponent: float = 0.3  # per-step cost ~ model factor ^ this: far from FLOPs-proportional
    startup_exponent: float = 0.2  # start-up ~ model factor ^ this (build, load, save weights)
    loader_seconds: float = 0.0  # CPU-seconds per image in the data loader; > 0: a GPU site fits a loader bound
    image_seconds: float = 0.001  # prior cost per training image that compute does not hide (decode, augment)
    val_image_seconds: float = 0.001  # prior cost per validated image outside compute (decode, NMS, metrics)
    coverage: float = 0.99  # share of runs the time limit covers (cross-validated), buffer never below "buffer"
    # `doctor` names a partition whose model's cross-validated median error is over this (with its
    # likely cause and the command that fixes it): its limits then lean on a wide buffer.
    doctor_cv_error: float = 0.30
    default_priority: str = "dev"


@dataclass(frozen=True)
class LightSettings:
    """Jobs small enough for a share of a GPU."""

    # Jobs this small run on a share of a GPU (shard GRES) instead of a whole one.
    max_model_gflops: float = 30.0
    max_batch_pixels: int = 16 * 640 * 640
    gpu_share: float = 0.5


@dataclass(frozen=True)
class LedgerSettings:
    """The books: backend, billing rules, prices, waits."""

    # Where the books are: "sqlite" (a file in state_dir, one controller) or "mariadb" (the site's
    # server: backup controllers, several clusters on one budget; `slurm-yolo ledger migrate`).
    backend: str = "sqlite"
    # The MariaDB option file ([client] host or socket, port, user, password, database), readable
    # by the SlurmUser alone (mode 600); used with backend = "mariadb".
    mariadb_options: str = "/etc/slurm-yolo/ledger.cnf"
    refund_node_fail: bool = True  # NODE_FAIL / BOOT_FAIL runs are refunded in full
    refund_preempted: bool = False  # a PREEMPTED run pays what it ran (billing.policy.charge says why)
    charge_timeout_full: bool = True  # a job's own TIMEOUT is charged its whole hold
    # A GPU job its account cannot cover now, but whose quota's refill will within this many minutes,
    # is accepted and waits (its begin time) until then; 0: refused, as beyond it.
    credit_wait_minutes: float = 0.0
    cancel_over_budget: bool = (
        True  # a run whose hold the account cannot cover (admitted before it lost tokens) is cancelled at start
    )
    enforce: bool = True  # a dry account's GPU jobs are stopped by Slurm (GrpTRESRunMins gres=0)
    admin_comment: bool = True  # the epilog writes its summary into the job's AdminComment (sacctmgr)
    feedback: bool = True  # the epilog feeds a completed job's measured throughput into its partition's k
    # Tokens per GPU-second for a partition without a price of its own (`slurm-yolo ledger price`).
    # 1,000,000 bills a GPU-second as the prior k (1 s per million tokens) would process.
    default_price: int = 1_000_000
    currency: str = (
        ""  # the name of the money cost_per_gpu_hour is in (EUR, USD, credits), for every line that shows it
    )
    unlimited_hold_hours: float = 168.0  # what a job with no time limit (an INFINITE partition) holds
    reconcile_days: float = 7.0  # how far back `ledger reconcile` looks in sacct for runs the hooks missed
    expire_days: float = 0.0  # tokens unspent this long after they were credited expire (0: never)
    # Partitions and accounts whose GPU jobs are neither held nor charged (admitted without a budget
    # check, never on the books): names as Slurm has them, accounts in lower case as Slurm folds them.
    exempt_partitions: tuple[str, ...] = ()
    exempt_accounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class HookdSettings:
    """The resident hook server and its client."""

    # The resident hook server (slurm-yolo hookd) and its client slurm-yolo-hook, whose build
    # bakes in the same default path.
    socket: str = "/run/slurm-yolo/hookd.sock"
    client: str = "/opt/slurm-yolo/bin/slurm-yolo-hook"  # job_submit.lua asks a shared ledger through it


@dataclass(frozen=True)
class WatchdogSettings:
    """Zombie jobs: how long a silence, and what then."""

    stall_minutes: float = 30.0  # no new usage record or stdout for this long: a zombie
    action: str = "requeue"  # or "cancel"


@dataclass(frozen=True)
class EfficiencySettings:
    """GPU efficiency and health thresholds."""

    # GPU efficiency and health (slurm_yolo/admin/efficiency.py, from the launcher's NVML samples): the
    # report's under-used GPU-hours and the alerts.
    low_util_pct: float = 85.0  # GPU time of epochs under this utilisation is under-used
    idle_minutes: float = 30.0  # a running job under low_util_pct this long is an alert (0: never)
    temp_limit_c: float = 85.0  # a GPU hotter than this in a running job's latest epoch is an alert


@dataclass(frozen=True)
class QosSettings:
    """The QOS of each priority tier."""

    short: str = "yolo-short"
    short_max_minutes: int = 60
    prod: str = "yolo-prod"
    dev: str = "yolo-dev"
    explore: str = "yolo-explore"

    def of(self, priority: str) -> str:
        """The QOS of a priority tier (prod, dev or explore)."""
        return {"prod": self.prod, "dev": self.dev, "explore": self.explore}[priority]


Section = (
    PathsSettings
    | SlurmSettings
    | JobSettings
    | StageSettings
    | EstimateSettings
    | LightSettings
    | LedgerSettings
    | HookdSettings
    | WatchdogSettings
    | EfficiencySettings
    | QosSettings
)
SECTIONS: dict[str, type[Section]] = {
    "paths": PathsSettings,
    "slurm": SlurmSettings,
    "job": JobSettings,
    "stage": StageSettings,
    "estimate": EstimateSettings,
    "light": LightSettings,
    "ledger": LedgerSettings,
    "hookd": HookdSettings,
    "watchdog": WatchdogSettings,
    "efficiency": EfficiencySettings,
    "qos": QosSettings,
}
DEFAULTS: dict[str, dict[str, Any]] = {name: asdict(cls()) for name, cls in SECTIONS.items()}
# Keys older configs had that no longer do anything: refused with what replaced them (a setting a
# site believes in must not be silently ignored).
RETIRED = {
    "ledger.prolog_errors": "a prolog that cannot record its hold always cancels its job",
    "ledger.cluster": "runs are keyed by Slurm's own ClusterName",
    "hookd.workers": "one settler thread settles in batches",
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
    # The nodes' shape, where Slurm cannot be asked (a dry run off-site) or to override what it says
    # (slurm.node_shapes): CPUs and host memory per GPU of its smallest node, and Slurm CPUs per core
    # (ThreadsPerCore: a hyperthread is a Slurm CPU, and a data loader's rate counts cores). 0: Slurm's
    "node_cpus_per_gpu": 0,
    "node_memory_gb_per_gpu": 0.0,
    "threads_per_core": 0,
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
    node_cpus_per_gpu: int = 0
    node_memory_gb_per_gpu: float = 0.0
    threads_per_core: int = 0


@dataclass
class Config:
    """Effective settings, one typed section each; ``sources`` maps ``section.key`` to where the value
    came from."""

    paths: PathsSettings
    slurm: SlurmSettings
    job: JobSettings
    stage: StageSettings
    estimate: EstimateSettings
    light: LightSettings
    ledger: LedgerSettings
    hookd: HookdSettings
    watchdog: WatchdogSettings
    efficiency: EfficiencySettings
    qos: QosSettings
    partitions: dict[str, Partition]
    sources: dict[str, str] = field(default_factory=dict)
    path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # the SLURM_YOLO_* that chose it, for child processes

    @property
    def values(self) -> dict[str, dict[str, Any]]:
        """Every section's values by name (``config show``, and a child's copy of the settings)."""
        return {name: asdict(getattr(self, name)) for name in SECTIONS}

    @property
    def state_dir(self) -> Path:
        return Path(self.paths.state_dir)

    @property
    def public_dir(self) -> Path:
        """Where the published copies are (``paths.public_dir``, else the state dir)."""
        return Path(self.paths.public_dir or self.paths.state_dir)

    @property
    def bin_dir(self) -> Path:
        """Slurm's commands (``slurm.bin_dir``)."""
        return Path(self.slurm.bin_dir)

    @property
    def cache_dir(self) -> Path:
        if self.paths.cache_dir:
            return Path(self.paths.cache_dir)
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
    if isinstance(default, tuple):  # a list of plain names (Slurm's partitions, accounts)
        if not isinstance(value, list) or not all(isinstance(v, str) and NAME.fullmatch(v) for v in value):
            raise UsageError(f"config {key}: expected a list of names (letters, digits, _ . -), got {value!r}")
        return tuple(value)
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
            if f"{section}.{key}" in RETIRED:
                raise UsageError(
                    f"config {path}: {section}.{key} is no longer a setting ({RETIRED[f'{section}.{key}']}): remove it"
                )
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
    for key in ("datasets_dir", "weights_dir"):  # the nodes' shared folders: the same path on every host
        if values["stage"][key] and not os.path.isabs(values["stage"][key]):
            raise UsageError(f'config stage.{key}: an absolute path on storage every node mounts, or "" (unset)')
    if values["stage"]["mirror"] and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", values["stage"]["mirror"]):
        raise UsageError('config stage.mirror: an http:// or https:// base URL, or "" (GitHub itself)')
    if values["estimate"]["default_priority"] not in PRIORITIES:
        raise UsageError(f"config estimate.default_priority: must be one of {', '.join(PRIORITIES)}")
    chosen = {k: env[k] for k in ENV_OVERRIDES if env.get(k)}
    sections = {name: cls(**values[name]) for name, cls in SECTIONS.items()}
    return Config(
        **sections,  # type: ignore[arg-type]  # each name's own class, from SECTIONS
        partitions=partitions,
        sources=sources,
        path=path if path.exists() else None,
        env=chosen,
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
    for key, top in (
        ("gpu_tflops", 100_000.0),
        ("gpu_memory_gb", 4096.0),
        ("node_memory_gb_per_gpu", 65536.0),
        ("node_cpus_per_gpu", 4096),
        ("threads_per_core", 8),
    ):  # a typo must not plan nonsense
        value = kwargs.get(key, 0)
        if not (value == 0 or 0.01 <= value <= top):  # NaN fails both
            raise UsageError(f"config {path}: partitions.{name}.{key} = {value!r}: 0 (unset) or 0.01-{top:g}")
    return Partition(name=name, **kwargs)
