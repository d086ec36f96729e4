"""Admin reports from Slurm's accounting joined with the ledger (pandas is imported here and only here).

Source of truth is ``sacct`` (one row per run: requeued jobs have several; ``commands.sacct_rows``,
whose delimiter no job name, comment or work dir can hold), joined with the ledger's runs on job id +
submit time (a requeued run gets a new submit time, and job ids repeat after a controller purge), and
with the two summaries every yolo job carries: the estimate in its Comment (written at submit) and the
accounting in its AdminComment (written by the epilog).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from slurm_yolo.admin import efficiency as eff
from slurm_yolo.admin.alerts import Prediction
from slurm_yolo.core import durations, limits
from slurm_yolo.core.billing import bucket, policy
from slurm_yolo.core.billing import comment as admin_comment
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmError, UnreachableError
from slurm_yolo.parse.records import job_records
from slurm_yolo.slurm import commands, parsers
from slurm_yolo.state import calibration, ledger

FIELDS = [
    "JobIDRaw",
    "Account",
    "User",
    "Partition",
    "QOS",
    "State",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "AllocTRES",
    "Comment",
    "AdminComment",
    "WorkDir",
]
VIEWS = ("usage", "accuracy", "waits", "failures", "preemptions", "k", "roi", "efficiency", "budgets")
BILLED = ("hold", "charge", "refund", "price")  # what each run was held and billed at


@dataclass(frozen=True)
class Filters:
    """Which jobs a report covers."""

    since: str = "now-7days"
    until: str = "now"
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    qos: str | None = None
    jobs: tuple[int, ...] = ()  # these jobs, whenever they ran (the window is then not asked)


def _select(f: Filters) -> list[str]:
    """sacct's options for the filters' jobs (every user's)."""
    select = ["-a", "-j", ",".join(str(int(j)) for j in f.jobs)] if f.jobs else ["-a", "-S", f.since, "-E", f.until]
    for flag, value in (("-A", f.account), ("-u", f.user), ("-r", f.partition), ("-q", f.qos)):
        if value:
            select += [flag, value]
    return select


def fetch_sacct(config: Config, f: Filters) -> list[list[str]]:
    """Every run (``-D``) of every user's jobs in the window, as rows of ``FIELDS``."""
    return commands.sacct_rows(_select(f), FIELDS, bin_dir=config.bin_dir, timeout=300)


def fetch_step_gpus(config: Config, f: Filters) -> dict[int, parsers.StepGpu]:
    """Slurm's own GPU accounting of the filters' jobs (``commands.sacct_step_gpus``): none where the
    site does not gather it, or slurmdbd does not answer (the usage records still speak)."""
    try:
        return commands.sacct_step_gpus(_select(f), bin_dir=config.bin_dir)
    except (UnreachableError, SlurmError):
        return {}


def fetch_or_unreached(config: Config, f: Filters) -> tuple[list[list[str]], str]:
    """``fetch_sacct``'s rows, or none and why when slurmdbd does not answer: the views the ledger
    alone makes (budgets, k) still show, and the caller says what is missing."""
    try:
        return fetch_sacct(config, f), ""
    except UnreachableError as e:
        return [], str(e)


def read_saved(text: str, delimiter: str = "|") -> list[list[str]]:
    """Saved ``sacct -X -D -n -p -o FIELDS`` output (a delimiter after every field), for benchmarks and
    audits. Saved with sacct's ``--delimiter`` set to a string no field holds, any text survives; with
    ``|``, a record whose text holds one is dropped, and a job name or comment holding ``|`` and
    newlines can pose as whole records of its own (a guessable delimiter: save with your own)."""
    return parsers.delimited(text, len(FIELDS), delimiter)


def _kv(series: pd.Series, key: str) -> pd.Series:
    """A numeric ``key=`` field of ``yolo:k=v,...`` summaries."""
    return pd.to_numeric(series.str.extract(rf"(?:^yolo:|,){key}=([^,;]*)", expand=False), errors="coerce")


def parse_jobs(rows: list[list[str]], shards_per_gpu: dict[str, int] | None = None) -> pd.DataFrame:
    """sacct rows as a typed frame: times, GPUs, GPU-hours, the estimate and the accounting summary."""
    df = pd.DataFrame(rows, columns=FIELDS, dtype=str)
    df["job_id"] = pd.to_numeric(df["JobIDRaw"], errors="coerce")
    df = df[df["job_id"].notna()].copy()
    df["job_id"] = df["job_id"].astype("int64")
    for col in ("Submit", "Start", "End"):
        df[col.lower()] = pd.to_datetime(df[col], errors="coerce", format="%Y-%m-%dT%H:%M:%S")
    df["elapsed"] = pd.to_numeric(df["ElapsedRaw"], errors="coerce").fillna(0)
    df["limit_s"] = pd.to_numeric(df["TimelimitRaw"], errors="coerce") * 60
    df["state"] = df["State"].str.split().str[0]
    gpus = pd.to_numeric(df["AllocTRES"].str.extract(r"gres/gpu=(\d+)", expand=False), errors="coerce")
    shards = pd.to_numeric(df["AllocTRES"].str.extract(r"gres/shard=(\d+)", expand=False), errors="coerce")
    per_gpu = df["Partition"].map(shards_per_gpu or {}).fillna(1).replace(0, 1)
    df["gpus"] = gpus.fillna(shards / per_gpu).fillna(0.0)
    df["gpu_hours"] = df["elapsed"] * df["gpus"] / 3600
    df["wait_s"] = (df["start"] - df["submit"]).dt.total_seconds()
    comment = df["Comment"]
    df["yolo"] = comment.str.startswith("yolo:")
    df["pred_s"] = _kv(comment, "pred_s")
    df["coverage"] = _kv(comment, "cov")
    df["est_tokens"] = _kv(comment, "eff")
    # each run's own entry of the job's AdminComment (a requeued job's lists every run, by submit time)
    epochs = [int(t.timestamp()) if pd.notna(t) else -1 for t in df["submit"]]
    entries = [
        (parsed.get(e) or parsed.get(0) or {})
        for parsed, e in zip(df["AdminComment"].map(admin_comment.parse), epochs, strict=True)
    ]
    for key in BILLED:
        df[key] = pd.to_numeric(
            pd.Series([entry.get(key) for entry in entries], index=df.index, dtype=object), errors="coerce"
        )
    return df.reset_index(drop=True)


def ledger_runs(config: Config) -> pd.DataFrame:
    """The ledger's runs (empty when there is no ledger), with the run's submit time as sacct prints
    it here (the ledger keeps epoch seconds)."""
    lg = ledger.reader(config)
    if lg is None:
        return pd.DataFrame(columns=["job_id", "submit", *BILLED])
    try:
        runs = pd.DataFrame([dict(r) for r in lg.billed_runs()], columns=["job_id", "submit_time", *BILLED, "estimate"])
    finally:
        lg.close()
    runs["submit"] = pd.to_datetime([_local(v) for v in runs.pop("submit_time")])
    return runs


def _local(submit: object) -> datetime:
    """A run's submit time (epoch seconds; text in ledgers older than version 2) in local time."""
    text = str(submit)
    return datetime.fromtimestamp(int(text)) if text.isdigit() else datetime.fromisoformat(text)


def join(jobs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The ledger's amounts where it has the run (by job id and submit time), else the AdminComment's."""
    if runs.empty:
        return jobs
    runs = runs.rename(columns={c: f"ledger_{c}" for c in BILLED})
    merged = jobs.merge(runs, how="left", on=["job_id", "submit"])
    for key in BILLED:
        merged[key] = merged[f"ledger_{key}"].combine_first(merged[key])
    return merged.drop(columns=[c for c in merged.columns if c.startswith("ledger_")])


def _pct(s: pd.Series, q: float) -> float:
    return float(s.quantile(q)) if len(s) else float("nan")


def usage(df: pd.DataFrame) -> pd.DataFrame:
    """Jobs, GPU-hours, their money (the partition's cost_per_gpu_hour) and budget tokens per account,
    user and partition."""
    g = df.groupby(["Account", "User", "Partition"], dropna=False)
    out = g.agg(
        jobs=("job_id", "nunique"),
        runs=("job_id", "size"),
        gpu_hours=("gpu_hours", "sum"),
        money=("money", "sum"),
        tokens_held=("hold", "sum"),
        tokens_charged=("charge", "sum"),
        tokens_refunded=("refund", "sum"),
    )
    return out.reset_index().sort_values("gpu_hours", ascending=False)


def job_totals(df: pd.DataFrame, lead: int = 120) -> pd.DataFrame:
    """One row per yolo job (a requeued job's runs together: the job is what was predicted): its last
    state, its runs' elapsed summed, its prediction, first limit and promised coverage, and whether it
    hit its limit (``missed``): a run that ended in TIMEOUT, or one requeued for time (inside its USR2
    ``lead``, ``limits``)."""
    y = df[df["yolo"] & df["pred_s"].notna()].copy()
    hit = [
        limits.requeued_for_time(int(lim) if lim == lim else None, int(ran), lead)
        for lim, ran in zip(y["limit_s"], y["elapsed"], strict=True)
    ]
    y["missed"] = (y["state"] == "TIMEOUT") | ((y["state"] == "REQUEUED") & pd.Series(hit, index=y.index, dtype=bool))
    by_job = y.sort_values("submit", kind="stable").groupby(["Partition", "job_id"], sort=False)
    return by_job.agg(
        state=("state", "last"),
        elapsed=("elapsed", "sum"),
        pred_s=("pred_s", "first"),
        limit_s=("limit_s", "first"),
        coverage=("coverage", "first"),
        missed=("missed", "any"),
    ).reset_index()


def accuracy(df: pd.DataFrame, lead: int = 120) -> pd.DataFrame:
    """Predicted vs actual run time per partition, job by job (``job_totals``), and the time limits'
    promise against what they kept: ``promised_coverage`` is the median share of runs the limits were
    sized to cover (the model's cross-validated promise at submission, from the job's comment),
    ``realised_coverage`` the share of ended jobs that never hit their limit; ``timeout_share`` counts
    the jobs that did (a TIMEOUT, or a requeue for time)."""
    jobs = job_totals(df, lead)
    rows = []
    for part, g in jobs.groupby("Partition"):
        done = g[(g["state"] == "COMPLETED") & (g["pred_s"] > 0)]
        err = (done["elapsed"] - done["pred_s"]) / done["pred_s"]
        over = done["limit_s"] / done["elapsed"].where(done["elapsed"] > 0)
        ended = g[g["state"].isin(("COMPLETED", "TIMEOUT"))]
        rows.append(
            {
                "Partition": part,
                "jobs": len(g),
                "completed": len(done),
                "median_abs_error": _pct(err.abs(), 0.5),
                "p90_abs_error": _pct(err.abs(), 0.9),
                "median_error": _pct(err, 0.5),
                "timeout_share": float(g["missed"].mean()),
                "over_reservation_median": _pct(over.dropna(), 0.5),
                "promised_coverage": _pct(g["coverage"].dropna(), 0.5),
                "realised_coverage": float((~ended["missed"]).mean()) if len(ended) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def waits(df: pd.DataFrame) -> pd.DataFrame:
    """Queue waits by QOS and partition."""
    started = df[df["wait_s"].notna()]
    g = started.groupby(["Partition", "QOS"])["wait_s"]
    return g.agg(jobs="size", median="median", p90=lambda s: s.quantile(0.9), max="max").reset_index()


FAILURE_JOBS_SHOWN = 10  # job ids a failures row lists before "+N more"


def failures(df: pd.DataFrame) -> pd.DataFrame:
    """Runs by how they ended (the end state is the cause Slurm gives: TIMEOUT, OUT_OF_MEMORY,
    NODE_FAIL, FAILED...), with the jobs that ended so, to look at one by one."""

    def jobs(ids: pd.Series) -> str:
        unique = list(dict.fromkeys(str(i) for i in ids))
        more = len(unique) - FAILURE_JOBS_SHOWN
        return " ".join(unique[:FAILURE_JOBS_SHOWN]) + (f" +{more} more" if more > 0 else "")

    out = df.groupby(["Partition", "state"]).agg(runs=("job_id", "size"), jobs=("job_id", jobs)).reset_index()
    return out.sort_values(["runs", "Partition", "state"], ascending=[False, True, True], kind="stable")


def preempted_in_grace(workdir: str, job_id: int, user: str, records: Records = job_records) -> set[int]:
    """The runs (restart counts) of a job whose launcher handed its GPUs over to a preemption at a
    checkpoint, within the grace time (its ``requeue`` record says ``why``): 22.05 records those runs
    REQUEUED, as any requeue (later releases, PREEMPTED). A report's figure, never a bill: the user
    writes the file."""
    runs = set()
    for r in records(workdir, job_id, user):
        restart = r.get("restart")
        if r.get("kind") == "requeue" and r.get("why") == "preempted" and isinstance(restart, int):
            runs.add(restart)
    return runs


PREEMPTION_COLUMNS = [
    "Partition",
    "QOS",
    "runs",
    "preempted",
    "preempted_share",
    "preempted_gpu_hours",
    "preempted_tokens_charged",
    "resumed_completed",
]


def preemptions(df: pd.DataFrame, records: Records = job_records) -> pd.DataFrame:
    """Preemptions per tier (QOS) and partition: runs that ended PREEMPTED (Slurm's grace ran out) and
    runs the launcher requeued at a checkpoint in the grace (``preempted_in_grace``), the GPU-hours
    and tokens they were charged (each pays the time it ran, ``billing.policy.charge``), and how many
    of the jobs so preempted went on to complete."""
    rows = []
    df = df.sort_values(["job_id", "submit"])
    df = df.assign(restart=df.groupby("job_id").cumcount())
    for (part, qos), g in df.groupby(["Partition", "QOS"], dropna=False):
        hit = g["state"] == "PREEMPTED"
        for i in g.index[(g["state"] == "REQUEUED") & g["yolo"]]:
            run = g.loc[i]
            if int(run["restart"]) in preempted_in_grace(
                str(run["WorkDir"]), int(run["job_id"]), str(run["User"]), records
            ):
                hit[i] = True
        jobs_hit = set(g.loc[hit, "job_id"])
        done = set(df.loc[df["job_id"].isin(jobs_hit) & (df["state"] == "COMPLETED"), "job_id"])
        rows.append(
            [
                part,
                qos,
                len(g),
                int(hit.sum()),
                float(hit.mean()) if len(g) else 0.0,
                float(g.loc[hit, "gpu_hours"].sum()),
                float(g.loc[hit, "charge"].fillna(0).sum()),
                len(done),
            ]
        )
    view = pd.DataFrame(rows, columns=PREEMPTION_COLUMNS)
    return view[view["preempted"] > 0].reset_index(drop=True) if len(view) else view


def k_history(config: Config) -> pd.DataFrame:
    """k per partition over time (the calibration history)."""
    rows = [
        {"partition": h.partition, "at": h.at, "k": h.model.k, "n": h.model.n, "source": h.source}
        for h in calibration.history(config)
    ]
    return pd.DataFrame(rows, columns=["partition", "at", "k", "n", "source"])


def k_of_jobs(k: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``report -j``: the k entries those jobs concern, not their partitions' whole history: the model
    each run was planned with (its partition's last entry at or before the run's submission) and the
    entries its own feedback made (source ``job N``)."""
    if k.empty or runs.empty:
        return k.iloc[0:0]
    at = pd.Series([datetime.fromisoformat(a).astimezone().replace(tzinfo=None) for a in k["at"]], index=k.index)
    keep: set[int] = set()
    for run in runs.itertuples():
        mine = k["partition"] == run.Partition
        if pd.notna(run.submit):
            before = k.index[mine & (at <= run.submit)]
            keep.update(before[-1:])
        keep.update(k.index[mine & (k["source"] == f"job {run.job_id}")])
    return k.loc[sorted(keep)].reset_index(drop=True)


Records = Callable[[str, int, str], list[dict[str, object]]]  # a job's usage records: parse.records.job_records


def final_map(workdir: str, job_id: int, user: str, records: Records = job_records) -> float | None:
    """mAP50-95 of a job's last validation, from its usage records (``parse.records.job_records``)."""
    last = None
    for rec in records(workdir, job_id, user):
        metrics = rec.get("metrics") if rec.get("kind") in ("epoch", "end") else None
        value = metrics.get("metrics/mAP50-95(B)") if isinstance(metrics, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                figure = float(value)
            except OverflowError:  # an integer of 400 digits
                continue
            last = figure if math.isfinite(figure) else last  # text, NaN, a list: no figure
    return last


def roi(df: pd.DataFrame, records: Records = job_records) -> pd.DataFrame:
    """Final mAP50-95 per GTok charged and per unit of money (its GPU-hours at the partition's
    cost_per_gpu_hour), per job, where the job left its results."""
    done = df[df["yolo"] & (df["state"] == "COMPLETED")].copy()
    done["map50_95"] = [
        final_map(w, j, u, records) for w, j, u in zip(done["WorkDir"], done["job_id"], done["User"], strict=True)
    ]
    runs = df[df["yolo"]].groupby("job_id")
    done["gtok_charged"] = done["job_id"].map(runs["charge"].sum()) / 1e9
    done["money"] = done["job_id"].map(runs["money"].sum())
    done = done[done["map50_95"].notna() & (done["gtok_charged"] > 0)]
    done["map_per_gtok"] = done["map50_95"] / done["gtok_charged"]
    done["map_per_money"] = done["map50_95"] / done["money"].where(done["money"] > 0)
    return done[
        ["job_id", "Account", "User", "Partition", "map50_95", "gtok_charged", "map_per_gtok", "money", "map_per_money"]
    ]


EFFICIENCY_COLUMNS = [
    "job_id",
    "Account",
    "User",
    "Partition",
    "gpus",
    "gpu_hours",
    "util_pct",
    "low_util_gpu_hours",
    "mem_gb",
    "mem_total_gb",
    "temp_c",
    "batch",
    "images_per_s",
    "fits_shard",
    "slurm_gpuutil",
    "slurm_gpumem_gb",
]


def efficiency(
    df: pd.DataFrame,
    config: Config,
    records: Records = job_records,
    slurm_gpus: Mapping[int, parsers.StepGpu] | None = None,
) -> pd.DataFrame:
    """Each GPU job's efficiency and health from its usage records (``efficiency.summarize``): its mean
    utilisation, the GPU-hours under ``efficiency.low_util_pct`` (its GPU-hours x the share of its
    sampled epoch time under it), peak memory against the GPU's, the hottest temperature, images/s
    per batch size, and whether it would have fit a shard (a partition's 1/shards_per_gpu, else
    ``light.gpu_share``). Beside them, where the site gathers it, Slurm's own accounting
    (``slurm_gpus``: sacct's ``gres/gpuutil`` and ``gres/gpumem``); a job whose records carry no GPU
    figures takes its utilisation (one GPU's: a one-GPU job's alone) and memory from there, and a job
    with neither is left out."""
    low = eff.thresholds(config).low_util_pct
    ran = df[df["yolo"] & (df["gpus"] > 0) & (df["elapsed"] > 0)]
    rows = []
    for job_id, runs in ran.groupby("job_id", sort=True):
        last = runs.iloc[-1]
        use = eff.summarize(records(str(last["WorkDir"]), int(job_id), str(last["User"])), low)
        slurm = (slurm_gpus or {}).get(int(job_id))
        if use is None:
            if slurm is None:
                continue
            util = slurm.util_pct if int(last["gpus"]) == 1 else None
            use = eff.GpuUse(
                seconds=1.0,
                low_seconds=float(util is not None and util < low),
                util_pct=util,
                mem_gb=slurm.mem_gb,
                mem_total_gb=None,
                temp_c=None,
                images_per_s=None,
                batch=None,
            )
        part = config.partitions.get(str(last["Partition"]))
        share = 1 / part.shards_per_gpu if part and part.shards_per_gpu > 1 else float(config.light.gpu_share)
        hours = float(runs["gpu_hours"].sum())
        rows.append(
            [
                int(job_id),
                last["Account"],
                last["User"],
                last["Partition"],
                float(last["gpus"]),
                hours,
                use.util_pct,
                hours * use.low_share,
                use.mem_gb,
                use.mem_total_gb,
                use.temp_c,
                use.batch,
                use.images_per_s,
                int(last["gpus"]) <= 1 and use.fits(share),
                slurm.util_pct if slurm else None,
                slurm.mem_gb if slurm else None,
            ]
        )
    view = pd.DataFrame(rows, columns=EFFICIENCY_COLUMNS)
    view["batch"] = view["batch"].astype("Int64")  # a whole number, or none (auto batch): never 16.0
    return view


BUDGET_COLUMNS = [
    "account",
    "balance",
    "held",
    "charged",
    "rate_per_day",
    "capacity",
    "burn_per_day",
    "burn_days",
    "net_burn_per_day",
    "days_left",
]
MIN_BURN_DAYS = 1 / 24  # a burn rate rests on at least an hour: a first minute's charge is no daily rate


def days_left(balance: pd.Series, net_burn_per_day: pd.Series) -> pd.Series:
    """Days until the balance is spent at the net burn (charges less refills): 0 for an account spent
    already (overdrawn too: never a negative count), NaN where refills keep up with the burn (never)."""
    left = (balance / net_burn_per_day.where(net_burn_per_day > 0)).astype(float)
    return left.where(balance > 0, 0.0)


def budgets(config: Config, days: float = 7.0, now: float | None = None) -> pd.DataFrame:
    """Balance, refill quota, burn rate (charged per day over the last ``days``, overruns included,
    or over the account's life when it is younger: ``burn_days``) and days left, per account."""
    lg = ledger.reader(config)
    if lg is None:
        return pd.DataFrame(columns=BUDGET_COLUMNS)
    at = time.time() if now is None else now
    try:
        cols = ["balance", "held", "charged", "rate_per_day", "capacity"]
        accounts = pd.DataFrame(
            [{"account": a["name"], **{c: a[c] for c in cols}} for a in lg.accounts()], columns=["account", *cols]
        )
        charged = lg.charged_since(at - days * 86400)
        burn = pd.DataFrame({"account": list(charged), "charged_recent": list(charged.values())})
        first = lg.first_movements()
    finally:
        lg.close()
    out = accounts.merge(burn, how="left", on="account")
    out["charged_recent"] = out["charged_recent"].astype(float).fillna(0)  # no charge in the window: object NaNs
    age = (at - out["account"].map(first).fillna(at).astype(float)) / 86400
    out["burn_days"] = age.clip(lower=MIN_BURN_DAYS, upper=days)
    out["burn_per_day"] = out["charged_recent"] / out["burn_days"]
    out["net_burn_per_day"], out["days_left"] = bucket_burn(
        out["balance"], out["burn_per_day"], out["rate_per_day"], out["capacity"]
    )
    return out[BUDGET_COLUMNS]


def bucket_burn(
    balance: pd.Series, burn: pd.Series, rate: pd.Series, capacity: pd.Series
) -> tuple[pd.Series, pd.Series]:
    """(net burn now, days left) of token buckets (pure). Refills stop at the capacity: an account
    above it burns its charges alone until it is down to the capacity (``quota set`` 120G a day up to
    600G adds nothing to a 1 TTok balance, so its net burn is not -120G a day), then charges less
    refills; NaN days where refills keep up (never)."""
    net_now = burn - rate.where(balance < capacity, 0)
    above = (balance - capacity).clip(lower=0).where(rate > 0, 0)  # without a quota, the whole balance burns down
    to_capacity = (above / burn.where(burn > 0)).astype(float)
    return net_now, (to_capacity.where(above > 0, 0.0) + days_left(balance - above, burn - rate)).where(
        balance > 0, 0.0
    )


# How each movement kind moves an account's balance (``Ledger._move``): a charge comes out of the hold.
def balance_history(movements: pd.DataFrame, balances: Mapping[str, float], start: float, now: float) -> pd.DataFrame:
    """Each account's balance after every movement since ``start`` (epoch seconds), from its
    balance now walked back through them, with a point at ``start`` and one at ``now`` (pure)."""
    rows = []
    for account, now_balance in balances.items():
        m = movements[(movements["account"] == account) & (movements["at"] >= start)].sort_values("at", kind="stable")
        delta = m["kind"].map(policy.BALANCE_SIGN).fillna(0) * m["amount"]
        after = float(now_balance) - delta[::-1].cumsum()[::-1] + delta  # the balance right after each movement
        at = [start, *m["at"], now]
        first = float(now_balance) - float(delta.sum())
        for t, b in zip(at, [first, *after, float(now_balance)], strict=True):
            rows.append({"account": account, "at": pd.Timestamp.fromtimestamp(t), "balance": b})
    return pd.DataFrame(rows, columns=["account", "at", "balance"])


def refill_line(start_balance: int, rate_per_day: int, capacity: int, days: pd.Series) -> pd.Series:
    """The balance refills alone would give ``days`` after the start: the ledger's own rule
    (``bucket.refill``), which never lifts it above ``capacity``."""

    def at(day: float) -> int:
        return start_balance + bucket.refill(start_balance, capacity, rate_per_day, 0.0, day * bucket.DAY)[0]

    return days.map(at)


Visible = Callable[[set[str]], set[str]] | None  # the accounts a viewer may see of those given


def _shown(frame: pd.DataFrame, column: str, visible: Visible) -> pd.DataFrame:
    return frame if visible is None else frame[frame[column].isin(visible(set(frame[column])))]


def jobs(config: Config, f: Filters, saved: list[list[str]] | None = None, visible: Visible = None) -> pd.DataFrame:
    """Every run in the window joined with the ledger, of the accounts ``visible`` keeps (``saved``
    rows replace the live sacct call, for benchmarks and audits)."""
    rows = fetch_sacct(config, f) if saved is None else saved
    shards = {name: p.shards_per_gpu for name, p in config.partitions.items()}
    df = join(parse_jobs(rows, shards), ledger_runs(config))
    prices = {name: p.cost_per_gpu_hour for name, p in config.partitions.items()}
    df["money"] = df["gpu_hours"] * df["Partition"].map(prices).fillna(0.0).astype(float)
    return _shown(df, "Account", visible)


def build(
    config: Config,
    f: Filters,
    views: tuple[str, ...] = VIEWS,
    saved: list[list[str]] | None = None,
    visible: Visible = None,
    df: pd.DataFrame | None = None,
) -> dict[str, pd.DataFrame]:
    """The selected views of the accounts ``visible`` keeps of those it is given (``visibility``;
    default: all), over ``df`` (``jobs``) when the caller has it."""
    runs = jobs(config, f, saved, visible) if df is None else df
    records = functools.lru_cache(maxsize=None)(job_records)  # ROI and efficiency read each file once per build

    def budget_view() -> pd.DataFrame:
        b = budgets(config)
        if f.jobs:  # -j: the budgets those jobs drew on
            b = b[b["account"].isin(set(runs["Account"]))]
        return _shown(b[b["account"] == f.account] if f.account else b, "account", visible)

    def k_view() -> pd.DataFrame:
        k = k_history(config)
        return k_of_jobs(k, runs) if f.jobs else k

    makers = {
        "usage": lambda: usage(runs),
        "accuracy": lambda: accuracy(runs, config.job.signal_seconds),
        "waits": lambda: waits(runs),
        "failures": lambda: failures(runs),
        "preemptions": lambda: preemptions(runs, records),
        "k": k_view,
        "roi": lambda: roi(runs, records),
        "efficiency": lambda: efficiency(runs, config, records, fetch_step_gpus(config, f) if saved is None else {}),
        "budgets": budget_view,
    }
    return {v: makers[v]() for v in views}


def usage_over_time(df: pd.DataFrame) -> pd.DataFrame:
    """GPU-hours and tokens charged per account and day (per hour when the runs span two days or
    less), by when each run ended."""
    cols = ["Account", "period", "per", "gpu_hours", "tokens_charged"]
    ended = df[df["end"].notna()]
    if ended.empty:
        return pd.DataFrame(columns=cols)
    hourly = ended["end"].max() - ended["end"].min() <= pd.Timedelta(days=2)
    period = ended["end"].dt.floor("h" if hourly else "D").rename("period")
    g = ended.groupby(["Account", period])
    out = g.agg(gpu_hours=("gpu_hours", "sum"), tokens_charged=("charge", "sum")).reset_index()
    out["per"] = "hour" if hourly else "day"
    return out[cols].sort_values(["Account", "period"]).reset_index(drop=True)


def waits_over_time(df: pd.DataFrame) -> pd.DataFrame:
    """Median queue wait per partition and day (per hour when the runs span two days or less), by
    when each run was submitted: every run's own wait, not a median of the QOS medians."""
    cols = ["Partition", "period", "per", "jobs", "median"]
    started = df[df["wait_s"].notna() & df["submit"].notna()]
    if started.empty:
        return pd.DataFrame(columns=cols)
    hourly = started["submit"].max() - started["submit"].min() <= pd.Timedelta(days=2)
    period = started["submit"].dt.floor("h" if hourly else "D").rename("period")
    out = started.groupby(["Partition", period])["wait_s"].agg(jobs="size", median="median").reset_index()
    out["per"] = "hour" if hourly else "day"
    return out[cols].sort_values(["Partition", "period"]).reset_index(drop=True)


def predictions(df: pd.DataFrame) -> pd.DataFrame:
    """Predicted and actual seconds of every yolo run that completed or hit its limit (a TIMEOUT's
    actual time is at least what it ran: the runs a prediction fell short of most)."""
    ended = df["state"].isin(["COMPLETED", "TIMEOUT"])
    done = df[df["yolo"] & ended & (df["pred_s"] > 0) & (df["elapsed"] > 0)]
    return done[["job_id", "Partition", "state", "pred_s", "elapsed"]].reset_index(drop=True)


def window_start(since: str, now: float, fallback_days: float = 7.0) -> float:
    """Epoch seconds of a ``--since`` value: sacct's ``now[-N[unit]]`` or a date and time; the last
    ``fallback_days`` for any other form sacct takes (``midnight``, ``MMDD``, ...)."""
    at = durations.instant(since, now)
    return now - fallback_days * 86400 if at is None else at


def balances(config: Config, accounts: list[str], start: float, now: float) -> pd.DataFrame:
    """``balance_history`` of ``accounts`` from the ledger (empty without one)."""
    lg = ledger.reader(config)
    if lg is None or not accounts:
        if lg is not None:
            lg.close()
        return pd.DataFrame(columns=["account", "at", "balance"])
    try:
        moves = pd.DataFrame(
            [dict(r) for r in lg.movements_since(start, accounts)], columns=["account", "at", "kind", "amount"]
        )
        now_balances = {name: lg.balance(name) for name in accounts}
        quotas = {
            name: (float(row["refilled_at"]), float(row["rate_per_day"]))
            for name in accounts
            if (row := lg.account(name)) is not None
        }
    finally:
        lg.close()
    history = balance_history(moves, now_balances, start, now)
    history["refill_from"] = history["account"].map(refill_from(moves, quotas, start)).astype(float)
    return history


def refill_from(moves: pd.DataFrame, quotas: Mapping[str, tuple[float, float]], start: float) -> dict[str, float]:
    """When each account's refills began within the window (pure), from ``quotas`` (its last refill's
    time, its rate per day): the time its first refill movement there was earned from (the refill
    pays the days since the one before), else its last refill (a quota set since, not yet paid);
    never before ``start``. A quota set mid-window draws no refills before it."""
    refills = moves[moves["kind"] == "refill"].sort_values("at", kind="stable").groupby("account").first()
    out = {}
    for account, (last, rate) in quotas.items():
        if account in refills.index and rate > 0:
            first = refills.loc[account]
            out[account] = max(start, float(first["at"]) - float(first["amount"]) / rate * 86400)
        else:
            out[account] = max(start, last)
    return out


def series(
    config: Config, f: Filters, df: pd.DataFrame, views: dict[str, pd.DataFrame], now: float | None = None
) -> dict[str, pd.DataFrame]:
    """What the HTML page plots over time, for the views in ``views``: usage per account and day
    (``usage``), every run's predicted and actual time (``accuracy``), median queue waits per
    partition and day (``waits``), and the balance history of the accounts the ``budgets`` view
    shows, over the report's window, with when each one's refills began (``refill_from``)."""
    out = {}
    if "usage" in views:
        out["usage"] = usage_over_time(df)
    if "accuracy" in views:
        out["accuracy"] = predictions(df)
    if "waits" in views:
        out["waits"] = waits_over_time(df)
    if "budgets" in views:
        at = time.time() if now is None else now
        out["budgets"] = balances(config, [str(a) for a in views["budgets"]["account"]], window_start(f.since, at), at)
    return out


def recent_predictions(config: Config, since: str = "now-1days") -> list[Prediction]:
    """The predictions of yolo jobs that completed or hit their limit recently (``job_totals``: a
    requeued job's runs together), with each one's first limit."""
    jobs = job_totals(parse_jobs(fetch_sacct(config, Filters(since=since))), config.job.signal_seconds)
    done = jobs[(jobs["state"] == "COMPLETED") | jobs["missed"]]
    return [
        Prediction(
            int(r.job_id),
            str(r.Partition),
            float(r.pred_s),
            float(r.elapsed),
            bool(r.missed),
            float(r.limit_s) if r.limit_s == r.limit_s else None,  # NaN: an unlimited job
        )
        for r in done.itertuples()
    ]
