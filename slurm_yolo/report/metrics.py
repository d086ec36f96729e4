"""Prometheus textfile-collector metrics for node_exporter: balances, holds, burn, k, accuracy, waits."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pandas as pd

from .. import books, calibration, ledger
from ..config import Config
from . import Filters, build


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def render(views: dict[str, pd.DataFrame], k: dict[str, float], incidents: int = 0, comments_queued: int = 0,
           audit_findings: float = float("nan")) -> str:  # fmt: skip
    """The exposition text (pure): one HELP/TYPE block per metric."""
    lines: list[str] = []

    def metric(name: str, help_text: str, samples: list[tuple[dict[str, object], float]]) -> None:
        lines.extend([f"# HELP slurm_yolo_{name} {help_text}", f"# TYPE slurm_yolo_{name} gauge"])
        for labels, value in samples:
            if value == value:  # NaN: no sample
                tags = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
                lines.append(f"slurm_yolo_{name}{{{tags}}} {value:g}")

    b = views["budgets"]
    metric("balance_tokens", "Tokens an account can still spend.", [({"account": r.account}, float(r.balance)) for r in b.itertuples()])
    metric("held_tokens", "Tokens held by running jobs.", [({"account": r.account}, float(r.held)) for r in b.itertuples()])
    metric("burn_tokens_per_day", "Tokens charged per day over the last week.",
           [({"account": r.account}, float(r.burn_per_day)) for r in b.itertuples()])  # fmt: skip
    metric("hook_incidents_open", "Hooks that failed and whose runs are not settled yet (ledger reconcile).",
           [({}, float(incidents))])  # fmt: skip
    metric("admin_comments_queued", "Settled jobs whose AdminComment slurmdbd has not taken yet (ledger comments).",
           [({}, float(comments_queued))])  # fmt: skip
    metric("audit_findings", "Differences between sacct and the ledger in the last ledger audit.",
           [({}, audit_findings)])  # fmt: skip
    metric("k_seconds_per_mtok", "Seconds per million effective tokens per GPU.", [({"partition": p}, v) for p, v in k.items()])
    a = views["accuracy"]
    metric("prediction_abs_error_median", "Median |actual - predicted| / predicted run time, last day.",
           [({"partition": r.Partition}, float(r.median_abs_error)) for r in a.itertuples()])  # fmt: skip
    metric("timeout_share", "Share of yolo jobs that hit their time limit, last day.",
           [({"partition": r.Partition}, float(r.timeout_share)) for r in a.itertuples()])  # fmt: skip
    w = views["waits"]
    metric("queue_wait_seconds_median", "Median queue wait, last day.",
           [({"partition": r.Partition, "qos": r.QOS}, float(r.median)) for r in w.itertuples()])  # fmt: skip
    return "\n".join(lines) + "\n"


def write_textfile(config: Config, directory: Path) -> Path:
    """Write ``slurm_yolo.prom`` atomically (node_exporter must never read half a file), through a
    temporary file of a name nobody can guess or plant first (a link or FIFO there would be written
    through, or block)."""
    views = build(config, Filters(since="now-1days"), ("budgets", "accuracy", "waits"))
    names = set(config.partitions) | {h.partition for h in calibration.history(config)}
    k = {p: calibration.load(config, p).model.k for p in sorted(names)}
    lg = ledger.reader(config)
    incidents = queued = 0
    if lg is not None:
        with lg:
            incidents = len(lg.open_incidents())
            queued = len(lg.unwritten_comments())
    audit = books.last(config)
    findings = float(len(audit.findings)) if audit else float("nan")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "slurm_yolo.prom"
    fd, tmp = tempfile.mkstemp(prefix=".slurm_yolo.prom.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)  # node_exporter reads it as its own user
            f.write(render(views, k, incidents, queued, findings))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
