"""Plan -> sbatch script text (a pure function over ``sbatch_templates/``; golden-file tested).

Two kinds of user values reach the script, and each is made inert its own way:
- ``#SBATCH`` values are read by sbatch's own parser, never a shell: they are written bare, or in
  double or single quotes (sbatch honours both); control characters, and values holding both quote
  kinds, are refused.
- the training command in the body is shell-quoted word by word (``shlex.quote``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from slurm_yolo import __version__
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.limits import SIGNAL_MIN_LIMIT, usr2_lead
from slurm_yolo.core.model.estimate import fmt_pixels
from slurm_yolo.login.plan import Plan
from slurm_yolo.slurm.parsers import minutes_arg

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
DEFAULT_OUTPUT = "%x-%j.out"  # the job's log when -o is not given: yolo-42.out, or NAME-42.out with -J NAME
_BARE = re.compile(r"^[A-Za-z0-9_.,:=/@%+\-]*$")


def templates_dir() -> Path:
    """The installed templates (inside the package), else the source tree's ``sbatch_templates/``."""
    installed = Path(__file__).resolve().parents[1] / "sbatch_templates"
    if installed.is_dir():
        return installed
    source = Path(__file__).resolve().parents[2] / "sbatch_templates"
    if source.is_dir():
        return source
    raise UsageError("sbatch templates not found: the slurm-yolo install is incomplete")


@cache
def template(name: str) -> str:
    return (templates_dir() / name).read_text()


def fill(text: str, values: dict[str, str]) -> str:
    """Replace every ``{{name}}``; a placeholder without a value, or a value without a placeholder, is a bug."""
    used = set(_PLACEHOLDER.findall(text))
    if used != set(values):
        raise ValueError(f"template placeholders {sorted(used)} != values {sorted(values)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def directive_value(option: str, value: str) -> str:
    """A value as sbatch's directive parser reads it back unchanged."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UsageError(f"{option}: the value contains a control character")
    if _BARE.match(value):
        return value
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise UsageError(f"{option}: the value contains both kinds of quote")


@dataclass(frozen=True)
class JobOptions:
    """The everyday sbatch options a user may pass through, plus where the launcher lives."""

    job_name: str = "yolo"
    account: str | None = None
    output: str | None = None
    error: str | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    dependency: str | None = None
    begin: str | None = None
    constraint: str | None = None
    extra: tuple[str, ...] = ()  # raw sbatch arguments, each a whole ``--opt=value``
    python: str = "python3"
    cpus_per_gpu: int = 2
    mem_per_cpu_mb: int = 0
    signal_seconds: int = 120
    spank_tokens: bool = False  # add --yolo-tokens (needs the SPANK plugin on the cluster)
    yolo_config_dir: str = ""
    environment: dict[str, str] = field(default_factory=dict)


def comment(plan: Plan) -> str:
    """The estimate carried in the job (``--comment``): compact, no quotes or spaces, read by the prolog."""
    return (
        f"yolo:tok={plan.pixels:.0f},eff={plan.work_pixels:.0f},pred_s={plan.predicted_seconds:.0f},"
        f"limit_s={plan.time_limit_seconds},k={plan.k:.6g},gpus={plan.gpus}"
        + (f",cov={plan.coverage:.3g}" if plan.coverage else "")
    )


def signal_seconds(plan: Plan, opts: JobOptions) -> int:
    """The checkpoint warning's lead (``limits.usr2_lead``; 0: none)."""
    return usr2_lead(plan.time_limit_seconds, opts.signal_seconds)


def signal_note(seconds: int) -> str:
    """The script's comment on the USR2 trap: true of the ``--signal`` line the script has, or has not."""
    if seconds:
        return (
            f"# With --signal=B:USR2@{seconds}, Slurm sends USR2 {seconds} s before the time limit. The batch shell\n"
            "# only sees it while it waits (cmd & wait): it passes it on, and the launcher checkpoints at a\n"
            "# safe point and requeues the job."
        )
    return (
        f"# No --signal: a time limit under {SIGNAL_MIN_LIMIT // 60} min gets no warning (Slurm checks signal times\n"
        "# about once a minute), so the job ends at its limit. A USR2 sent by hand (scancel -b -s USR2)\n"
        "# is passed on all the same while the batch shell waits (cmd & wait): the launcher checkpoints\n"
        "# at a safe point and requeues the job."
    )


def directives(plan: Plan, opts: JobOptions) -> list[tuple[str, str]]:
    """(option, value) pairs for ``#SBATCH`` lines, in a stable order."""
    pairs = [
        ("--job-name", opts.job_name),
        ("--partition", plan.partition),
        ("--time", minutes_arg(plan.time_limit_seconds)),
        ("--gres", plan.gres),
        ("--qos", plan.qos),
        ("--cpus-per-task", str(plan.cpus or opts.cpus_per_gpu * plan.gpus)),
        ("--requeue", ""),
        ("--open-mode", "append"),  # a requeued run's output follows the earlier runs', never replaces them
        ("--comment", comment(plan)),
    ]
    if opts.spank_tokens:
        pairs.append(("--yolo-tokens", f"{plan.work_pixels:.0f}"))
    if signal_seconds(plan, opts):
        pairs.append(("--signal", f"B:USR2@{signal_seconds(plan, opts)}"))
    own_memory = any(_memory_option(raw.partition("=")[0]) for raw in opts.extra)  # the user's --mem wins
    if plan.memory_mb and not own_memory:
        pairs.append(("--mem", f"{plan.memory_mb}M"))
    elif opts.mem_per_cpu_mb and not own_memory:
        pairs.append(("--mem-per-cpu", f"{opts.mem_per_cpu_mb}M"))
    for option, value in (
        ("--account", opts.account),
        ("--output", opts.output or DEFAULT_OUTPUT),
        ("--error", opts.error),
        ("--mail-type", opts.mail_type),
        ("--mail-user", opts.mail_user),
        ("--dependency", opts.dependency),
        ("--begin", opts.begin),
        ("--constraint", opts.constraint),
    ):
        if value:
            pairs.append((option, value))
    for raw in opts.extra:
        if not raw.startswith("-"):
            raise UsageError(f"--sbatch-arg {raw!r}: give a whole option such as --exclusive or --nice=10")
        option, _, value = raw.partition("=")
        planned = planned_option(option)
        if planned:
            raise UsageError(
                f"--sbatch-arg {raw!r}: yolo-sbatch sets {planned} from its plan (a later #SBATCH line "
                "would override it); use yolo-sbatch's own options"
                + (" (-t/--time: your own limit)" if planned == "--time" else "")
            )
        pairs.append((option, value))
    return pairs


# What the plan decides (time, GPUs, QOS tier, the comment with its estimate, the requeue and
# checkpoint signal), and the options yolo-sbatch has flags for: not to be overridden by --sbatch-arg.
PLANNED = (
    "--time",
    "--time-min",
    "--gres",
    "--gpus",
    "--gpus-per-node",
    "--gpus-per-task",
    "--gpus-per-socket",
    "--qos",
    "--comment",
    "--partition",
    "--account",
    "--job-name",
    "--yolo-tokens",
    "--signal",
    "--requeue",
    "--no-requeue",
    "--open-mode",
    "--cpus-per-task",
    "--cpus-per-gpu",
    "--output",
    "--error",
    "--array",
    "--wrap",
)
PLANNED_SHORT = {
    "t": "--time",
    "G": "--gpus",
    "q": "--qos",
    "p": "--partition",
    "A": "--account",
    "J": "--job-name",
    "c": "--cpus-per-task",
    "o": "--output",
    "e": "--error",
    "a": "--array",
}


def _memory_option(option: str) -> bool:
    """Whether a raw sbatch option sets the job's memory (``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu``,
    any unambiguous prefix of them)."""
    return option.startswith("--mem") and any(m.startswith(option) for m in ("--mem", "--mem-per-cpu", "--mem-per-gpu"))


def planned_option(option: str) -> str | None:
    """The planned option ``option`` would set, or None. sbatch takes any unambiguous prefix of a long
    option (``--tim`` is ``--time``) and a short option's value attached (``-t5``)."""
    if option.startswith("--"):
        return next((p for p in PLANNED if len(option) > 2 and p.startswith(option)), None)
    return PLANNED_SHORT.get(option[1:2])


def render(plan: Plan, opts: JobOptions, train_words: tuple[str, ...]) -> str:
    """The job script for ``plan`` running the user's ultralytics command."""
    lines = []
    for option, value in directives(plan, opts):
        if not re.match(r"^--?[A-Za-z][A-Za-z0-9-]*$", option):
            raise UsageError(f"{option!r} is not an sbatch option")
        lines.append(f"#SBATCH {option}={directive_value(option, value)}" if value else f"#SBATCH {option}")
    env = dict(opts.environment)
    if plan.shard:
        env["SLURM_YOLO_GPU_SHARE"] = f"{plan.shard_share:g}"
    if opts.yolo_config_dir:
        env["YOLO_CONFIG_DIR"] = opts.yolo_config_dir
    env_lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()) if re.match(r"^[A-Z_][A-Z0-9_]*$", k)]
    launcher = " ".join(
        [shlex.quote(opts.python), "-m", "slurm_yolo", "run", "--"] + [shlex.quote(w) for w in train_words]
    )
    summary = (
        f"work {fmt_pixels(plan.work_pixels)}, predicted {plan.predicted_seconds / 60:.1f} min on {plan.partition}"
    )
    return fill(
        template("train.sbatch"),
        {
            "version": __version__,
            "summary": summary,
            "directives": "\n".join(lines),
            "environment": "\n".join(env_lines),
            "launcher": launcher,
            "signal_note": signal_note(signal_seconds(plan, opts)),
        },
    )
