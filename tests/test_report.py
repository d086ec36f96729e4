"""Reports from sacct rows, on output recorded from each supported release (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo import report
from slurm_yolo.cli.admin import main as admin

REC = Path(__file__).parent / "recorded"
# The delimiter the recordings were made with (``sacct -p --delimiter``; a live report draws its own).
DELIMITER = "<0f1e2d3c4b5a69788796a5b4c3d2e1f0>"
# Jobs alice named ``yo|lo`` and ``yo<newline>lo``; the first one's comment holds a forged ``|`` line.
ODD = {"22.05": (1825, 1826), "24.11": (448, 449)}


@pytest.mark.parametrize("release", sorted(ODD))
def test_recorded_rows_survive_any_text(release: str) -> None:
    rows = report.read_saved((REC / release / "sacct_report.txt").read_text(), DELIMITER)
    df = report.parse_jobs(rows, {"t4": 4})
    pipe, newline = ODD[release]
    assert 999 not in set(df["job_id"])  # the comment's forged line is the comment's
    odd = df[df["job_id"].isin(ODD[release])].set_index("job_id")
    assert list(odd.index) == [pipe, newline] and set(odd["User"]) == {"alice"} and set(odd["state"]) == {"COMPLETED"}
    assert odd.loc[pipe, "pred_s"] == 7 and odd.loc[newline, "pred_s"] == 3
    assert odd.loc[pipe, "gpus"] == 1 and odd.loc[newline, "gpus"] == 0.5  # two of a GPU's four shards
    assert odd.loc[pipe, "Comment"].endswith("\n999|vision|alice|t4|normal|COMPLETED|")
    assert (df["charge"] > 0).all() and (df["WorkDir"].str.startswith("/")).all()


def test_saved_with_pipes_a_record_holding_one_is_dropped_not_shifted() -> None:
    text = (REC / "22.05" / "sacct_report.txt").read_text().replace(DELIMITER, "|")
    df = report.parse_jobs(report.read_saved(text))
    assert 1826 in set(df["job_id"]) and 1820 in set(df["job_id"])
    assert set(df["Account"]) <= {"research", "vision"} and set(df["state"]) <= {"COMPLETED", "FAILED"}


def test_report_reads_a_saved_file_with_its_delimiter(tmp_path: Path) -> None:
    saved = tmp_path / "sacct.txt"
    saved.write_text((REC / "24.11" / "sacct_report.txt").read_text())
    res = CliRunner().invoke(admin, ["report", "--csv", "--view", "failures", "--sacct-file", str(saved), "--delimiter", DELIMITER])
    assert res.exit_code == 0, res.output
    assert res.output == "# failures\nPartition,state,runs\nt4,COMPLETED,3\n"


def test_the_saved_file_help_names_the_fields() -> None:
    res = CliRunner().invoke(admin, ["report", "--help"], terminal_width=1000)
    assert f"-o {','.join(report.FIELDS)}`" in " ".join(res.output.split())
