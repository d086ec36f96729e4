"""``python -m bench site SCENARIO [--json] [--arms A,B] [--png PATH] [--seed N] [--keep]``: a workload of YOLO
training jobs replayed on Slurm's own scheduler, once per arm, each arm on a replay cluster of its
own (``deploy/replaycluster``: a real slurmctld and slurmd, the scenario's nodes), all arms at once.

Arms (docs/benchmarks.md, "The site replay"):
- ``habits``: what users do without the product: a plain sbatch, whole GPUs, the partition they name,
  the scenario's CPUs, ``--time`` the partition's maximum; the job sleeps its true time (no checkpoint);
- ``slurm-yolo``: every job through ``yolo-sbatch`` as a user calls it (``-p auto``: its plans, limits,
  shards, partition choice, CPUs, memory, QOS) on a calibrated site: each partition's model fitted by
  the product's own fit on a history of runs drawn from the same mix (true times, never the replay's);
  the job runs the real launcher with a stand-in trainer (``site_standin``) that sleeps its true time
  and writes ultralytics' progress, so USR2 checkpoints and requeues run as in production;
- ``slurm-yolo-day-one``: the same on the GPU-type priors alone (nothing calibrated: limits doubled);
- ``oracle``: submitted as the slurm-yolo arm's jobs are (the same sizing and ``-p auto`` choice, at the
  same moment), then its limit made its true run time by root before its release: what no predictor beats.

Time: the scenario's ``scale`` simulated seconds pass per real second (jobs sleep true / scale); Slurm
limits are whole real minutes, so a limit is rounded up to ``scale`` simulated minutes, and a limit
under 3 real minutes gets no USR2 (Slurm checks signal times about once a minute). Every figure is
in simulated time. A product arm's cluster runs the slurm-yolo hooks on books of its own (holds,
settlements, feedback into its time models, admission): its tokens are what its ledger charged, at
each partition's price per simulated GPU-second (``tokens_by_rule``: the same rule on sacct's records,
``ledger_check`` and ``ledger_audit``: the books' proof and sacct against them); the habits arm's
are the rule's on sacct's records.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import site_metrics, site_standin, site_workload
from bench.site_workload import Job, Scenario
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.limits import SIGNAL_EARLY

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("SLURM_YOLO_VENV", "/opt/slurm-yolo/venv"))
WORK = Path("/tmp/slurm-yolo-replay")  # job folders, datasets, the stand-in's copy: every user reads them
STATE = Path("/var/lib/slurm-yolo-cluster")
ARMS = ("habits", "slurm-yolo", "slurm-yolo-day-one", "oracle")
# Policy variants of the calibrated slurm-yolo arm (``--arms``; docs/benchmarks.md has their table):
# [estimate] settings of the arm's config; "time_min": the plan's limit L becomes the job's
# --time-min and its --time is TIME_MIN_STRETCH x L (Slurm's backfill may start it with any limit
# between: a plan that schedules by the prediction and kills late), set by root before its release;
# "shards_per_gpu": its partitions' and its nodes' shards per card; "prefer": yolo-sbatch --prefer;
# "signal_seconds": its [job] USR2 lead (0: none); "slurm_conf": its replay cluster's slurm.conf lines
VARIANTS: dict[str, dict[str, Any]] = {
    "slurm-yolo-tight": {"estimate": {"buffer": 0.05, "coverage": 0.8}},
    "slurm-yolo-loose": {"estimate": {"buffer": 0.5, "coverage": 0.999}},
    "slurm-yolo-time-min": {"time_min": True},
    # shards: none (every job a whole GPU), or two to a card instead of four
    "slurm-yolo-no-shards": {"shards_per_gpu": 0},
    "slurm-yolo-2-shards": {"shards_per_gpu": 2},
    # -p auto's choice: the fastest card whatever the queue, or the cheapest, against the earliest finish
    "slurm-yolo-fastest": {"prefer": "fastest"},
    "slurm-yolo-cheapest": {"prefer": "cheapest"},
    # the limit at the prediction (no buffer, half the runs covered), no USR2, and Slurm's OverTimeLimit
    # (one real minute: scale simulated ones) past it: backfill plans with the prediction, a run is
    # killed late (Tsafrir, Etsion and Feitelson's question, as close as Slurm comes to it)
    "slurm-yolo-overtime": {
        "estimate": {"buffer": 0.0, "coverage": 0.5},
        "signal_seconds": 0,
        "slurm_conf": ["OverTimeLimit=1"],
    },
}
SHARDS_PER_GPU = 4  # the product arms' partitions (and their replay clusters' nodes), but a variant's
ALL_ARMS = (*ARMS, *VARIANTS)
TIME_MIN_STRETCH = 3.0
CLUSTER_NAMES = {"habits": "rhabits", "slurm-yolo": "ryolo", "slurm-yolo-day-one": "ryolo1", "oracle": "roracle"}
LEDGER_KEYS = ("tokens_by_rule", "ledger_charged", "ledger_held", "ledger_check", "ledger_audit")
SETTLE_WAIT = 60.0  # seconds the books may take to settle the last runs after squeue is empty
FUNDS = "1000T"  # each account of a product arm: past any hold a replay makes
STARTUP_MARGIN = 5.0  # real seconds the oracle's limit allows past the true time: the launcher's own start
METRIC_KEYS = (
    "mean_wait_s",
    "p95_wait_s",
    "mean_jct_s",
    "mean_bounded_slowdown",
    "makespan_s",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "utilisation",
    "killed",
    "requeued",
    "gpu_hours_lost",
    "tokens_charged",
    "jobs",
)


class Cluster:
    """One arm's replay cluster (``deploy/replaycluster``, its own state folder and ports)."""

    def __init__(self, arm: str, index: int, sc: Scenario) -> None:
        self.arm, self.name = arm, CLUSTER_NAMES.get(arm, f"r{index}")
        self.state = STATE / f"replay-{self.name}"
        self.env = {
            **os.environ,
            "REPLAYCLUSTER_STATE": str(self.state),
            "REPLAYCLUSTER_PORT": str(6901 + 2 * index),
            "REPLAYCLUSTER_NODE_PORT": str(17201 + 20 * index),
        }
        partitions = [
            {
                **{k: p[k] for k in ("name", "gpu_type", "nodes", "gpus_per_node", "cpus_per_node", "memory_mb")},
                "max_time": int(p.get("max_time_minutes", 2880)),
                "shards_per_gpu": shards_per_gpu(arm),
            }
            for p in sc.cluster["partitions"]
        ]
        accounts: dict[str, list[str]] = {u: [v["account"]] for u, v in sc.users.items()}
        self.spec = {
            "name": self.name,
            "partitions": partitions,
            "users": accounts,
            "slurm_conf": [*sc.cluster.get("slurm_conf", []), *VARIANTS.get(arm, {}).get("slurm_conf", [])],
        }
        self.bin_dir = self.state / "bin"

    def up(self) -> None:
        spec = WORK / f"{self.name}.json"
        spec.write_text(json.dumps(self.spec))
        subprocess.run([str(ROOT / "deploy" / "replaycluster"), "up", str(spec)], env=self.env, check=True)

    def down(self) -> None:
        subprocess.run([str(ROOT / "deploy" / "replaycluster"), "down"], env=self.env, check=False)

    def slurm(self, *argv: str, user: str = "", extra: dict[str, str] | None = None) -> str:
        env = {**self.env, **(extra or {}), "SLURM_TIME_FORMAT": "%s"}
        if user:
            env["MINICLUSTER_USER"] = user
        res = subprocess.run([str(self.bin_dir / argv[0]), *argv[1:]], env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)}: {res.stderr.strip()[-300:]}")
        return res.stdout

    def idle(self) -> bool:
        return not self.slurm("squeue", "-h", "-o", "%i").strip()


def shards_per_gpu(arm: str) -> int:
    """Shards per card on a product arm's partitions (the habits arm asks whole GPUs: any will do)."""
    return int(VARIANTS.get(arm, {}).get("shards_per_gpu", SHARDS_PER_GPU))


def _minutes(text: str) -> int:
    """Slurm's [D-]HH:MM:SS (or MM:SS, or MM) as whole minutes, rounded up."""
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    seconds = {1: lambda p: p[0] * 60, 2: lambda p: p[0] * 60 + p[1], 3: lambda p: p[0] * 3600 + p[1] * 60 + p[2]}[
        len(parts)
    ](parts)
    return math.ceil((int(days or 0) * 86400 + seconds) / 60)


def ensure_users(sc: Scenario) -> None:
    """The scenario's users as unix users (the replay submits as each of them)."""
    for user in sc.users:
        if subprocess.run(["id", "-u", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)


def datasets(jobs: list[Job]) -> dict[tuple[int, int], Path]:
    """A data yaml per dataset size: image lists of that many names (the stand-in reads no image)."""
    out = {}
    for train, val in sorted({j.dataset for j in jobs}):
        folder = WORK / "data" / f"ds-{train}-{val}"
        yaml = folder / "data.yaml"
        if not yaml.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "train.txt").write_text("".join(f"./images/train/{i:08d}.jpg\n" for i in range(train)))
            (folder / "val.txt").write_text("".join(f"./images/val/{i:08d}.jpg\n" for i in range(val)))
            yaml.write_text(f"path: {folder}\ntrain: train.txt\nval: val.txt\nnames:\n  0: object\n")
        out[(train, val)] = yaml
    return out


def standin_path() -> Path:
    """The stand-in, where every user's job can import it (``PYTHONPATH``)."""
    target = WORK / "py" / "bench"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bench" / "__init__.py", target / "__init__.py")
    shutil.copy(ROOT / "bench" / "site_standin.py", target / "site_standin.py")
    return WORK / "py"


def arm_config(arm: str, cluster: Cluster, sc: Scenario) -> Path:
    """The slurm-yolo config of a product arm: the replay's partitions (real cards, nodes from Slurm),
    its own state, and the partitions' models in simulated time over ``scale`` (the plans' seconds are
    the replay's real ones)."""
    from slurm_yolo.core import config as config_mod
    from slurm_yolo.state import calibration

    home = WORK / arm / "state"
    shutil.rmtree(WORK / arm / "state", ignore_errors=True)
    home.mkdir(parents=True)
    shutil.chown(home, "slurm", "slurm")
    parts = "".join(
        f'\n[partitions.{p["name"]}]\ngpu_type = "{p["gpu_type"]}"\ngpus_per_node = {p["gpus_per_node"]}\n'
        f"shards_per_gpu = {shards_per_gpu(arm)}\ncost_per_gpu_hour = {sc.prices.get(p['name'], 0) / 1000:g}\n"
        for p in sc.cluster["partitions"]
    )
    estimate = {"buffer": 0.20, **VARIANTS.get(arm, {}).get("estimate", {})}
    path = WORK / arm / "config.toml"
    path.write_text(
        f'[job]\npython = "{VENV / "bin" / "python"}"\ncpus_per_gpu = 1\n'
        f"signal_seconds = {VARIANTS.get(arm, {}).get('signal_seconds', 60)}\n"
        f'[slurm]\nbin_dir = "{cluster.bin_dir}"\n[paths]\nstate_dir = "{home}"\nowner = "slurm"\n'
        "[estimate]\n" + "".join(f"{k} = {v}\n" for k, v in estimate.items()) + '[qos]\nshort = "yolo-short"\n'
        'short_max_minutes = 60\nprod = "yolo-prod"\ndev = "yolo-dev"\nexplore = "yolo-explore"\n' + parts
    )
    path.chmod(0o644)
    config = config_mod.load(path)
    with calibration.Store(config) as store:
        for p in sc.cluster["partitions"]:
            prior = scaled(calibration.prior(config, p["name"]), sc.scale)
            model = prior if arm == "slurm-yolo-day-one" else fitted(prior, p, sc, config)
            store.save(p["name"], model, f"replay {arm}")
        store.publish()
    return path


SECONDS_TERMS = (
    "k",
    "overhead_seconds",
    "iteration_seconds",
    "startup_seconds",
    "epoch_seconds",
    "val_pass_seconds",
    "loader_seconds",
    "image_seconds",
    "val_image_seconds",
)


def scaled(tm: Any, scale: float) -> Any:
    """A time model whose every seconds term runs ``scale`` times faster."""
    return replace(tm, **{k: getattr(tm, k) / scale for k in SECONDS_TERMS})


def fitted(prior: Any, part: dict[str, Any], sc: Scenario, config: Any) -> Any:
    """The partition's model fitted by the product's own fit on the scenario's history: each history
    job run once on this card at the plan's CPUs, its true (scaled) time as its sample."""
    from slurm_yolo.core import sizing
    from slurm_yolo.core.config import Partition
    from slurm_yolo.core.model import fitting
    from slurm_yolo.core.model.estimate import Workload
    from slurm_yolo.core.model.timemodel import Sample

    shape = Partition(
        part["name"],
        gpu_type=part["gpu_type"],
        gpus_per_node=part["gpus_per_node"],
        node_cpus_per_gpu=part["cpus_per_node"] // part["gpus_per_node"],
    )
    ref = config.estimate.reference_gflops
    samples = []
    for j in sc.history:
        w = Workload(**j.workload())
        _, cores, _ = sizing.cpus(w, prior, shape, 1, 0, config.job.cpus_per_gpu, ref)
        total = j.true_seconds(part["gpu_type"], 1, cores) / sc.scale
        samples.append(Sample(w, 1, total * (1 - site_standin.STARTUP_SHARE), j.name, total, cores))
    return fitting.fit(samples, prior, shape.ddp_efficiency, ref, config.estimate.coverage)


class Replay:
    """One arm's submissions and what they were."""

    def __init__(self, arm: str, cluster: Cluster, sc: Scenario, yamls: dict[tuple[int, int], Path], py: Path) -> None:
        self.arm, self.cluster, self.sc, self.yamls, self.py = arm, cluster, sc, yamls, py
        self.dir = WORK / arm
        self.clock = self.dir / "clock"
        self.config = arm_config(arm, cluster, sc) if arm != "habits" else None
        self.submitted: dict[str, float] = {}
        self.errors: list[str] = []

    def install_hooks(self) -> None:
        """A product arm's cluster runs the slurm-yolo hooks against the arm's own books, as a site's
        does: PrologSlurmctld and EpilogSlurmctld through wrappers naming the arm's config (as
        deploy/minicluster's), and the admission job_submit.lua of ``ledger admission-script``. The
        hook client's hookd is left out: each hook is the Python one, which does the whole work."""
        if self.config is None:
            return
        etc = self.cluster.state / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        lines = []
        for event in ("prolog", "epilog"):
            wrapper = self.dir / event
            wrapper.write_text(
                f"#!/bin/sh\n# {event.capitalize()}Slurmctld of the replay arm {self.arm}: its own slurm-yolo config\n"
                f"unset SLURM_YOLO_HOME\nSLURM_YOLO_CONFIG={self.config}\nexport SLURM_YOLO_CONFIG\n"
                f'exec {VENV / "bin" / f"slurm-yolo-{event}"} "$@"\n'
            )
            wrapper.chmod(0o755)
            lines.append(f"{event.capitalize()}Slurmctld={wrapper}")
        lua = self.yolo("ledger", "admission-script", "--cluster", self.cluster.name)
        (etc / "job_submit.lua").write_text(lua)
        (etc / "job_submit.lua").chmod(0o644)
        self.cluster.spec["slurm_conf"] = [*self.cluster.spec["slurm_conf"], *lines, "JobSubmitPlugins=lua"]

    def fund(self) -> None:
        """The arm's books: each account funded past any hold the replay could make (it measures the
        schedule, not budgets), and each partition's price per real GPU-second: the scenario's per
        simulated one times the scale, so a run pays what its simulated time costs."""
        if self.config is None:
            return
        for account in sorted({u["account"] for u in self.sc.users.values()}):
            self.yolo("ledger", "deposit", account, FUNDS)
        for part, price in self.sc.prices.items():
            self.yolo("ledger", "price", "set", part, f"{price * self.sc.scale:.0f}", "--reason", "site replay")
        self.yolo("ledger", "publish")

    def yolo_run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A slurm-yolo admin command on the arm's config (and nothing of this process's), as root."""
        assert self.config is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_YOLO_")}
        env["SLURM_YOLO_CONFIG"] = str(self.config)
        return subprocess.run([str(VENV / "bin" / "slurm-yolo"), *argv], env=env, capture_output=True, text=True)

    def yolo(self, *argv: str) -> str:
        """``yolo_run``'s output; its error raised."""
        res = self.yolo_run(*argv)
        if res.returncode != 0:
            raise RuntimeError(f"{self.arm}: slurm-yolo {' '.join(argv)}: {(res.stderr or res.stdout).strip()[-300:]}")
        return res.stdout

    def ledger_figures(self) -> dict[str, Any]:
        """What the arm's books say once every run ended: tokens charged and still held over its
        accounts, the books' proof (``ledger check``) and sacct against the ledger (``ledger audit``:
        every run held and settled once, at what its record costs)."""
        if self.config is None:
            return {}
        deadline = time.time() + SETTLE_WAIT
        while True:  # the last epilogs may still be settling when squeue is empty
            balances = json.loads(self.yolo("ledger", "balance", "--json"))
            rows = balances if isinstance(balances, list) else balances.get("accounts", [balances])
            charged = sum(int(r.get("charged", 0)) for r in rows)
            held = sum(int(r.get("held", 0)) for r in rows)
            if held == 0 or time.time() > deadline:
                break
            # what an epilog left in the inbox (its sacct record not final yet) is settled by the settler:
            # hookd's at a site, or cron's reconcile, which is what runs here (no hookd on a replay cluster)
            self.yolo_run("ledger", "reconcile", "--window-days", "1", "--min-age", "0")
            time.sleep(2)
        check = self.yolo_run("ledger", "check")
        audit = self.yolo_run("ledger", "audit", "--since", "now-1days", "--min-age", "0", "--json")
        return {
            "tokens_by_rule": None,  # set by replay(): sacct's records at the partitions' prices
            "ledger_charged": charged,
            "ledger_held": held,
            "ledger_check": check.returncode == 0 or (check.stdout + check.stderr).strip(),
            "ledger_audit": audit.stdout.strip() if audit.returncode != 0 else "",
        }

    def prepare(self) -> None:
        shutil.rmtree(self.clock, ignore_errors=True)
        self.clock.mkdir(parents=True)
        self.clock.chmod(0o1777)
        for user in self.sc.users:
            folder = self.dir / "jobs" / user
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            shutil.chown(folder, user)
        for line in self.cluster.slurm("squeue", "-h", "-o", "%i").split():
            self.cluster.slurm("scancel", line)

    def env(self, job: Job) -> dict[str, str]:
        told = {
            "workload": job.workload(),
            "ratio": job.ratio,
            "scale": self.sc.scale,
            "gpu_types": self.sc.gpu_types,
            "log_dir": str(self.clock),
        }
        return {
            "PYTHONPATH": str(self.py),
            "SLURM_YOLO_STANDIN": json.dumps(told),
            "SLURM_YOLO_TRAINER": "bench.site_standin",
        }

    def words(self, job: Job) -> list[str]:
        yaml = self.yamls[job.dataset]
        return [w if not w.startswith("data=") else f"data={yaml}" for w in job.words]

    def as_user(self, job: Job, argv: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        env = [f"{k}={v}" for k, v in extra.items()]
        path = f"PATH={self.cluster.bin_dir}:{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        return subprocess.run(  # a clean environment: the user's, not this process's (SLURM_YOLO_HOME, ...)
            ["runuser", "-u", job.user, "--", "env", "-i", path, "LANG=C.UTF-8", *env, *argv],
            cwd=self.dir / "jobs" / job.user,
            capture_output=True,
            text=True,
        )

    def submit(self, job: Job) -> None:
        res = self.habits(job) if self.arm == "habits" else self.through_product(job)
        if res.returncode != 0:
            self.errors.append(f"{job.name}: {(res.stderr or res.stdout).strip()[-300:]}")
            return
        self.submitted[job.name] = time.time()

    def habits(self, job: Job) -> subprocess.CompletedProcess[str]:
        part = job.habit_partition
        gtype = self.sc.gpu_types[part]
        limit = next(int(p.get("max_time_minutes", 2880)) for p in self.sc.cluster["partitions"] if p["name"] == part)
        script = (
            "#!/bin/bash\n"
            f"#SBATCH --job-name={job.name}\n#SBATCH --partition={part}\n#SBATCH --gres=gpu:{gtype}:{job.habit_gpus}\n"
            f"#SBATCH --cpus-per-task={int(self.sc.habits.get('cpus_per_task', 4))}\n"
            f"#SBATCH --time={max(1, math.ceil(limit / self.sc.scale))}\n#SBATCH --account={job.account}\n"
            f"#SBATCH --output=%x-%j.out\nexec {VENV / 'bin' / 'python'} -m bench.site_standin --plain\n"
        )
        path = self.dir / "jobs" / job.user / f"{job.name}.sbatch"
        path.write_text(script)
        shutil.chown(path, job.user)
        return self.as_user(
            job, ["sbatch", str(path)], {**self.env(job), "SLURM_CONF": str(self.cluster.state / "etc" / "slurm.conf")}
        )

    def through_product(self, job: Job) -> subprocess.CompletedProcess[str]:
        assert self.config is not None
        extra = {
            **self.env(job),
            "SLURM_YOLO_CONFIG": str(self.config),
            "SLURM_CONF": str(self.cluster.state / "etc" / "slurm.conf"),
        }
        argv = ["yolo-sbatch", "-A", job.account, "-J", job.name]
        if prefer := VARIANTS.get(self.arm, {}).get("prefer"):
            argv += ["--prefer", prefer]
        if self.arm == "oracle":
            return self.oracle(job, [*argv, "--json", "--sbatch-arg=--hold", *self.words(job)], extra)
        if VARIANTS.get(self.arm, {}).get("time_min"):
            return self.time_min(job, [*argv, "--sbatch-arg=--hold", *self.words(job)], extra)
        return self.as_user(job, [*argv, *self.words(job)], extra)

    def oracle(self, job: Job, argv: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """The oracle: submitted as the product arm submits (``-p auto`` at that moment: the same
        sizing and partition choice), held; root makes its limit the job's true time on the plan's
        card, cores and share, with the USR2 lead its script asks for past it (which Slurm may send a
        minute early: at its USR2 the launcher would requeue a run about to finish), then releases it."""
        res = self.as_user(job, argv, extra)
        if res.returncode != 0:
            return res
        plan = json.loads(res.stdout)
        cores = max(1, plan["cpus"] // max(1, plan["gpus"]))
        true = job.true_seconds(self.sc.gpu_types[plan["partition"]], plan["gpus"], cores, plan["shard_share"])
        need = true / self.sc.scale + STARTUP_MARGIN
        lead = re.search(r"--signal=B:USR2@([0-9]+)", plan["script"])
        if lead:
            need += int(lead.group(1)) + SIGNAL_EARLY
        self.release(str(plan["job_id"]), f"TimeLimit={math.ceil(need / 60)}")
        return res

    def time_min(self, job: Job, argv: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """The time-min variant: submitted held, its limit L made --time-min and its --time
        ``TIME_MIN_STRETCH`` x L by root (a user may only lower a limit), then released."""
        res = self.as_user(job, argv, extra)
        if res.returncode != 0:
            return res
        found = re.search(r"Submitted batch job ([0-9]+)", res.stdout)
        if not found:
            raise RuntimeError(f"{self.arm}: {job.name}: no job id in {res.stdout!r}")
        job_id = found.group(1)
        shown = self.cluster.slurm("scontrol", "show", "job", job_id).split()
        minutes = next(_minutes(w.split("=", 1)[1]) for w in shown if w.startswith("TimeLimit="))
        self.release(job_id, f"TimeLimit={math.ceil(minutes * TIME_MIN_STRETCH)}", f"TimeMin={minutes}")
        return res

    def release(self, job_id: str, *fields: str) -> None:
        """A held job's fields set by root, then the job released to the scheduler."""
        self.cluster.slurm("scontrol", "update", f"JobId={job_id}", *fields)
        self.cluster.slurm("scontrol", "release", job_id)

    def run(self, t0: float) -> None:
        """Submit each job at its time (each from a thread of its own: users of a burst submit at
        once, and a yolo-sbatch plans for a second or two), then wait until every one has ended."""

        def at(job: Job) -> None:
            delay = t0 + job.submit / self.sc.scale - time.time()
            if delay > 0:
                time.sleep(delay)
            self.submit(job)

        threads = [threading.Thread(target=at, args=(job,)) for job in self.sc.jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while not self.cluster.idle():
            time.sleep(5)

    def metrics(self, t0: float) -> dict[str, Any]:
        text = self.cluster.slurm(
            "sacct",
            "-M",
            self.cluster.name,
            "-X",
            "-D",
            "-n",
            "-P",
            "-S",
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0 - 5)),
            "-o",
            ",".join(site_metrics.FIELDS),
        )
        runs = site_metrics.parse_runs(text)
        out = site_metrics.arm_metrics(
            runs, self.submitted, site_metrics.clock(self.clock), self.sc.scale, self.sc.capacity, self.sc.prices
        )
        out["errors"] = self.errors
        return out


def table(results: dict[str, dict[str, Any]]) -> str:
    rows: list[tuple[str, str, Callable[[Any], str]]] = [
        ("mean wait", "mean_wait_s", lambda v: f"{v / 60:.0f} min"),
        ("median wait", "median_wait_s", lambda v: f"{v / 60:.0f} min"),
        ("p95 wait", "p95_wait_s", lambda v: f"{v / 60:.0f} min"),
        ("mean JCT", "mean_jct_s", lambda v: f"{v / 3600:.2f} h"),
        ("mean bounded slowdown", "mean_bounded_slowdown", lambda v: f"{v:.2f}"),
        ("makespan", "makespan_s", lambda v: f"{v / 3600:.2f} h"),
        ("GPU-h allocated", "gpu_hours_allocated", lambda v: f"{v:.1f}"),
        ("GPU-h busy", "gpu_hours_busy", lambda v: f"{v:.1f}"),
        ("utilisation (burst)", "utilisation", lambda v: f"{v:.0%}"),
        ("burst", "burst_s", lambda v: f"{v / 3600:.2f} h"),
        ("utilisation (makespan)", "utilisation_makespan", lambda v: f"{v:.0%}"),
        ("killed at limit", "killed", str),
        ("requeued", "requeued", str),
        ("GPU-h lost", "gpu_hours_lost", lambda v: f"{v:.2f}"),
        ("tokens charged", "tokens_charged", lambda v: fmt_tokens(v)),
        ("jobs ended", "jobs", str),
    ]
    arms = list(results)
    width = max(12, *(len(a) for a in arms))
    lines = [f"{'':24}" + "".join(f"{a:>{width + 2}}" for a in arms)]
    for label, key, fmt in rows:
        lines.append(f"{label:24}" + "".join(f"{fmt(results[a][key]):>{width + 2}}" for a in arms))
    return "\n".join(lines)


def png(
    results: dict[str, dict[str, Any]], busy: dict[str, tuple[list[float], list[float]]], capacity: float, path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm, r in results.items():
        waits = [w / 60 for w in r["waits_s"]]
        if waits:
            left.step(sorted(waits), [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=arm)
        xs, ys = busy[arm]
        right.step(xs, ys, where="post", label=arm)
    left.set(xlabel="wait (simulated minutes)", ylabel="share of jobs waiting at most", title="Queue waits")
    right.axhline(capacity, color="grey", linestyle=":")
    right.set(xlabel="simulated hours", ylabel="GPUs training", title="GPUs busy")
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def replay(
    scenario: str, arms: list[str], out_png: Path, keep: bool = False, seed: int | None = None
) -> dict[str, Any]:
    """Replay ``scenario`` once per arm, every arm at once on its own replay cluster; the report
    (``--json``'s object; ``figures``: every arm's, waits included). ``keep``: leave the clusters up;
    ``seed``: draw the scenario's mix with this seed instead of its own."""
    started = time.time()
    sc = site_workload.load(scenario, seed)
    WORK.mkdir(parents=True, exist_ok=True)
    WORK.chmod(0o755)
    ensure_users(sc)
    yamls = datasets(sc.jobs)
    py = standin_path()
    clusters = [Cluster(arm, i, sc) for i, arm in enumerate(arms)]
    replays = [Replay(arm, c, sc, yamls, py) for arm, c in zip(arms, clusters, strict=True)]
    for r in replays:
        r.install_hooks()
        r.cluster.up()
        r.fund()
        r.prepare()
    t0 = time.time() + 5
    threads = [threading.Thread(target=r.run, args=(t0,)) for r in replays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = {}
    for r in replays:
        results[r.arm] = {**r.metrics(t0), **r.ledger_figures()}
        if "ledger_charged" in results[r.arm]:  # a product arm's charge is its books'
            results[r.arm]["tokens_by_rule"] = results[r.arm]["tokens_charged"]
            results[r.arm]["tokens_charged"] = results[r.arm]["ledger_charged"]
    busy = {r.arm: site_metrics.busy_over_time(site_metrics.clock(r.clock), t0, sc.scale) for r in replays}
    if not keep:
        for c in clusters:
            c.down()
    png(results, busy, sc.capacity, out_png)
    return {
        "scenario": sc.name,
        "seed": seed,
        "scale": sc.scale,
        "jobs": len(sc.jobs),
        "gpus": sc.capacity,
        "wall_seconds": round(time.time() - started),
        "t0": t0,
        "clusters": {c.arm: c.name for c in clusters},
        "arms": {
            a: {
                k: r[k]
                for k in (*METRIC_KEYS, "median_wait_s", "burst_s", "utilisation_makespan", "errors", *LEDGER_KEYS)
                if k in r
            }
            for a, r in results.items()
        },
        "figures": results,
        "claims": sc.claims,
        "notes": sc.notes,
        "png": str(out_png),
    }


def main(argv: list[str]) -> None:
    args = list(argv)
    as_json = "--json" in args
    keep = "--keep" in args
    arms = list(ARMS)
    out_png = Path("site-replay.png")
    seed: int | None = None
    usage = (
        "usage: python -m bench site SCENARIO|PATH.json [--json] [--arms"
        f" {','.join(ALL_ARMS)}] [--png PATH] [--seed N] [--keep]"
    )
    for flag in ("--arms", "--png", "--seed"):
        if flag in args:
            i = args.index(flag)
            if i + 1 >= len(args):
                sys.exit(usage)
            value = args[i + 1]
            if flag == "--arms":
                arms = value.split(",")
            elif flag == "--png":
                out_png = Path(value)
            elif not value.isdigit():
                sys.exit(usage)
            else:
                seed = int(value)
            del args[i : i + 2]
    names = [a for a in args if not a.startswith("--")]
    if len(names) != 1 or any(a not in ALL_ARMS for a in arms):
        sys.exit(usage)
    if os.geteuid() != 0:
        sys.exit("bench site: must run as root (it starts replay clusters and submits as the scenario's users)")
    report = replay(names[0], arms, out_png, keep, seed)
    if as_json:
        print(json.dumps({k: v for k, v in report.items() if k != "figures"}, indent=1))
        return
    results, sc_name, wall = report["figures"], report["scenario"], report["wall_seconds"]
    print(
        f"site replay {sc_name}{'' if seed is None else f' (seed {seed})'}: {report['jobs']} jobs on {report['gpus']:g} GPUs, x{report['scale']:g} time,"
        f" {wall / 60:.1f} min here"
    )
    print(table(results))
    for a, figures in results.items():
        for e in figures["errors"]:
            print(f"  {a}: not submitted: {e}")
    for line in [*report["notes"], *report["claims"]]:
        print(f"  {line}")
    print(f"  the PNG: {report['png']}")
