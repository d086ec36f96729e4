"""The Prometheus textfile: written by prometheus_client, parseable whatever the account and partition names."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_yolo.admin.report.metrics import render

HOSTILE = ['vi"sion', "back\\slash", "new\nline", 'all\\"of\n\\n"them', "ünï  cödé", "", "}{,=", "# HELP x y", "\\"]


def views(names: list[str]) -> dict[str, pd.DataFrame]:
    return {
        "budgets": pd.DataFrame(
            {
                "account": names,
                "balance": [5e9] * len(names),
                "held": [1.0] * len(names),
                "burn_per_day": [float("nan")] + [2.5] * (len(names) - 1),
            }
        ),
        "accuracy": pd.DataFrame(
            {"Partition": names, "median_abs_error": [0.1] * len(names), "timeout_share": [0.0] * len(names)}
        ),
        "waits": pd.DataFrame({"Partition": names, "QOS": list(reversed(names)), "median": [30.0] * len(names)}),
    }


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_hostile_label_values_round_trip() -> None:
    text = render(views(HOSTILE), dict.fromkeys(HOSTILE, 1.5), incidents=2, comments_queued=0, audit_findings=3)
    got = samples(text)
    assert [labels["account"] for labels, _ in got["slurm_yolo_balance_tokens"]] == HOSTILE
    assert [labels["partition"] for labels, _ in got["slurm_yolo_k_seconds_per_mpx"]] == HOSTILE
    assert [(labels["partition"], labels["qos"]) for labels, _ in got["slurm_yolo_queue_wait_seconds_median"]] == list(
        zip(HOSTILE, reversed(HOSTILE), strict=True)
    )
    assert all(v == 5e9 for _, v in got["slurm_yolo_balance_tokens"])
    assert got["slurm_yolo_hook_incidents_open"] == [({}, 2.0)]
    assert got["slurm_yolo_audit_findings"] == [({}, 3.0)]
    # a line per sample: no label value breaks one
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == sum(len(v) for v in got.values())


def test_unknown_values_have_no_sample_but_keep_their_help() -> None:
    text = render(views(["a", "b"]), {}, audit_findings=float("nan"))
    got = samples(text)
    assert "slurm_yolo_audit_findings" not in got
    assert "# TYPE slurm_yolo_audit_findings gauge" in text and "# HELP slurm_yolo_k_seconds_per_mpx " in text
    assert [labels["account"] for labels, _ in got["slurm_yolo_burn_tokens_per_day"]] == ["b"]  # a's is NaN
    assert all(not math.isnan(v) for series in got.values() for _, v in series)


@pytest.mark.parametrize("value", [float("inf"), 1e300, -0.0, 123456789012345])
def test_numbers_survive(value: float) -> None:
    got = samples(render(views(["a"]), {"p": value}))
    assert got["slurm_yolo_k_seconds_per_mpx"] == [({"partition": "p"}, value)]
