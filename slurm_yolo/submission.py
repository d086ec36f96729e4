"""From an ultralytics command to a submitted Slurm job: the I/O around the pure estimate and plan.

``prepare`` counts the dataset, resolves the model, loads each candidate partition's calibration and
(for ``--partition auto``) the live queue, plans, and renders the script. ``submit`` hands it to
the real sbatch. Nothing here imports torch, ultralytics or pandas: this is the login-node path.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from . import admission, calibration, dataset, estimate, plan, render, spec
from .config import Config
from .errors import SlurmError, UsageError
from .slurm import commands


class Prepared(NamedTuple):
    """A decided job: the spec, the plan and the script sbatch will get."""

    spec: spec.TrainSpec
    plan: plan.Plan
    script: str
    options: render.JobOptions


def job_options(config: Config, **given: object) -> render.JobOptions:
    """The user's sbatch options over the config's job settings."""
    job = config["job"]
    values = {k: v for k, v in given.items() if v not in (None, ())}
    return render.JobOptions(
        python=job["python"],
        cpus_per_gpu=job["cpus_per_gpu"],
        mem_per_cpu_mb=job["mem_per_cpu_mb"],
        signal_seconds=job["signal_seconds"],
        spank_tokens=config["slurm"]["spank_tokens"],
        yolo_config_dir=job["yolo_config_dir"],
        **values,  # type: ignore[arg-type]
    )


def prepare(
    config: Config,
    words: list[str],
    request: plan.Request,
    options: render.JobOptions,
    flops_factor: float | None = None,
) -> Prepared:
    """Validate, estimate, plan and render; raises UsageError/SlurmError with one line, changes nothing.

    A named partition plans offline (no Slurm call); ``auto`` reads the live queue.
    """
    s = spec.parse(words)
    counts = dataset.count(str(s.get("data")), config.cache_dir / "datasets.json")
    reference = config["estimate"]["reference_gflops"]
    model = estimate.resolve_model(s.model, reference, config["job"]["python"], config.cache_dir, flops_factor)
    w = estimate.workload(s, counts.train, counts.val, model)
    if s.devices == 0:
        raise UsageError("device=cpu: yolo-sbatch schedules GPU jobs; drop device= (the job uses its GPUs)")

    if request.partition == "auto":
        names = sorted(config.partitions)
        if not names:
            raise UsageError("--partition auto needs partitions in the config ([partitions.NAME])")
    else:
        names = [request.partition]
    states = {}
    if request.partition == "auto":
        states = commands.partition_states(names, bin_dir=Path(config["slurm"]["bin_dir"]))
    plans = []
    for name in names:
        cal = calibration.load(config, name)
        plans.append(
            plan.plan_partition(
                w, cal.model, cal.source, config.partition(name), request, config, s.devices, states.get(name)
            )
        )
    chosen = plan.choose(plans) if request.partition == "auto" else plans[0]
    script = render.render(chosen, options, s.tokens)
    return Prepared(spec=s, plan=chosen, script=script, options=options)


def submit(config: Config, prepared: Prepared) -> int:
    """Check the account's tokens cover the job, then submit with the real sbatch; the job id."""
    admission.check(config, prepared.plan, prepared.options.account)
    try:
        return commands.submit(
            prepared.script,
            [],
            bin_dir=Path(config["slurm"]["bin_dir"]),
            timeout=config["slurm"]["timeout_seconds"],
        )
    except SlurmError as e:
        raise SlurmError(f"job not submitted: {e}") from None
