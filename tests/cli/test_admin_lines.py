"""Admin command lines a new admin tried and found refused or short (issue 47): ``k`` by position or
``-p``, ``metrics`` printed without ``--textfile``, ``ledger price show`` a line per partition."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin


@pytest.mark.parametrize("args", [["k", "t4"], ["k", "-p", "t4"], ["k", "--partition", "t4"], ["k", "t4", "-p", "t4"]])
def test_k_takes_the_partition_by_position_or_option(site_config: Path, args: list[str]) -> None:
    res = CliRunner().invoke(admin, args)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("t4: k ")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["k"], "Error: give the partition: slurm-yolo k PARTITION (or -p PARTITION)"),
        (["k", "t4", "-p", "a100"], "Error: two partitions given (t4 and -p a100): give one"),
        (["k", "nosuch"], "Error: partition 'nosuch' is neither configured nor calibrated (configured: a100, t4)"),
    ],
)
def test_k_without_one_partition_is_one_error_line(site_config: Path, args: list[str], error: str) -> None:
    res = CliRunner().invoke(admin, args)
    assert res.exit_code != 0 and res.output.strip() == error, res.output


def test_price_show_has_a_line_for_each_partition(site_config: Path) -> None:
    """A partition without a price of its own bills at the default: `price show` says so, with the
    line that sets one, instead of the default alone."""
    res = CliRunner().invoke(admin, ["ledger", "price", "show"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for name in ("a100", "t4"):
        assert (
            f"{name}: 1,000,000 tokens per GPU-second, the default (no price set:"
            f" slurm-yolo ledger price set {name} TOKENS_PER_GPU_SECOND)"
        ) in lines, lines


def test_metrics_without_a_textfile_folder_prints_them(site_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_yolo.admin.report import metrics

    monkeypatch.setattr(metrics, "text", lambda config: "# HELP slurm_yolo_k_seconds_per_mpx k\n")
    res = CliRunner().invoke(admin, ["metrics"])
    assert res.exit_code == 0, res.output
    assert res.output == "# HELP slurm_yolo_k_seconds_per_mpx k\n"
