"""``slurm-yolo doctor``: what this host lacks for its role, one line per problem with what to do.

A site's hosts each need something else. The **controller** (slurmctld runs its hooks there) needs
the config the hooks read, PrologSlurmctld and EpilogSlurmctld wired to the hook client, the
admission script, the config's QOS tiers in Slurm, a ledger it can write whose files no user can
open, hookd answering, the published copies, and a clock in step. A **login** node needs the config,
Slurm's client commands, the published copies and sbatch's ``--yolo-tokens``. A **compute** node
needs the ``[train]`` install at ``job.python`` and the SPANK plugin in its plugstack. ``auto`` takes the controller when this host is one of
slurmctld's hosts, compute when a slurmd runs here, else login. Problems change the exit code;
notes (what is fine but worth knowing) do not.
"""

from __future__ import annotations

import contextlib
import math
import os
import pwd
import re
import socket
import sqlite3
import stat
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core import gputypes, sizing
from slurm_yolo.core.config import Config, config_path
from slurm_yolo.core.errors import SlurmError, SlurmYoloError
from slurm_yolo.core.model.estimate import Workload
from slurm_yolo.core.model.timemodel import TimeModel, components
from slurm_yolo.slurm import commands, nodes
from slurm_yolo.slurm.parsers import ControllerConfig
from slurm_yolo.state import availability, books, calibration, db, ledger

SUPPORTED = ("22.05", "24.11", "26.05")  # the releases the money path is tested on
CLOCK_SLACK_SECONDS = 5.0  # beyond the time the question took: slurmctld prints its clock to the second
AUDIT_LATE_SECONDS = 3 * 3600  # cron's `ledger audit` runs hourly (deploy/crontab): three missed runs
SPANK_PLUGIN = "yolo_tokens.so"
ROLES = ("auto", "controller", "login", "compute")
HOOK_KEYS = ("PrologSlurmctld", "EpilogSlurmctld")


class Problem(NamedTuple):
    what: str
    fix: str


class Report(NamedTuple):
    role: str
    release: str  # Slurm's, as its controller says ('' when it did not answer)
    problems: list[Problem]
    notes: list[str]


def detect_role(cc: ControllerConfig | None, host: str, slurmd_here: bool) -> str:
    """The role of ``host``: one of slurmctld's hosts, else a node running slurmd, else a login node."""
    if cc is not None and host.split(".")[0] in {c.split(".")[0] for c in cc.controllers}:
        return "controller"
    return "compute" if slurmd_here else "login"


def _slurmd_here() -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "slurmd":
                return True
        except OSError:
            continue
    return False


def check(config: Config, role: str = "auto") -> Report:
    """Every check of ``role`` on this host (``auto``: ``detect_role``)."""
    problems: list[Problem] = []
    notes: list[str] = []
    if config.path is None:
        problems.append(
            Problem(
                f"no slurm-yolo config was read ({config_path(config.env)} is missing)",
                "install one as /etc/slurm-yolo/config.toml (deploy/config.toml is the template),"
                " or export SLURM_YOLO_CONFIG=<the site's config>",
            )
        )
    bin_dir = config.bin_dir
    try:
        asked = time.time()
        cc: ControllerConfig | None = commands.controller_config(bin_dir, timeout=config.slurm.timeout_seconds)
        answered = time.time()
    except SlurmError as e:
        cc = None
        problems.append(
            Problem(
                f"Slurm's controller did not answer ({e})",
                "check that slurmctld runs and that this host's slurm.conf (or SLURM_CONF) names it",
            )
        )
    if role == "auto":
        role = detect_role(cc, socket.gethostname(), _slurmd_here())
    release = ""
    if cc is not None:
        release = cc.values.get("SLURM_VERSION", "")
        problems += _slurm(cc, release, notes, (asked, answered))
    if role == "controller" and cc is not None:
        problems += _hooks(config, cc) + _client(config) + _admission(config, cc) + _qos(config) + _books(config, cc)
        problems += _qos_grants(config, cc.values.get("ClusterName", ""))
        problems += _hookd(config)
        problems += _published(config, notes)
    elif role == "login":
        problems += _login(config, notes)
    elif role == "compute":
        problems += _compute(config) + _plugstack(config, cc)
    if role in ("controller", "login"):
        problems += _time_models(config, notes)
    return Report(role, release, problems, notes)


def probe_account(config: Config) -> str:
    """The account a suggested probe job is billed to, so that the line runs as printed: the doctor's
    user's default account, else the first account with a budget; "ACCOUNT" when neither is known."""
    with contextlib.suppress(SlurmError, KeyError):
        mine = commands.default_account(pwd.getpwuid(os.getuid()).pw_name, config.bin_dir)
        if mine:
            return mine
    with contextlib.suppress(SlurmYoloError):
        lg = ledger.reader(config)
        if lg is not None:
            with lg:
                funded = [str(a["name"]) for a in lg.accounts() if a["credited"] > 0 or a["rate_per_day"] > 0]
            if funded:
                return funded[0]
    return "ACCOUNT"


def _time_models(config: Config, notes: list[str]) -> list[Problem]:
    """A partition whose card the time model does not know is a problem (its limits would be a CPU's),
    and so is one whose model's cross-validated error is over ``estimate.doctor_cv_error`` (with its
    likely cause); one nobody has calibrated yet is a note with the first-day step."""
    out = []
    account = ""
    for name, part in sorted(config.partitions.items()):
        unknown = gputypes.unknown_line(part)
        if unknown:
            out.append(Problem(unknown, f"set partitions.{name}.gpu_like (docs/admins.md: GPU types)"))
        cal = calibration.load(config, name)
        tm = cal.model
        if not (cal.stale or tm.n == 0 or (tm.cv_median or 0.0) > config.estimate.doctor_cv_error):
            continue
        account = account or probe_account(config)
        probe = f"`slurm-yolo calibrate --probe {name} -A {account}`"
        if cal.stale:
            out.append(
                Problem(
                    f"{cal.stale}: its jobs plan with the GPU-type priors", f"calibrate it again on this card: {probe}"
                )
            )
        elif tm.n == 0:
            notes.append(
                f"partition {name} is not calibrated: its jobs plan with {_uncalibrated(config, name, cal.source)};"
                f" run {probe} (one short real job, billed to {account}) or"
                f" `slurm-yolo calibrate --partition {name} RUN_FOLDERS` (runs trained on its card)"
            )
        else:
            out.append(_poor_fit(config, name, tm, probe))
    return out + _starved(config)


def _uncalibrated(config: Config, name: str, source: str) -> str:
    """Where an uncalibrated partition's model comes from, in words: its priors, and whether its jobs'
    feedback has moved them (``load``'s source then names the last job, "job 24 2026-...")."""
    prior = calibration.prior_name(config, name).split(" (")[0]
    if source.startswith(("job ", "a job's feedback")):
        last, _, at = source.split(" (")[0].rpartition(" ")
        return f"{prior}, as its jobs' feedback moved them (last: {last} at {at}), with no run of its own fitted"
    return prior


FEW_RUNS = 10  # fewer runs behind a fit than this: its cross-validated error is itself a guess


def fit_causes(tm: TimeModel, sources: dict[str, int]) -> list[str]:
    """The likely causes of a poor fit, each with what to do: few runs, run folders trained elsewhere
    mixed in, runs on more than one GPU (DDP), and ``sources`` (``Store.sample_sources``) counted."""
    out = []
    if tm.n < FEW_RUNS:
        out.append(f"few samples: {tm.n} runs behind it (a probe job adds a few measured on this partition)")
    folders, jobs = sources.get("run-dir", 0), sources.get("job", 0)
    if folders and jobs:
        out.append(
            f"mixed evidence: {folders} run folders (trained wherever they were, maybe on another card or a"
            f" contended node) with {jobs} of this partition's jobs"
        )
    gpus = tm.covered.get("gpus")
    if gpus and gpus[1] > 1:
        out.append(
            f"more than one card: its runs used {gpus[0]:g}-{gpus[1]:g} GPUs, and DDP's efficiency"
            " (partitions.NAME.ddp_efficiency) is the config's guess"
        )
    return out or ["noisy runs: contended nodes (other jobs sharing their CPUs) or mixed workloads"]


def _poor_fit(config: Config, name: str, tm: TimeModel, probe: str) -> Problem:
    """A partition whose model predicts its own runs poorly (cross-validated), with its likely cause."""
    sources: dict[str, int] = {}
    with contextlib.suppress(SlurmYoloError, OSError, sqlite3.Error):
        sources = calibration.sample_sources(config, name)
    causes = fit_causes(tm, sources)
    return Problem(
        f"partition {name}: its time model misses its own runs by {tm.cv_median or 0:.0%} (median, cross-validated;"
        f" p90 {tm.cv_p90 or 0:.0%}, bias {tm.cv_bias or 0:+.0%}), over the site's {config.estimate.doctor_cv_error:.0%}"
        f" (estimate.doctor_cv_error): its limits are padded to cover that; likely cause: {'; '.join(causes)}",
        f"calibrate it from runs measured alone on its card: {probe}, then check the fit with"
        f" `slurm-yolo recalibrate -p {name} --dry-run`",
    )


def _starved(config: Config) -> list[Problem]:
    """A GPU partition whose nodes cannot feed a typical job: yolov8s on a COCO-size dataset at imgsz
    640, batch 16, with as many CPUs as the plan may give it (the node's share per GPU), keeps its GPU
    less than half busy."""
    typical = Workload(118287, 5000, 640, 1, 16, 1, "yolov8s", "yolov8", 28.6)
    ref = config.estimate.reference_gflops
    out = []
    shaped = nodes.shaped(config, sorted(config.partitions))
    for name, part in shaped.items():
        if gputypes.card(part).type is None:
            continue
        tm = calibration.load(config, name).model
        per, cores, _ = sizing.cpus(typical, tm, part, 1, 0, config.job.cpus_per_gpu, ref)
        c = components(typical, tm, 1, part.ddp_efficiency, ref, cores)
        if c.loader > 2 * c.compute:
            need = math.ceil(sizing.loader_need(typical, tm, 1, part.ddp_efficiency, ref)) * max(
                1, part.threads_per_core
            )
            out.append(
                Problem(
                    f"partition {name}: a typical job (yolov8s at imgsz 640, batch 16) gets at most {per} CPUs per GPU"
                    f" ({sizing.shape_text(part, 'Slurm or the config')}), which keep its GPU about"
                    f" {c.compute / c.loader:.0%} busy; {need} would feed it",
                    f"give its nodes more CPUs per GPU, or set partitions.{name}.node_cpus_per_gpu if Slurm's"
                    " node records understate them",
                )
            )
    return out


def _slurm(cc: ControllerConfig, release: str, notes: list[str], asked: tuple[float, float]) -> list[Problem]:
    """``asked``: this host's clock when the question went and when the answer came; slurmctld's clock
    (to the second) falls between them unless the clocks differ, however long a busy slurmctld took."""
    out = []
    if ".".join(release.split(".")[:2]) not in SUPPORTED:
        out.append(
            Problem(
                f"Slurm {release or '(no SLURM_VERSION)'} is not a release slurm-yolo is tested on"
                f" ({', '.join(SUPPORTED)})",
                "run the test suite (bash deploy/test) against it first",
            )
        )
    if cc.as_of is not None:
        skew = max(asked[0] - 1 - cc.as_of, 0.0) or min(asked[1] - cc.as_of, 0.0)
        if abs(skew) > CLOCK_SLACK_SECONDS:
            out.append(
                Problem(
                    f"this host's clock is {skew:+.0f} s off slurmctld's",
                    "keep every host's clock in step (chrony or systemd-timesyncd): runs are keyed and priced by time",
                )
            )
    hidden = {v.strip().lower() for v in cc.values.get("PrivateData", "").split(",")}
    if not hidden & {"accounts", "usage"}:
        notes.append("PrivateData hides no accounts: every user sees every account's balance, as Slurm shows sshare")
    return out


def _script_config(path: Path) -> str | None:
    """The SLURM_YOLO_CONFIG a hook wrapper script sets (None: not a script, or it sets none)."""
    try:
        if path.stat().st_size > 65536:
            return None
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key == "SLURM_YOLO_CONFIG":
            return value.strip().strip("'\"")
    return None


def _hooks(config: Config, cc: ControllerConfig) -> list[Problem]:
    out = []
    client = str(config.hookd.client)
    for key in HOOK_KEYS:
        value = cc.values.get(key, "")
        if value in ("", "(null)"):
            out.append(
                Problem(
                    f"{key} is not set: slurmctld holds and settles no tokens",
                    f"set {key}={client} in slurm.conf (deploy/slurm.conf.snippet), then restart slurmctld"
                    " (the first time it is set, scontrol reconfigure is not enough)",
                )
            )
            continue
        path = Path(value)
        try:
            st = path.stat()
        except OSError as e:
            out.append(
                Problem(f"{key} {value}: {e.strerror}", f"install it (deploy/install --site), or set {key}={client}")
            )
            continue
        if st.st_mode & 0o022:
            out.append(
                Problem(
                    f"{key} {value} is writable by others: whoever can write it runs code in slurmctld",
                    f"chmod go-w {value}",
                )
            )
        if value != client and "slurm-yolo" not in value:
            text = path.read_bytes()[:65536] if st.st_size <= 65536 else b""
            if b"slurm-yolo" not in text:
                out.append(
                    Problem(
                        f"{key} is {value}, which does not run slurm-yolo's hook",
                        f"set {key}={client}, or have the site's script exec it",
                    )
                )
        theirs = _script_config(path)
        if theirs is not None and config.path is not None and Path(theirs) != config.path:
            out.append(
                Problem(
                    f"{key} runs with SLURM_YOLO_CONFIG={theirs}, this doctor with {config.path}",
                    f"run the doctor as the hooks do: SLURM_YOLO_CONFIG={theirs} slurm-yolo doctor",
                )
            )
    return out


def _client(config: Config) -> list[Problem]:
    """The hook client every hook runs (slurm.conf's hooks, or a site's script that execs it)."""
    client = Path(str(config.hookd.client))
    try:
        st = client.stat()
    except OSError as e:
        return [
            Problem(
                f"hookd.client {client}: {e.strerror}: the hooks cannot run",
                "make -C spank install (deploy/install --site controller)",
            )
        ]
    if st.st_mode & 0o022:
        return [
            Problem(
                f"hookd.client {client} is writable by others: whoever can write it runs code in slurmctld",
                f"chmod go-w {client}",
            )
        ]
    if not os.access(client, os.X_OK):
        return [Problem(f"hookd.client {client} is not executable", f"chmod 755 {client}")]
    return []


def _admission(config: Config, cc: ControllerConfig) -> list[Problem]:
    plugins = {p.strip() for p in cc.values.get("JobSubmitPlugins", "").split(",")}
    if "lua" not in plugins and "job_submit/lua" not in plugins:
        return [
            Problem(
                "JobSubmitPlugins has no lua: GPU jobs are admitted without a budget check (the prolog"
                " still holds them, and cancels what an account cannot cover)",
                "set JobSubmitPlugins=lua and write slurm-yolo ledger admission-script to job_submit.lua beside slurm.conf",
            )
        ]
    target = Path(cc.values.get("SLURM_CONF", "/etc/slurm/slurm.conf")).parent / "job_submit.lua"
    try:
        text = target.read_text(errors="replace")
    except OSError as e:
        return [Problem(f"{target}: {e.strerror}", f"slurm-yolo ledger admission-script > {target}")]
    try:
        wanted = availability.script(config, cc.values.get("ClusterName", ""))
    except SlurmYoloError as e:
        return [Problem(f"the admission script cannot be made here ({e})", "fix the config, then regenerate it")]
    cluster = cc.values.get("ClusterName", "")
    theirs = re.search(r'^local CLUSTER = "([^"\n]*)"$', text, re.M)
    if text != wanted and theirs and theirs.group(1) != cluster:  # this host's file is not that slurmctld's
        return [
            Problem(
                f"{target} is cluster {theirs.group(1)}'s admission script, not {cluster}'s: this host does"
                f" not see {cluster}'s slurmctld files (another controller's, or a chroot's)",
                f"run slurm-yolo doctor on {cluster}'s controller; leave {target} as it is",
            )
        ]
    if text != wanted:
        return [
            Problem(
                f"{target} is not the admission script of this config and release",
                f"slurm-yolo ledger admission-script --cluster {cc.values.get('ClusterName', 'NAME')} > {target}"
                " (a site's own script: merge it into that)",
            )
        ]
    return []


def _qos(config: Config) -> list[Problem]:
    """The tiers the config names must be QOS Slurm knows: yolo-sbatch submits with them, and sbatch
    refuses a QOS slurmdbd does not have."""
    try:
        known = set(commands.qos_names(config.bin_dir))
    except SlurmError as e:
        return [Problem(f"sacctmgr cannot list the QOS ({e})", "check that slurmdbd runs and this host may ask it")]
    out = []
    for tier, name in asdict(config.qos).items():
        if isinstance(name, str) and name not in known:
            out.append(
                Problem(
                    f"[qos] {tier} = {name!r}, a QOS Slurm does not have: every {tier} submission fails",
                    f"sacctmgr -i add qos {name} (docs/site-install.md), and give it to the accounts",
                )
            )
    return out


def _funded(config: Config) -> list[str]:
    """The ledger's accounts with a budget (tokens credited, or a quota that refills), but the exempt.
    Books that cannot be read (none yet, a copy that is no ledger) fund none: their own lines say so."""
    with contextlib.suppress(SlurmYoloError, sqlite3.DatabaseError):
        lg = ledger.reader(config)
        if lg is not None:
            with lg:
                rows = lg.accounts()
            exempt = set(config.ledger.exempt_accounts)
            return [
                str(a["name"]) for a in rows if (a["credited"] > 0 or a["rate_per_day"] > 0) and a["name"] not in exempt
            ]
    return []


def _qos_grants(config: Config, cluster: str) -> list[Problem]:
    """Each account with a budget may use every QOS tier the plans submit with (its associations'
    QOS, which its users inherit): sbatch refuses a tier an association lacks ("Invalid qos
    specification"), so a funded account without them cannot run those jobs. A tier Slurm lacks
    altogether is ``_qos``'s line; an account with no association on this cluster is another
    cluster's of a shared ledger."""
    accounts = _funded(config)
    if not accounts or not cluster:
        return []
    try:
        known = set(commands.qos_names(config.bin_dir))
        assocs = commands.association_qos(cluster, config.bin_dir)
    except SlurmYoloError as e:
        return [Problem(f"sacctmgr cannot list the associations' QOS ({e})", "check that slurmdbd runs")]
    tiers = sorted({name for name in asdict(config.qos).values() if isinstance(name, str) and name in known})
    out = []
    for account in accounts:
        mine = {user: qos for (acct, user), qos in assocs.items() if acct.lower() == account.lower()}
        lacking = sorted({t for qos in mine.values() for t in tiers if t not in qos})
        if not lacking:
            continue
        who = sorted(u for u, qos in mine.items() if u and set(lacking) - qos)
        out.append(
            Problem(
                f"account {account} has a budget but may not use QOS {', '.join(lacking)} on {cluster}"
                f" ({'its users ' + ', '.join(who) if who else 'its association'}): yolo-sbatch plans jobs in"
                " those tiers, and Slurm refuses them (Invalid qos specification)",
                f"sacctmgr -i modify account {account} where cluster={cluster} set QOS+={','.join(lacking)}",
            )
        )
    return out


def _published(config: Config, notes: list[str]) -> list[Problem]:
    """What the controller publishes for login nodes and job_submit.lua, and cron's trace: the hourly
    audit (the loop that also settles lost epilogs, retries comments and refills quotas). A loop that
    has not run is a note, not a problem: a fresh install has not reached its first hour, and the
    bundled test clusters run it by hand."""
    out = []
    why = db.public_problem(config.public_dir)
    if why:
        out.append(
            Problem(
                f"{why}: login nodes plan with the prior k and the default price",
                "slurm-yolo ledger publish (deploy/crontab repeats it every 15 minutes)",
            )
        )
    elif not availability.path(config).is_file():
        out.append(
            Problem(
                f"{availability.path(config)} is missing: slurmctld's admission refuses every GPU job",
                "slurm-yolo ledger publish",
            )
        )
    last = books.last(config)
    if last is None or time.time() - last.at > AUDIT_LATE_SECONDS:
        when = "has never run" if last is None else f"last ran {(time.time() - last.at) / 3600:.0f} h ago"
        notes.append(
            f"ledger audit {when} ({books.audit_path(config)}): unless cron runs deploy/crontab here (as on"
            " a site's controllers), lost epilogs wait for a hand-run ledger reconcile"
        )
    return out


def _owner_uid(config: Config) -> int | None:
    try:
        return pwd.getpwnam(config.paths.owner).pw_uid
    except KeyError:
        return None


def _books(config: Config, cc: ControllerConfig) -> list[Problem]:
    out = []
    owner = config.paths.owner
    slurm_user = cc.values.get("SlurmUser", "").split("(")[0]
    if slurm_user and slurm_user != owner:
        out.append(
            Problem(
                f"paths.owner is {owner}, but slurmctld runs its hooks as {slurm_user}",
                f'set owner = "{slurm_user}" under [paths]',
            )
        )
    uid = _owner_uid(config)
    if uid is None:
        return [*out, Problem(f"paths.owner {owner} is no user on this host", "set [paths] owner to the SlurmUser")]
    who = slurm_user or owner  # whose the books must be: the hooks run as the SlurmUser
    state = config.state_dir
    try:
        st = state.stat()
        if st.st_mode & 0o002:
            out.append(Problem(f"{state} is writable by everyone", f"chmod o-w {state}"))
        if st.st_uid != uid:
            out.append(
                Problem(
                    f"{state} is owner uid {st.st_uid}, not {owner}'s: the hooks cannot make the books there",
                    f"chown {who}: {state}",
                )
            )
    except OSError as e:
        return [
            *out,
            Problem(f"{state}: {e.strerror}", f"install -d -o {who} -m 755 {state} (deploy/install --site)"),
        ]
    public = config.public_dir
    with contextlib.suppress(FileNotFoundError):  # made by the first publish
        if public != state and public.stat().st_mode & 0o002:
            out.append(Problem(f"{public} (the published copies) is writable by everyone", f"chmod o-w {public}"))
    private = db.private_dir(state)
    try:
        pst = private.stat()
        if pst.st_uid != uid or stat.S_IMODE(pst.st_mode) != 0o700:
            out.append(
                Problem(
                    f"{private} is mode {stat.S_IMODE(pst.st_mode):o}, owner uid {pst.st_uid}: users could open"
                    " (and lock) the books",
                    f"chown {owner}: {private} && chmod 700 {private}",
                )
            )
        for entry in private.iterdir():
            try:
                est = entry.lstat()
            except FileNotFoundError:
                continue  # a writer's passing file, gone meanwhile
            if stat.S_ISREG(est.st_mode) and est.st_mode & 0o077:
                out.append(Problem(f"{entry} is mode {stat.S_IMODE(est.st_mode):o}", f"chmod 600 {entry}"))
    except FileNotFoundError:
        pass  # made by the first writer, as the SlurmUser
    except OSError as e:
        out.append(Problem(f"{private}: {e.strerror}", "run the doctor as root or as the SlurmUser"))
    if ledger.on_mariadb(config):
        opts = ledger.options_path(config)
        try:
            ost = opts.stat()
            if ost.st_uid != uid or ost.st_mode & 0o077:
                out.append(
                    Problem(
                        f"{opts} (the ledger's credentials) is mode {stat.S_IMODE(ost.st_mode):o}, owner uid"
                        f" {ost.st_uid}",
                        f"chown {who}: {opts} && chmod 600 {opts}",
                    )
                )
        except OSError as e:
            out.append(Problem(f"{opts}: {e.strerror}", "write the option file (docs/money.md: On the site's MariaDB)"))
    own = ledger.db_path(config)
    if not ledger.on_mariadb(config) and not own.is_file():  # the published copy is no ledger
        out.append(
            Problem(
                f"no ledger yet at {own}",
                "slurm-yolo ledger deposit ACCOUNT AMOUNT makes it (the hooks would, at the first GPU job)",
            )
        )
        return out
    try:
        lg = ledger.reader(config)
        if lg is None:
            out.append(
                Problem(
                    f"no ledger yet at {ledger.where(config)}",
                    "slurm-yolo ledger deposit ACCOUNT AMOUNT makes it (the hooks would, at the first GPU job)",
                )
            )
        else:
            with lg:
                lg.accounts()
    except SlurmYoloError as e:
        out.append(
            Problem(
                f"the ledger cannot be read: {str(e).splitlines()[0]}",
                "fix what the line names, then run the doctor again",
            )
        )
    return out


def _hookd(config: Config) -> list[Problem]:
    from slurm_yolo.controller.hookd import answers, served_config

    path = Path(config.hookd.socket)
    if not answers(path):
        return [
            Problem(
                f"hookd does not answer at {path}: every hook starts Python instead (slower, and an epilog"
                " waits for sacct)",
                "systemctl enable --now slurm-yolo-hookd (deploy/slurm-yolo-hookd.service)",
            )
        ]
    served = served_config(path)
    if served is None or config.path is None:
        return []
    mtime, theirs = served
    if theirs != str(config.path):
        return [
            Problem(
                f"the hookd at {path} serves {theirs or 'no config'}, this doctor reads {config.path}",
                "run the doctor with the config the hooks use, or start hookd with this one"
                " (SLURM_YOLO_CONFIG in its unit), then systemctl restart slurm-yolo-hookd",
            )
        ]
    with contextlib.suppress(OSError):
        if config.path.stat().st_mtime != mtime:
            return [
                Problem(
                    f"hookd read {config.path} before its last change: it holds, settles and admits by the old one",
                    "systemctl restart slurm-yolo-hookd",
                )
            ]
    return []


def _login(config: Config, notes: list[str]) -> list[Problem]:
    out = []
    public = config.public_dir
    why = db.public_problem(public) if config.path is not None else ""  # without the site's config: its own line
    if why:
        out.append(
            Problem(
                f"{why}: yolo-sbatch plans here with the prior k and the default price",
                f"mount the controller's {public} here read-only (or rsync it from cron): docs/site-install.md",
            )
        )
    if config.slurm.spank_tokens:
        try:
            helps = "--yolo-tokens" in commands.sbatch_help(config.bin_dir)
        except SlurmYoloError:
            helps = True  # Slurm's own trouble: the checks before say so
        if not helps:
            out.append(
                Problem(
                    "slurm.spank_tokens is on, but this host's sbatch has no --yolo-tokens: every submission fails",
                    "make -C spank install, and deploy/plugstack.conf in /etc/slurm/plugstack.conf.d/",
                )
            )
    try:
        lg = ledger.reader(config)
    except SlurmYoloError:
        lg = None
    if lg is None:
        notes.append(
            f"the balances ({ledger.where(config)}) cannot be read here: yolo-sbatch leaves the budget"
            " check to slurmctld's admission, which refuses at submit"
        )
    else:
        lg.close()
    return out


def _plugstack_paths(conf: Path, depth: int = 0) -> list[Path]:
    """The SPANK plugins a plugstack file loads, its ``include`` globs followed (a few deep)."""
    try:
        lines = conf.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        words = line.split("#")[0].split()
        if len(words) >= 2 and words[0] in ("optional", "required"):
            out.append(Path(words[1]))
        elif len(words) >= 2 and words[0] == "include" and depth < 4:
            pattern = words[1] if words[1].startswith("/") else str(conf.parent / words[1])
            for path in sorted(Path("/").glob(pattern.lstrip("/"))):
                out += _plugstack_paths(path, depth + 1)
    return out


def _plugstack(config: Config, cc: ControllerConfig | None) -> list[Problem]:
    """slurmstepd on this node loads the SPANK plugin that carries --yolo-tokens, when the config says
    sbatch passes it (slurm.spank_tokens)."""
    if not config.slurm.spank_tokens or cc is None:
        return []
    value = cc.values.get("PlugStackConfig", "(null)")
    conf = Path(cc.values.get("SLURM_CONF", "/etc/slurm/slurm.conf")).parent / "plugstack.conf"
    if value not in ("", "(null)"):
        conf = Path(value)
    if not any(p.name == SPANK_PLUGIN and p.is_file() for p in _plugstack_paths(conf)):
        return [
            Problem(
                f"{conf} loads no {SPANK_PLUGIN}, while slurm.spank_tokens is on: jobs carry --yolo-tokens,"
                " an option slurmstepd here does not know",
                "make -C spank install, and deploy/plugstack.conf in"
                f" {conf.parent}/plugstack.conf.d/ (included from {conf.name})",
            )
        ]
    return []


def _compute(config: Config) -> list[Problem]:
    python = str(config.job.python)
    try:
        res = subprocess.run(
            [python, "-c", "import ultralytics, torch"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "YOLO_OFFLINE": "1"},
            check=False,
        )
        ok, why = res.returncode == 0, (res.stderr.strip().splitlines() or [""])[-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        ok, why = False, str(e)
    if not ok:
        return [
            Problem(
                f"{python} cannot import ultralytics and torch ({why[:160]}): jobs cannot train here",
                "pip install 'slurm-yolo[train]' into it, at the same path on every compute node",
            )
        ]
    return []
