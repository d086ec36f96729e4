"""Report output: a terminal table, CSV, JSON, and a self-contained HTML page with PNG plots.

The table and the page are read by people: tokens in MTok/GTok (``policy.fmt_tokens``, as the
ledger prints them), GPU-hours, durations and days, shares in percent. CSV and JSON are read by
programs: raw numbers (tokens, seconds, GPU-hours, shares as fractions; ``days_left`` empty or null
where refills keep up with the burn). matplotlib is imported by ``plots`` alone.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.state.cost import fmt_amount


def _number(x: float) -> str:
    """A plain number, never in scientific notation."""
    if x == 0 or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 0.001 else f"{x:.3f}"


def _k(x: float) -> str:
    """k to 4 significant digits, never in scientific notation (a refit on bad runs can make it tiny)."""
    places = 3 - math.floor(math.log10(abs(x))) if x and math.isfinite(x) else 4
    return f"{x:.{max(0, places)}f} s/Mpx"


def fmt_duration(seconds: float) -> str:
    """45 s, 12.5 min, 3.2 h, 2.1 days."""
    for limit, unit, size in ((90, "s", 1), (90 * 60, "min", 60), (48 * 3600, "h", 3600)):
        if abs(seconds) < limit:
            return f"{_number(seconds / size)} {unit}"
    return f"{_number(seconds / 86400)} days"


LONG_DAYS = 3650.0  # past this, "how many days" is no longer a question anyone asks


def fmt_days(days: float) -> str:
    """Days left: one decimal; 0 is spent already; NaN (refills keep up with the burn) never ends."""
    if math.isnan(days):
        return "∞"
    if days > LONG_DAYS:
        return f"> {LONG_DAYS / 365:.0f} years"
    return "spent" if days <= 0 else f"{days:,.1f} days"


def fmt_gpu_hours(hours: float) -> str:
    return f"{hours:,.1f} GPU-h" if abs(hours) >= 10 else f"{hours:.2f} GPU-h"


def fmt_share(x: float) -> str:
    return f"{x:.0%}" if x == 0 or abs(x) >= 0.1 else f"{x:.1%}"


def _signed_share(x: float) -> str:
    return ("+" if x > 0 else "") + fmt_share(x)


def _per_day(x: float) -> str:
    return f"{fmt_tokens(x)}/day"


_TOKEN_COLUMNS = ("tokens_held", "tokens_charged", "tokens_refunded", "balance", "held", "charged", "capacity")
_TOKENS = dict.fromkeys(_TOKEN_COLUMNS, fmt_tokens)
# How the text and HTML views show each view's numbers (NaN: blank; days_left has its own word for it).
UNITS: dict[str, dict[str, Callable[[float], str]]] = {
    "usage": {"gpu_hours": fmt_gpu_hours, "money": fmt_amount, **_TOKENS},
    "accuracy": {
        "median_abs_error": fmt_share,
        "p90_abs_error": fmt_share,
        "median_error": _signed_share,
        "timeout_share": fmt_share,
        "over_reservation_median": lambda x: f"{x:.2f}x",
        "promised_coverage": fmt_share,
        "realised_coverage": fmt_share,
    },
    "waits": {"median": fmt_duration, "p90": fmt_duration, "max": fmt_duration},
    "preemptions": {
        "preempted_share": fmt_share,
        "preempted_gpu_hours": fmt_gpu_hours,
        "preempted_tokens_charged": fmt_tokens,
    },
    "k": {"k": _k},
    "roi": {
        "gtok_charged": lambda x: fmt_tokens(x * 1e9),
        "map_per_gtok": lambda x: f"{_number(x)}/GTok",
        "money": fmt_amount,
        "map_per_money": _number,
    },
    "efficiency": {
        "gpu_hours": fmt_gpu_hours,
        "low_util_gpu_hours": fmt_gpu_hours,
        "util_pct": lambda x: f"{x:.0f}%",
        "mem_gb": lambda x: f"{x:.1f} GB",
        "mem_total_gb": lambda x: f"{x:.0f} GB",
        "temp_c": lambda x: f"{x:.0f} C",
        "images_per_s": lambda x: f"{_number(x)}/s",
    },
    "budgets": {
        **_TOKENS,
        "rate_per_day": _per_day,
        "burn_per_day": _per_day,
        "net_burn_per_day": _per_day,
        "burn_days": lambda d: fmt_duration(d * 86400),
        "days_left": fmt_days,
    },
}
# The headers people read (the table and the page); --csv and --json keep the column names programs use.
HEADERS = {
    "gpu_hours": "GPU-hours",
    "tokens_held": "held",
    "tokens_charged": "charged",
    "tokens_refunded": "refunded",
    "median_abs_error": "median |error|",
    "p90_abs_error": "p90 |error|",
    "median_error": "median error",
    "timeout_share": "timeouts",
    "over_reservation_median": "limit / elapsed",
    "promised_coverage": "coverage promised",
    "realised_coverage": "coverage realised",
    "map50_95": "mAP50-95",
    "gtok_charged": "charged",
    "map_per_gtok": "mAP50-95 per GTok",
    "money": "cost",
    "map_per_money": "mAP50-95 per unit of cost",
    "rate_per_day": "refill",
    "capacity": "refill cap",
    "burn_per_day": "burn",
    "burn_days": "burn measured over",
    "net_burn_per_day": "net burn",
    "days_left": "days left",
    "job_id": "job",
    "util_pct": "GPU util",
    "low_util_gpu_hours": "GPU-hours under-used",
    "mem_gb": "GPU memory",
    "mem_total_gb": "of the GPU's",
    "temp_c": "hottest",
    "images_per_s": "images/s",
    "fits_shard": "fits a shard",
    "slurm_gpuutil": "Slurm's gpuutil",
    "slurm_gpumem_gb": "Slurm's gpumem",
    "preempted_share": "share",
    "preempted_gpu_hours": "their GPU-hours",
    "preempted_tokens_charged": "charged",
    "resumed_completed": "resumed and completed",
}
NAN_WORDS = ("days_left",)  # columns whose formatter speaks for a missing value


def human(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """A view with its numbers as text in human units (``UNITS``; other floats plainly)."""
    units = UNITS.get(name, {})
    out = df.copy()
    for col in out.columns:
        fmt = units.get(col) or (_number if pd.api.types.is_float_dtype(out[col]) else None)
        if fmt is None:
            continue
        values = pd.to_numeric(out[col], errors="coerce")
        keep_nan = col in NAN_WORDS
        out[col] = [fmt(float(v)) if keep_nan or pd.notna(v) else "" for v in values]
    return out


def _for_people(name: str, df: pd.DataFrame, currency: str) -> pd.DataFrame:
    """``human``, with the headers people read (the money columns named in ``currency``)."""
    money = {"money": f"cost ({currency})", "map_per_money": f"mAP50-95 per {currency}"} if currency else {}
    return human(name, df).rename(columns={**HEADERS, **money})


# Why a view is empty, said where it is (an empty table alone reads as a fault).
EMPTY = {
    "usage": "no job of the accounts you may see ran in the window (--since, --until)",
    "accuracy": "no yolo-sbatch run completed in the window",
    "waits": "no job started in the window",
    "failures": "no job ended in the window",
    "preemptions": "no job ran in the window",
    "k": "no partition is calibrated yet (slurm-yolo calibrate)",
    "roi": "no yolo-sbatch run in the window completed with a mAP50-95 in its usage records",
    "efficiency": (
        "no GPU job in the window has GPU figures: its usage records (yolo-usage-JOBID.jsonl in its work dir,"
        " which you may read) carry them where NVML saw its GPUs, and sacct where the site gathers gres/gpuutil"
    ),
    "budgets": "no account has a ledger entry (slurm-yolo ledger deposit ACCOUNT AMOUNT makes one)",
}


def empty(name: str) -> str:
    return f"no data: {EMPTY.get(name, 'nothing in the window')}"


def table(views: dict[str, pd.DataFrame], heading: str = "", currency: str = "") -> str:
    """The views as text tables, under ``heading`` (the window and when it was made)."""
    parts = [heading] if heading else []
    for name, df in views.items():
        parts.append(f"== {name}")
        parts.append(_for_people(name, df, currency).to_string(index=False) if len(df) else f"({empty(name)})")
    return "\n".join(parts) + "\n"


def csv(views: dict[str, pd.DataFrame]) -> str:
    """One CSV block per view, each preceded by a ``# view`` line (raw numbers)."""
    return "".join(f"# {name}\n{df.to_csv(index=False)}" for name, df in views.items())


def as_json(views: dict[str, pd.DataFrame]) -> str:
    """Raw numbers (NaN: null)."""
    return json.dumps(
        {name: json.loads(df.to_json(orient="records", date_format="iso")) for name, df in views.items()}, indent=2
    )


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


# Ticks of a duration axis: round numbers in each unit.
DURATION_TICKS = (
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
    7200,
    4 * 3600,
    8 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
    30 * 86400,
)
MAX_PANELS = 12  # budgets drawn (those burning fastest); the table has them all


def _duration_axis(axis: Any, low: float, high: float) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks: list[float] = [t for t in DURATION_TICKS if low / 2 <= t <= high * 2] or [low, high]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v)))


def _token_axis(axis: Any) -> None:
    """Ticks in MTok/GTok; in tokens on an axis that never reaches a tenth of an MTok."""
    from matplotlib.ticker import FuncFormatter

    def tick(v: float, _: object) -> str:
        small = max(abs(x) for x in axis.get_view_interval()) < 1e5
        return "0" if v == 0 else f"{v:,.0f} tok" if small else fmt_tokens(v)

    axis.set_major_formatter(FuncFormatter(tick))


def _date_axis(axis: Any) -> None:
    """A few dates, each said once (matplotlib's concise style)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator(minticks=3, maxticks=7)
    axis.set_major_locator(locator)
    axis.set_major_formatter(ConciseDateFormatter(locator))


def _usage_plot(plt: Any, view: pd.DataFrame, over_time: pd.DataFrame | None) -> Any:
    """GPU-hours and tokens charged per account over time."""
    if over_time is None or over_time.empty:
        return None
    per = over_time["per"].iloc[0]
    top = over_time.groupby("Account")["gpu_hours"].sum().nlargest(8).index
    data = over_time.assign(Account=over_time["Account"].where(over_time["Account"].isin(top), "other"))
    fig, (hours, tokens) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for account, g in data.groupby("Account"):
        g = g.groupby("period")[["gpu_hours", "tokens_charged"]].sum()
        hours.plot(g.index, g["gpu_hours"], marker="o", label=str(account))
        tokens.plot(g.index, g["tokens_charged"].fillna(0), marker="o", label=str(account))
    hours.set_title(f"usage per account and {per}")
    hours.set_ylabel(f"GPU-hours per {per}")
    tokens.set_ylabel(f"tokens charged per {per}")
    _token_axis(tokens.yaxis)
    hours.legend(fontsize="small")
    periods = data["period"].unique()
    if len(periods) == 1:  # one point: matplotlib would span years around it
        step = pd.Timedelta(hours=1) if per == "hour" else pd.Timedelta(days=1)
        hours.set_xlim(periods[0] - step, periods[0] + step)
    _date_axis(tokens.xaxis)
    return fig


def _accuracy_plot(plt: Any, view: pd.DataFrame, runs: pd.DataFrame | None) -> Any:
    """Predicted against actual run time per partition, on log axes, with the line they agree on."""
    if runs is None or runs.empty:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for part, g in runs.groupby("Partition"):
        done = g[g["state"] != "TIMEOUT"]
        ax.scatter(done["pred_s"], done["elapsed"], s=14, alpha=0.7, label=str(part))
    timeouts = runs[runs["state"] == "TIMEOUT"]
    if not timeouts.empty:  # it would have run longer: the point is a floor, not the run's time
        ax.scatter(timeouts["pred_s"], timeouts["elapsed"], s=30, marker="^", c="red", label="TIMEOUT (ran at least)")
    low = float(min(runs["pred_s"].min(), runs["elapsed"].min()))
    high = float(max(runs["pred_s"].max(), runs["elapsed"].max()))
    ax.plot([low / 1.5, high * 1.5], [low / 1.5, high * 1.5], "k--", linewidth=1, label="predicted = actual")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        _duration_axis(axis, low, high)
    ax.set_xlabel("predicted run time")
    ax.set_ylabel("actual run time")
    ax.set_title("predicted vs actual run time (completed and timed-out runs)")
    ax.legend(fontsize="small")
    return fig


def _waits_plot(plt: Any, view: pd.DataFrame, over_time: pd.DataFrame | None) -> Any:
    """Median queue wait per partition over time (``report.waits_over_time``: every run's own wait)."""
    if over_time is None or over_time.empty or view.empty:
        return None
    size, unit = next(
        (s, u)
        for s, u in ((1, "s"), (60, "min"), (3600, "h"), (86400, "days"))
        if over_time["median"].max() < 120 * s or u == "days"
    )
    fig, ax = plt.subplots(figsize=(6, 3))
    for part, g in over_time.groupby("Partition"):
        ax.plot(
            pd.to_datetime(g["period"]), g["median"] / size, marker="o", label=f"{part} ({int(g['jobs'].sum())} jobs)"
        )
    ax.set_ylabel(f"median queue wait ({unit})")
    ax.set_title(f"median queue wait per {over_time['per'].iloc[0]}, by partition")
    ax.legend(fontsize="small")
    _date_axis(ax.xaxis)
    return fig


def _k_plot(plt: Any, view: pd.DataFrame, _: pd.DataFrame | None) -> Any:
    if view.empty:
        return None
    fig, ax = plt.subplots(figsize=(6, 3))
    for part, g in view.groupby("partition"):
        ax.plot(pd.to_datetime(g["at"]), g["k"], marker="o", label=str(part))
    ax.set_title("k over time")
    ax.set_ylabel("s per Mpx of work")
    ax.legend(fontsize="small")
    _date_axis(ax.xaxis)
    return fig


MARKED_MOVEMENTS = 100  # the burn-down marks each balance movement up to this many


def _budget_plot(plt: Any, view: pd.DataFrame, history: pd.DataFrame | None) -> Any:
    """Each budget's balance over the window (its burn-down), the balance its refills alone would
    give (the refill line), and where the net burn takes it (dotted)."""
    from slurm_yolo.admin.report import refill_line

    if history is None or history.empty or view.empty:
        return None
    burning = view[view["burn_per_day"] > 0]  # an idle account's panel is a flat line: the table has it
    if burning.empty:
        return None
    shown = burning.sort_values("burn_per_day", ascending=False).head(MAX_PANELS)
    cols = min(3, len(shown))
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, b in zip(axes.flat, shown.itertuples(), strict=False):
        h = history[history["account"] == b.account].sort_values("at", kind="stable")
        if h.empty:
            continue
        start, now = h["at"].iloc[0], h["at"].iloc[-1]
        # A step (the balance holds between movements), each movement marked while they are few enough
        # to see: a day of hourly refills is 24 points, never a line drawn through what did not happen.
        sparse = len(h) <= MARKED_MOVEMENTS
        ax.step(h["at"], h["balance"], where="post", label="balance", marker="o" if sparse else None, markersize=3)
        begin = max(start, pd.Timestamp.fromtimestamp(float(h["refill_from"].iloc[0])))  # not before the quota
        if b.rate_per_day > 0 and begin < now:
            when = pd.date_range(begin, now, periods=50)
            days = pd.Series((when - begin).total_seconds() / 86400)
            from_balance = float(h[h["at"] <= begin]["balance"].iloc[-1])  # the step's value when refills began
            ax.plot(
                when,
                refill_line(int(from_balance), int(b.rate_per_day), int(b.capacity), days),
                "g--",
                linewidth=1,
                label=f"refills alone ({fmt_tokens(b.rate_per_day)}/day)",
            )
        left = math.inf if pd.isna(b.days_left) else float(b.days_left)
        window = (now - start).total_seconds() / 86400
        if 0 < left < math.inf and window > 0:
            ahead = min(left, window)  # as far ahead as the window looks back
            ax.plot(
                [now, now + pd.Timedelta(days=ahead)],
                [h["balance"].iloc[-1], h["balance"].iloc[-1] * (1 - ahead / left)],
                "r:",
                label="at the net burn",
            )
        ax.axhline(0, color="#999", linewidth=0.8)
        if left <= 0:
            outlook = "spent"
        elif left < math.inf:  # at the burn of how long a stretch: an hour's says little
            outlook = (
                f"{fmt_days(left)} left at {fmt_tokens(b.burn_per_day)}/day over {fmt_duration(b.burn_days * 86400)}"
            )
        else:
            outlook = f"burns {fmt_tokens(b.burn_per_day)}/day; refills keep up"
        ax.set_title(f"{b.account}: {outlook}", fontsize="small")
        _token_axis(ax.yaxis)
        _date_axis(ax.xaxis)
        ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


PLOT_BATCHES = 8  # batch sizes the efficiency plot names in its legend


def _efficiency_plot(plt: Any, view: pd.DataFrame, _: pd.DataFrame | None) -> Any:
    """Each job's images/s against its peak GPU memory, by batch size: where a bigger batch stops paying."""
    points = view.dropna(subset=["mem_gb", "images_per_s"])
    if points.empty:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    batch = points["batch"].fillna(0).astype(int)
    shown = set(batch.value_counts().index[:PLOT_BATCHES])  # the commonest; the rest as one
    groups = points.groupby(batch.where(batch.isin(shown), -1))
    for size, g in sorted(groups, key=lambda kv: (int(kv[0]) <= 0, abs(int(kv[0])))):  # sizes, unknown, the rest
        label = {0: "batch unknown", -1: "other batch sizes"}.get(int(size), f"batch {size}")
        ax.scatter(g["mem_gb"], g["images_per_s"], label=label)
    ax.set_xlabel("peak GPU memory (GB)")
    ax.set_ylabel("images/s")
    ax.set_title("throughput against GPU memory, per batch size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


PLOTS = {
    "usage": _usage_plot,
    "accuracy": _accuracy_plot,
    "waits": _waits_plot,
    "k": _k_plot,
    "efficiency": _efficiency_plot,
    "budgets": _budget_plot,
}


def plots(views: dict[str, pd.DataFrame], series: dict[str, pd.DataFrame] | None = None) -> dict[str, str]:
    """PNG (base64) per view that has a picture: usage per account over time, predicted vs actual run
    time, queue waits, k over time, each budget's burn-down (``series``: ``report.series``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    for name, view in views.items():
        make = PLOTS.get(name)
        fig = make(plt, view, (series or {}).get(name)) if make else None
        if fig is not None:
            out[name] = _png(fig)
            plt.close(fig)
    return out


def html_page(
    views: dict[str, pd.DataFrame],
    series: dict[str, pd.DataFrame] | None = None,
    title: str = "slurm-yolo report",
    heading: str = "",
    currency: str = "",
) -> str:
    """One self-contained page (plots embedded) an admin can mail or publish; ``heading`` says its
    window and when it was made."""
    images = plots(views, series)
    body = [f"<h1>{html.escape(title)}</h1>"] + ([f"<p>{html.escape(heading)}</p>"] if heading else [])
    for name, df in views.items():
        body.append(f"<h2>{html.escape(name)}</h2>")
        if name in images:
            body.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{images[name]}">')
        body.append(
            _for_people(name, df, currency).to_html(index=False, na_rep="")
            if len(df)
            else f"<p>{html.escape(empty(name))}</p>"
        )
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>"
