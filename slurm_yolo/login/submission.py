"""From an ultralytics command to a submitted Slurm job: the I/O around the pure estimate and plan.

``prepare`` counts the dataset, resolves the model, loads each candidate partition's calibration,
plans, renders the script and (for ``--partition auto``) asks Slurm's scheduler when each would
start. ``submit`` hands it to the real sbatch. Nothing here imports torch, ultralytics or pandas:
this is the login-node path.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core import assets, dataset, resume, sizing, spec
from slurm_yolo.core import config as config_mod
from slurm_yolo.core.billing import comment, policy
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import QuotaError, SlurmError, SlurmYoloError, UnreachableError, UsageError
from slurm_yolo.core.model import estimate
from slurm_yolo.login import admission, plan, progress, render
from slurm_yolo.slurm import commands, nodes, reasons
from slurm_yolo.slurm.visibility import current_user
from slurm_yolo.state import calibration, cost, db, ledger


def default_partition(bin_dir: Path, timeout: float) -> str:
    """Slurm's default partition, where sbatch puts a job that names none; one line when Slurm has
    none or cannot be asked."""
    try:
        return commands.default_partition(bin_dir=bin_dir, timeout=timeout)
    except SlurmError as e:
        raise SlurmError(f"no --partition given, none configured, and no default partition from Slurm: {e}") from None


_LOG_PATTERN = re.compile(r"%(\d*)(.)")  # sbatch's filename patterns: %x, %j, %u, %%, ...


def _chdir(extra: tuple[str, ...]) -> str | None:
    """The job's working folder from ``--sbatch-arg=--chdir=DIR``, where relative log paths start."""
    for raw in extra:
        option, _, value = raw.partition("=")
        if len(option) > 4 and "--chdir".startswith(option):
            return value
    return None


def _login_name(missing: str) -> str:
    """The user's name, as Slurm expands ``%u`` in log paths; ``missing`` without a passwd entry."""
    import pwd  # only here: the user's name for %u

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return missing


def check_log_paths(options: render.JobOptions) -> None:
    """Refuse an ``--output``/``--error`` that lands in a folder that does not exist: Slurm would fail the
    job at once, leaving no log to say why. ``%x`` (the job name), ``%u`` and ``%%`` are expanded as Slurm
    will; a folder holding another pattern (``logs/%j/``) is left to Slurm."""
    unknown = "\0"
    user = _login_name(unknown)  # no passwd entry: a folder named for the user is left to Slurm

    def expand(m: re.Match[str]) -> str:
        return {"x": options.job_name, "u": user, "%": "%"}.get(m.group(2), unknown)

    base = Path(_chdir(options.extra) or ".")
    for option, pattern in (("--output", options.output or render.DEFAULT_OUTPUT), ("--error", options.error)):
        if not pattern or "\\" in pattern:  # a backslash turns Slurm's patterns off
            continue
        folder = os.path.dirname(_LOG_PATTERN.sub(expand, pattern))
        if not folder or unknown in folder:
            continue
        try:
            ok = os.path.isdir(base / folder)
        except (OSError, ValueError):
            ok = False
        if ok:
            continue
        why = "(Slurm would fail the job at once, with no log)"
        if "/" in options.job_name and "%x" in pattern:
            raise UsageError(
                f"--job-name {options.job_name!r} holds a '/', so {option} {pattern} points into folder"
                f" {folder}, which does not exist {why}"
            )
        raise UsageError(f"{option} {pattern}: folder {folder} does not exist {why}")


def check_project(s: spec.TrainSpec, options: render.JobOptions) -> None:
    """Refuse a ``project=`` folder the user cannot write: the job would fail on a PermissionError after
    its start-up, and pay for it. Only what this host shows is judged (a folder that is not here, a
    compute node's scratch, is left alone), and only a project given (ultralytics' default follows its
    settings)."""
    given = s.args.get("project")
    if given in (None, ""):
        return
    target = Path(_chdir(options.extra) or ".") / str(given)
    try:
        if target.exists():
            blocked = None if target.is_dir() and os.access(target, os.W_OK | os.X_OK) else target
        else:
            blocked = (
                target.parent if target.parent.is_dir() and not os.access(target.parent, os.W_OK | os.X_OK) else None
            )
    except (OSError, ValueError):
        return
    if blocked is not None:
        raise UsageError(
            f"project={given}: {blocked} is not a folder you can write (the job would fail on it):"
            " give project= a folder of yours"
        )


def log_file(options: render.JobOptions, job_id: int) -> Path:
    """The job's log (its ``--output``, expanded as Slurm expands it, from its work dir): what
    ``--wait`` names when the job did not complete, so the user knows where to look."""
    user = _login_name("")
    pattern = options.output or render.DEFAULT_OUTPUT
    name = pattern if "\\" in pattern else progress.expand_pattern(pattern, job_id, options.job_name, user)
    return (Path(_chdir(options.extra) or ".") / name).absolute()


def missing_weights(s: spec.TrainSpec, options: render.JobOptions) -> str:
    """A line when ``model=`` names weights (``.pt``) that are not on disk from the job's work dir
    ('' otherwise): the job runs ultralytics offline (``YOLO_OFFLINE=1``), so a download it would try
    fails the job seconds after it starts. Only a warning: they may sit in ultralytics' weights
    folder on the compute nodes, which a login node cannot see. Weights named bare (``yolo11n.pt``)
    are ``unstaged``'s: staged, or downloaded where the nodes have the network."""
    model = s.get("model")
    if not isinstance(model, str) or not model.endswith(".pt") or assets.is_weights_name(model):
        return ""
    try:
        if (Path(_chdir(options.extra) or ".") / Path(model).expanduser()).is_file():
            return ""
    except (OSError, RuntimeError, ValueError):  # a name too long, ~user unknown: ultralytics cannot open it either
        pass
    return (
        f"model {model} is not on disk from the job's work dir, and the job cannot download it (ultralytics runs"
        f" offline there): it fails unless the weights are in ultralytics' weights folder on the compute node;"
        f" model={Path(model).stem}.yaml trains from scratch"
    )


def unstaged(config: Config, s: spec.TrainSpec, options: render.JobOptions) -> list[assets.Unstaged]:
    """The plan's named dataset and weights that its job would download, on a site whose compute
    nodes have no network (``stage.nodes_online`` false); none where they have it."""
    if config.stage.nodes_online:
        return []
    workdir = Path(_chdir(options.extra) or ".").absolute()
    return assets.unstaged(s, assets.places(config.stage, config.job.yolo_config_dir, workdir), workdir)


class Prepared(NamedTuple):
    """A decided job: the spec, the dataset's counts, the plan and the script sbatch will get."""

    spec: spec.TrainSpec
    counts: dataset.DatasetCounts
    plan: plan.Plan
    script: str
    options: render.JobOptions
    quote: cost.Quote  # what its start holds and its predicted run would be charged
    warnings: tuple[str, ...] = ()  # what the user should know before the job runs (stderr, one line each)
    unstaged: tuple[assets.Unstaged, ...] = ()  # what its offline job would download: refused until staged


def job_options(config: Config, **given: object) -> render.JobOptions:
    """The user's sbatch options over the config's job settings."""
    job = config.job
    values = {k: v for k, v in given.items() if v not in (None, ())}
    site: dict[str, Any] = {
        "python": job.python,
        "cpus_per_gpu": job.cpus_per_gpu,
        "mem_per_cpu_mb": job.mem_per_cpu_mb,
        "signal_seconds": job.signal_seconds,
        "spank_tokens": config.slurm.spank_tokens,
        "yolo_config_dir": job.yolo_config_dir,
        "environment": assets.job_environment(config.stage),  # the site's datasets and weights folders
    }
    return render.JobOptions(**{**site, **values})


def prepare(
    config: Config,
    words: list[str],
    request: plan.Request,
    options: render.JobOptions,
    flops_factor: float | None = None,
) -> Prepared:
    """Validate, estimate, plan and render; raises UsageError/SlurmError with one line, changes nothing.

    A named partition plans offline (no Slurm call); with none, Slurm names its default; ``auto``
    asks Slurm's scheduler when each configured partition would start the job (``sbatch --test-only``).
    """
    s = spec.parse(words)
    check_log_paths(options)
    check_project(s, options)
    s = resume.resumed(s)  # a resumed run plans the checkpoint's arguments and the epochs it has left
    counts = dataset.count(str(s.get("data")), config.cache_dir / "datasets.json", config.job.yolo_config_dir)
    reference = config.estimate.reference_gflops
    model = estimate.resolve_model(s.model, reference, config.job.python, config.cache_dir, flops_factor)
    dataset.check_task(estimate.task_of(s.model), s.model, counts, config.job.yolo_config_dir)
    w = estimate.workload(s, counts.train, counts.val, model)
    missing = unstaged(config, s, options)
    request = request._replace(
        autobatch=s.autobatch, cache=sizing.cache_mode(s.get("cache")), train_hours=s.get("time")
    )
    if s.devices == 0:
        raise UsageError("device=cpu: yolo-sbatch schedules GPU jobs; drop device= (the job uses its GPUs)")

    bin_dir, timeout = config.bin_dir, config.slurm.timeout_seconds
    partition = request.partition or ("auto" if config.partitions else default_partition(bin_dir, timeout))
    if partition == "auto":
        names = sorted(config.partitions)
        if not names:
            raise UsageError("--partition auto needs partitions in the config ([partitions.NAME])")
    else:
        names = [partition]
        if request.prefer != "soonest":
            raise UsageError(
                f"--prefer {request.prefer} chooses among partitions: give --partition auto, not {partition}"
            )
    data_line = f"data: {counts.yaml_path}: {counts.train} train, {counts.val} val images, {counts.source}"
    plans, refused = [], []
    shaped = nodes.shaped(config, names)
    for name in names:
        cal = calibration.load(config, name)
        try:
            plans.append(plan.plan_partition(w, cal.model, cal.source, shaped[name], request, config, s.devices))
        except UsageError as e:  # auto: a partition too small for the GPUs asked, or too slow, is no choice
            e.explain = (data_line, *e.explain)
            if partition != "auto":
                raise
            refused.append(e)
    if not plans:
        raise refused[0]
    scripts = [render.render(p, options, s.tokens) for p in plans]
    quotes, unpriced = quotes_for(config, plans, options.account or "")
    if partition == "auto":
        answers = commands.will_run(scripts, bin_dir=bin_dir, timeout=timeout)
        try:
            labels = [
                f", holds {fmt_tokens(q.hold_tokens)}{cost.money_part(q)}"
                + (f", expected {cost.fmt_money(q.expected_money, q.currency)}" if q.cost_per_gpu_hour > 0 else "")
                for q in quotes
            ]
            chosen = plan.choose(plans, answers, time.time(), costs(quotes), request.prefer, labels)
        except (
            SlurmError
        ) as e:  # refused everywhere: an account not hers is the reason to name, not "Invalid account" x N
            require_association(options.account, bin_dir)
            if reasons.refused_qos(str(e)):
                raise SlurmError(f"{e}: {qos_hint([p.qos for p in plans], options.account, bin_dir)}") from None
            if refused:  # and the partitions never planned say why too
                raise SlurmError(f"{e}; not planned: {'; '.join(str(r) for r in refused)}") from None
            raise
    else:
        chosen = plans[0]
    q = quotes[[p.partition for p in plans].index(chosen.partition)]
    chosen.explain.insert(0, data_line)
    script = scripts[[p.partition for p in plans].index(chosen.partition)]
    warnings = tuple(
        filter(
            None,
            [
                config_mod.missing(config),
                unpublished(config),
                f"{assets.unstaged_line(missing)} (a submission is refused until then)" if missing else "",
                missing_weights(s, options),
                unpriced,
                chosen.feed,
                chosen.memory_warning,
                chosen.short_limit,
            ],
        )
    )
    if partition != "auto" and config.partitions and partition not in config.partitions:  # a typo plans "cleanly"
        warnings += (
            f"partition {partition} is not one of the configured ({', '.join(sorted(config.partitions))}):"
            " planned with the defaults (whole GPUs, the prior k); Slurm refuses it if it does not exist",
        )
    chosen.explain.extend(warnings)
    chosen.explain.extend(f"partition auto: not planned: {e}" for e in refused)  # too small, too slow: why
    after_qos = next((i + 1 for i, line in enumerate(chosen.explain) if line.startswith("qos: ")), len(chosen.explain))
    chosen.explain.insert(
        after_qos,
        f"cost: holds {fmt_tokens(q.hold_tokens)} of budget at its start ({chosen.time_limit_seconds // 60} min x"
        f" {q.gpu_share} GPU x {q.price:,} tokens/GPU-s x rate {policy.rate_text(q.rate_ppm)}), expected charge"
        f" {fmt_tokens(q.expected_tokens)}; {cost.fmt_amount(q.hold_gpu_hours)} GPU-h held,"
        f" {cost.fmt_amount(q.expected_gpu_hours)} expected"
        + (
            f"; {cost.fmt_money(q.hold_money, q.currency)} held, {cost.fmt_money(q.expected_money, q.currency)} expected"
            f" (the partition's cost_per_gpu_hour {q.cost_per_gpu_hour:g})"
            if q.cost_per_gpu_hour > 0
            else ""
        ),
    )
    return Prepared(
        spec=s,
        counts=counts,
        plan=chosen,
        script=script,
        options=options,
        quote=q,
        warnings=warnings,
        unstaged=tuple(missing),
    )


def costs(quotes: list[cost.Quote]) -> list[float]:
    """What ``--prefer cheapest`` compares: the expected money where every partition has a price in
    money (a faster card can cost less in all, and holds in tokens do not say it), else the holds."""
    if quotes and all(q.cost_per_gpu_hour > 0 for q in quotes):
        return [q.expected_money for q in quotes]
    return [q.hold_tokens for q in quotes]


def unpublished(config: Config) -> str:
    """A line for a host whose site config names a public folder it does not have, or one without
    the published copies ('' otherwise, and for a host that reads the books themselves): a login
    node not given them plans with the config's prior k and default price, which slurmctld's
    admission and the prolog do not use."""
    if config.path is None or os.access(db.private_dir(config.state_dir), os.X_OK):
        return ""
    public = config.public_dir
    if config.paths.public_dir == "" and os.path.isdir(public):
        return ""  # the state dir itself, as on a single host: an empty one is a new site
    why = db.public_problem(public)  # a folder of its own must hold the copies
    if not why:
        return ""
    return (
        f"{why}: planned with the config's prior k and default price, not the site's time models and"
        " prices; share paths.public_dir with this host read-only (docs/site-install.md)"
    )


def quotes_for(config: Config, plans: list[plan.Plan], account: str) -> tuple[list[cost.Quote], str]:
    """Each plan's cost at the prices its start would be held at (the published ledger's), and a note
    when the ledger did not answer: the costs are then at the config's default price (a plan must not
    fail for it; the prolog holds at the real price). A run the site exempts (its partition, or the
    ``--account`` given) holds nothing: price 0."""
    try:
        lg = ledger.reader(config)
    except SlurmYoloError as e:
        lg, note = None, f"the ledger did not answer ({str(e).splitlines()[0]}): the cost shown is at the default price"
    else:
        note = ""
    try:
        quotes = []
        for p in plans:
            part = config.partition(p.partition)
            price, rate = cost.prices(config, lg, p.partition, p.qos)
            if ledger.exempt(p.partition, account, config):
                price = 0
            quotes.append(
                cost.quote(
                    p.time_limit_seconds,
                    p.predicted_seconds,
                    policy.gres_share(p.gres, part.shards_per_gpu),
                    price,
                    rate,
                    part.cost_per_gpu_hour,
                    config.ledger.currency,
                )
            )
        return quotes, note
    finally:
        if lg is not None:
            lg.close()


class Submitted(NamedTuple):
    job_id: int
    told: list[str]  # what slurmctld's admission told the submitter (that it waits for credits)
    waits_until: float | None  # the begin time slurmctld gave a job that waits for credits


def submit(config: Config, prepared: Prepared) -> Submitted:
    """Check the account's tokens cover the job (now, or after a refill it may wait for), then submit
    with the real sbatch. A refusal of an account the user may not use says so (admission runs before
    Slurm checks the association, so it would otherwise read as an account with nothing left)."""
    unread = config_mod.missing(config)
    if unread:  # a plan on the defaults (whole GPUs, the prior k, the default price) can hold far more than the site's
        raise UsageError(f"job not submitted: {unread} (--dry-run plans on the defaults)")
    if prepared.unstaged:  # it would fail on the download at its start, after its hold
        raise UsageError(f"job not submitted: {assets.unstaged_line(list(prepared.unstaged))}")
    bin_dir = config.bin_dir
    try:
        wait = admission.check(config, prepared.plan, prepared.options.account, prepared.quote)
        job_id, told = commands.submit_told(prepared.script, [], bin_dir=bin_dir, timeout=config.slurm.timeout_seconds)
    except QuotaError:
        require_association(prepared.options.account, bin_dir)
        raise
    except UnreachableError as e:
        raise SlurmError(f"job not submitted: {e}") from None
    except SlurmError as e:
        require_association(prepared.options.account, bin_dir)
        hint = _partition_hint(str(e), prepared.plan.partition, bin_dir)
        if reasons.refused_qos(str(e)):
            hint = f": {qos_hint([prepared.plan.qos], prepared.options.account, bin_dir)}"
        raise SlurmError(f"job not submitted: {e}{hint}") from None
    # its own reckoning (the published balance) or slurmctld's (the account's pending jobs counted too)
    waits = wait > 0 or any("waits for credits" in line for line in told)
    try:
        until = commands.pending(job_id, bin_dir).starts if waits else None
    except SlurmError:
        until = None  # submitted all the same: the time is slurmctld's message's
    return Submitted(job_id, told, until)


def qos_hint(qos: list[str], account: str | None, bin_dir: Path) -> str:
    """For Slurm's "Invalid qos specification": which QOS the plan asked and the ``sacctmgr`` line that
    grants it to the account (the user's default account where she gave none)."""
    try:
        known: list[str] | None = commands.qos_names(bin_dir)
    except SlurmError:
        known = None  # slurmdbd not answering: the grant is still the line to run
    if not account:
        try:
            account = commands.default_account(current_user(), bin_dir)
        except SlurmError:
            account = ""
    try:
        cluster = commands.home_cluster(bin_dir)
    except SlurmError:
        cluster = ""  # the grant without its cluster: still the line, wider than it need be
    return reasons.missing_qos(sorted(set(qos)), account or "", known, cluster)


def _partition_hint(error: str, partition: str, bin_dir: Path) -> str:
    """For Slurm's "Invalid partition name": the partitions it has, the one meant first if only the
    case differs (-p T4 for t4); '' for any other refusal."""
    if "Invalid partition" not in error:
        return ""
    try:
        known = commands.partitions(bin_dir)
    except SlurmError:
        return ""
    meant = next((p for p in known if p.lower() == partition.lower()), None)
    return f" ({f'did you mean -p {meant}? ' if meant else ''}Slurm's partitions: {', '.join(known) or 'none'})"


def association_problem(account: str | None, bin_dir: Path) -> str:
    """Why ``-A account`` is not one the user may submit to (Slurm folds its case), or '': also when
    no account was given (Slurm's default is the user's own) or slurmdbd did not answer."""
    if not account:
        return ""
    try:
        mine = commands.accounts_of(current_user(), bin_dir)
    except SlurmError:
        return ""
    if account.lower() in mine:
        return ""
    return (
        f"account {account!r} is not one you may submit to (yours: {', '.join(mine) or 'none'}):"
        " give -A one of yours, or ask its coordinator to add you"
    )


def require_association(account: str | None, bin_dir: Path) -> None:
    """UsageError when ``-A account`` is not the user's: asked only once Slurm or the ledger refused
    (a refusal's real reason), so the normal path costs no sacctmgr call."""
    problem = association_problem(account, bin_dir)
    if problem:
        raise UsageError(problem)


def settlement_from_slurm(config: Config, job_id: int, cluster: str, since: float, deadline: float, poll: float) -> str:
    """``settlement`` where Slurm's PrivateData keeps job rows out of the published ledger: from the
    job's AdminComment, which the ledger writes once it has settled a run and which sacct shows only
    to those Slurm lets see the job."""
    bin_dir = config.bin_dir
    runs: dict[int, dict[str, str]] = {}
    while True:
        try:
            found = commands.admin_comments([job_id], bin_dir=bin_dir)
        except SlurmError:
            found = {}
        for (on, job, submit), text in found.items():
            if on == cluster and job == job_id and submit >= since:
                runs.update(comment.parse(text))
        if runs or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    if not runs:
        return f"job {job_id}: not settled yet (sacct -j {job_id} -o AdminComment shows its charge once it is)"
    charge, refund, hold = (sum(int(r.get(k) or 0) for r in runs.values()) for k in ("charge", "refund", "hold"))
    over = f" over its {len(runs)} runs" if len(runs) > 1 else ""
    return (
        f"job {job_id}: charged {fmt_tokens(charge)} of budget{over}, {fmt_tokens(refund)} of its"
        f" {fmt_tokens(hold)} {'holds' if over else 'hold'} back (its AdminComment: this cluster's PrivateData"
        " keeps jobs out of the published ledger)"
    )


def _not_in_ledger(config: Config, job_id: int) -> str:
    """Why a run of the job is not in the ledger: the site exempts it (sacct's partition and account),
    or these are not the hooks' books."""
    try:
        runs = commands.job_runs([job_id], bin_dir=config.bin_dir).get(job_id, [])
    except SlurmError:
        runs = []
    why = ledger.exempt(runs[-1].partition, runs[-1].account, config) if runs else ""
    if why:
        return f"not billed: {why} is exempt (ledger.exempt_*), nothing was held or charged"
    return f"no run of it in the ledger at {ledger.where(config)} (not the hooks' config?)"


def settlement(config: Config, job_id: int, since: float = 0.0, timeout: float = 30.0, poll: float = 1.0) -> str:
    """What a finished job was charged, all its runs together (a requeued job's too: the job is what
    the user asked for), in the submit line's units, once the ledger has settled them (the epilog
    settles a run seconds after it ends, once sacct has its end): what ``--wait`` ends with, so the
    user sees the cost after the job beside the hold before it. ``since``: the job's submission (an
    older job of the same id, from before a controller lost its state, is another job). A line saying
    where to look when the ledger has not settled them within ``timeout``."""
    bin_dir = config.bin_dir
    try:
        cluster = commands.cluster_name(bin_dir)
    except SlurmError:
        cluster = None
    deadline = time.monotonic() + timeout
    runs: list[ledger.store.Row] = []
    while True:
        lg = ledger.reader(config)  # opened anew each time: a write publishes a new copy, renamed in
        hidden = False
        if lg is not None:
            with lg:
                runs = [r for r in lg.runs(job_id, cluster) if r["submit_time"] >= since]
                hidden = lg.hides_jobs()
        if not runs and hidden and cluster is not None:
            return settlement_from_slurm(config, job_id, cluster, since, deadline, poll)
        if not runs:  # held at its start, so in the hooks' books, unless the site exempts it
            return f"job {job_id}: {_not_in_ledger(config, job_id)}"
        if all(r["state"] == "settled" for r in runs) or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    if any(r["state"] != "settled" for r in runs):
        return f"job {job_id}: not settled yet (slurm-yolo ledger history {runs[-1]['account']} shows its charge once it is)"
    hours = sum(cost.gpu_hours(r["elapsed"] or 0, float(r["gpus"])) for r in runs)
    part = config.partition(str(runs[-1]["partition"]))
    money = (
        f" = {cost.fmt_money(hours * part.cost_per_gpu_hour, config.ledger.currency)}"
        if part.cost_per_gpu_hour > 0
        else ""
    )
    charge, refund, hold = (sum(int(r[k] or 0) for r in runs) for k in ("charge", "refund", "hold"))
    over = f" over its {len(runs)} runs" if len(runs) > 1 else ""
    return (
        f"job {job_id}: charged {fmt_tokens(charge)} of budget for {cost.fmt_amount(hours)} GPU-h{money}{over},"
        f" {fmt_tokens(refund)} of its {fmt_tokens(hold)} {'holds' if over else 'hold'} back"
    )
