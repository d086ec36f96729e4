"""Prometheus textfile-collector metrics for node_exporter: balances, holds, burn, k, accuracy, waits."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from slurm_yolo.admin.report import Filters, build
from slurm_yolo.core.config import Config
from slurm_yolo.state import books, calibration, ledger


class _Families(Collector):
    """The metric families of one snapshot, for prometheus_client's exposition."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(
    views: dict[str, pd.DataFrame],
    k: dict[str, float],
    incidents: int = 0,
    comments_queued: int = 0,
    audit_findings: float = float("nan"),
) -> str:
    """The exposition text (pure), written by prometheus_client (label values escaped there): one
    HELP/TYPE block per metric, no sample where the value is unknown (NaN)."""
    families: list[Metric] = []

    def metric(name: str, help_text: str, samples: list[tuple[dict[str, object], float]]) -> None:
        labels = list(samples[0][0]) if samples else []
        family = GaugeMetricFamily(f"slurm_yolo_{name}", help_text, labels=labels)
        for values, value in samples:
            if value == value:  # NaN: no sample
                family.add_metric([str(values[label]) for label in labels], value)
        families.append(family)

    b = views["budgets"]
    metric(
        "balance_tokens",
        "Tokens an account can still spend.",
        [({"account": r.account}, float(r.balance)) for r in b.itertuples()],
    )
    metric(
        "held_tokens", "Tokens held by running jobs.", [({"account": r.account}, float(r.held)) for r in b.itertuples()]
    )
    metric(
        "burn_tokens_per_day",
        "Tokens charged per day over the last week.",
        [({"account": r.account}, float(r.burn_per_day)) for r in b.itertuples()],
    )
    metric(
        "hook_incidents_open",
        "Hooks that failed and whose runs are not settled yet (ledger reconcile).",
        [({}, float(incidents))],
    )
    metric(
        "admin_comments_queued",
        "Settled jobs whose AdminComment slurmdbd has not taken yet (ledger comments).",
        [({}, float(comments_queued))],
    )
    metric(
        "audit_findings", "Differences between sacct and the ledger in the last ledger audit.", [({}, audit_findings)]
    )
    metric(
        "k_seconds_per_mpx",
        "Seconds per million pixels of work (Mpx) per GPU.",
        [({"partition": p}, v) for p, v in k.items()],
    )
    a = views["accuracy"]
    metric(
        "prediction_abs_error_median",
        "Median |actual - predicted| / predicted run time, last day.",
        [({"partition": r.Partition}, float(r.median_abs_error)) for r in a.itertuples()],
    )
    metric(
        "timeout_share",
        "Share of yolo jobs that hit their time limit, last day.",
        [({"partition": r.Partition}, float(r.timeout_share)) for r in a.itertuples()],
    )
    w = views["waits"]
    metric(
        "queue_wait_seconds_median",
        "Median queue wait, last day.",
        [({"partition": r.Partition, "qos": r.QOS}, float(r.median)) for r in w.itertuples()],
    )
    return generate_latest(_Families(families)).decode()


def text(config: Config) -> str:
    """The metrics in Prometheus' text format (what ``slurm-yolo metrics`` prints without --textfile)."""
    views = build(config, Filters(since="now-1days"), ("budgets", "accuracy", "waits"))
    names = set(config.partitions) | {h.partition for h in calibration.history(config)}
    k = {p: calibration.load(config, p).model.k for p in sorted(names)}
    lg = ledger.reader(config)
    incidents = queued = 0
    if lg is not None:
        with lg:
            incidents = len(lg.open_incidents())
            queued = lg.unwritten_count()
    audit = books.last(config)
    findings = float(len(audit.findings)) if audit else float("nan")
    return render(views, k, incidents, queued, findings)


def write_textfile(config: Config, directory: Path) -> Path:
    """Write ``slurm_yolo.prom`` atomically (node_exporter must never read half a file), through a
    temporary file of a name nobody can guess or plant first (a link or FIFO there would be written
    through, or block): not prometheus_client's ``write_to_textfile``, whose temporary name is the
    target's plus the pid and thread id, opened without O_EXCL."""
    content = text(config)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "slurm_yolo.prom"
    fd, tmp = tempfile.mkstemp(prefix=".slurm_yolo.prom.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)  # node_exporter reads it as its own user
            f.write(content)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
