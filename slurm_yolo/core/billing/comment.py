"""The AdminComment a settled job carries: the ledger's settlement of each of its runs, so that sacct
alone can rebuild the books (``ledger audit`` holds one against the other).

``yolo:run=SUBMIT,est=,hold=H,charge=C,refund=R,price=P,rate=X,state=STATE,elapsed=S[;run=...]``,
one entry per settled run (a requeued job has several), oldest first. Pure functions: the ledger
queues the text in the settlement's own transaction and ``books`` writes it with sacctmgr.

Slurm 22.05's sacctmgr lowercases the whole comment (quoting does not help; 24.11 keeps it), so a
reader takes keys and states without regard to case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slurm_yolo.core.billing.policy import rate_text

PREFIX = "yolo:"
FIELDS = ("run", "est", "hold", "charge", "refund", "price", "rate", "state", "elapsed")


def _value(row: Mapping[str, Any], field: str) -> str:
    if field == "run":
        return str(row["submit_time"])
    if field == "est":
        return "" if row["estimate"] is None else str(row["estimate"])
    if field == "rate":
        return rate_text(row["rate_ppm"])
    if field == "state":
        return str(row["end_state"])
    return str(row[field])


def render(runs: Iterable[Mapping[str, Any]]) -> str:
    """The comment for a job's settled runs (rows of the ledger's jobs table)."""
    ordered = sorted(runs, key=lambda r: int(r["submit_time"]))
    return PREFIX + ";".join(",".join(f"{f}={_value(r, f)}" for f in FIELDS) for r in ordered)


def parse(text: str) -> dict[int, dict[str, str]]:
    """The runs an AdminComment records, by submit time (a comment without ``run=``, written before
    runs were named, counts as run 0); empty for anything that is not ours."""
    if not text.lower().startswith(PREFIX):
        return {}
    runs: dict[int, dict[str, str]] = {}
    for entry in text[len(PREFIX) :].split(";"):
        fields = {}
        for item in entry.split(","):
            key, _, value = item.partition("=")
            fields[key.strip().lower()] = value.strip()
        if "state" in fields:
            fields["state"] = fields["state"].upper()
        run = fields.get("run", "0")
        if run.isdigit():
            runs[int(run)] = fields
    return runs
