"""What a run costs before it runs: the hold in budget tokens, GPU-hours and money, on the submit
line, in --explain and in --json (issue: "two names for two things": work is not budget)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.state import cost


def test_a_quote_is_the_limits_and_the_predictions_worth() -> None:
    q = cost.quote(600, 299.6, Fraction(1, 2), 1000, 800_000, 2.5, "EUR")
    # 600 s x 1/2 GPU x 1,000 tokens/GPU-s x 0.8 = 240,000; the prediction (300 s) half of it
    assert (q.hold_tokens, q.expected_tokens) == (240_000, 120_000)
    assert q.hold_gpu_hours == pytest.approx(600 * 0.5 / 3600) and q.expected_gpu_hours == pytest.approx(
        300 * 0.5 / 3600
    )
    assert q.hold_money == pytest.approx(600 * 0.5 / 3600 * 2.5) and q.expected_money == pytest.approx(
        300 * 0.5 / 3600 * 2.5
    )
    assert cost.quote(61, 1, Fraction(1, 3), 7, 1_000_000, 0, "").hold_tokens == 143  # 61 x 7 / 3 = 142.33: rounded up


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [(0.2083, "EUR", "0.21 EUR"), (1234.5, "USD", "1,234.50 USD"), (0.00417, "EUR", "0.00417 EUR"), (0.5, "", "0.50")],
)
def test_money_reads_as_money(amount: float, currency: str, text: str) -> None:
    assert cost.fmt_money(amount, currency) == text


def test_dry_run_shows_the_hold_in_budget_tokens_gpu_hours_and_money(dataset: Path, site_config: Path) -> None:
    """The bundled config: t4 at 0.5 EUR per GPU-hour; no ledger yet, so the default price (1,000,000
    tokens per GPU-second) and rate 1. The money is cost_per_gpu_hour x the GPU-hours of the limit."""
    words = ["-p", "t4", "train", f"data={dataset}", "model=yolov8n.yaml", "epochs=3", "imgsz=96"]
    d = json.loads(CliRunner().invoke(yolo_sbatch, ["--dry-run", "--json", *words]).stdout)
    share = 0.5 if d["gres"].startswith("shard:t4:2") else float(d["gpus"])
    limit = d["time_limit_seconds"]
    assert d["hold_tokens"] == round(limit * share * 1_000_000) and d["price_tokens_per_gpu_second"] == 1_000_000
    assert d["expected_charge_tokens"] == round(round(d["predicted_seconds"]) * share * 1_000_000)
    assert d["hold_gpu_hours"] == pytest.approx(limit * share / 3600)
    assert d["hold_money"] == pytest.approx(limit * share / 3600 * 0.5) and d["currency"] == "EUR"
    assert d["work_pixels"] != d["hold_tokens"]  # work and budget: two quantities, two units
    assert not {k for k in d if k.endswith("_tokens")} - {"hold_tokens", "expected_charge_tokens"}
    out = CliRunner().invoke(yolo_sbatch, ["--dry-run", "--explain", *words]).stdout
    line = next(x for x in out.splitlines() if x.startswith("Not submitted"))
    hours = limit * share / 3600
    shown = f"{hours:,.2f}" if hours >= 0.01 else f"{hours:.3g}"  # a short shard job's is not "0.00"
    assert f"holds {fmt_tokens(d['hold_tokens'])} of budget = {shown} GPU-h" in line
    assert line.endswith(f" = {cost.fmt_money(limit * share / 3600 * 0.5, 'EUR')})")
    explained = next(x for x in out.splitlines() if x.startswith("cost: "))
    assert f"x {1_000_000:,} tokens/GPU-s x rate 1)" in explained and "cost_per_gpu_hour 0.5" in explained


def test_a_ledger_that_does_not_answer_leaves_the_plan_at_the_default_price(
    dataset: Path, home: Path, tmp_path: Path
) -> None:
    """A dry run must not fail because the books are away (here: a MariaDB option file that is not
    there); the cost is at the default price, and stderr says so."""
    (home / "config.toml").write_text(f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{tmp_path / "none.cnf"}"\n')
    words = ["--dry-run", "--json", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.yaml"]
    res = CliRunner().invoke(yolo_sbatch, words)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["price_tokens_per_gpu_second"] == 1_000_000
    assert res.stderr.startswith("warning: the ledger did not answer (") and res.stderr.endswith(
        "): the cost shown is at the default price\n"
    )
