"""Why a pending job waits: squeue's Reason in words in ``watch`` and ``yolo-sbatch --wait``, with
the expected start, and no stale ETA for a job requeued with epochs done."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.login import progress
from slurm_yolo.slurm import commands, reasons


def _squeue(tmp_path: Path, line: str) -> Path:
    """A squeue that prints ``line`` (what the real one prints for ``-o "%A %S %r"``)."""
    exe = tmp_path / "squeue"
    exe.write_text(f"#!/bin/sh\nprintf '%s\\n' '{line}'\n")
    exe.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("42 N/A Resources", commands.Pending("Resources", None)),
        ("42 1796000000 BeginTime", commands.Pending("BeginTime", 1796000000.0)),
        ("42 N/A launch failed requeued held", commands.Pending("launch failed requeued held", None)),
        ("42 N/A", commands.Pending("", None)),
        ("43 N/A Priority", commands.Pending("", None)),  # another job's line is no answer
    ],
)
def test_squeue_s_reason_and_start_are_read_in_one_call(tmp_path: Path, line: str, want: commands.Pending) -> None:
    assert commands.pending(42, bin_dir=_squeue(tmp_path, line)) == want


def test_a_pending_line_says_why_and_when_in_words() -> None:
    line = progress.render("PENDING", None, reason="Resources")
    assert line == "PENDING: waits (Resources: every GPU it may use is busy: it starts when one frees up)"
    credits = progress.render("PENDING", None, starts=1796000000.0, reason="BeginTime")
    assert credits.startswith("PENDING: waits (BeginTime: its begin time has not come (a job waiting for its")
    assert "; expected to start 20" in credits
    assert progress.render("PENDING", None, reason="SomethingNew") == "PENDING: waits (SomethingNew)"
    assert progress.render("PENDING", None) == "PENDING: waiting for the first epoch"


def test_a_requeued_job_shows_the_epochs_it_did_not_a_stale_eta() -> None:
    p = progress.Progress(epoch=3, epochs=10, pixels_done=3e6, pixels_total=10e6, mpx_per_s=1.0, eta_seconds=420)
    line = progress.render("PENDING", p, reason="Priority")
    assert (
        line
        == "PENDING: waits (Priority: jobs of higher priority come first (fairshare, QOS tier, age)); 3/10 epochs done before"
    )
    assert "ETA" not in line and "ETA 7:00" in progress.render("RUNNING", p)


def test_every_reason_in_words_is_in_the_users_doc() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "users.md").read_text()
    missing = [r for r in reasons.REASONS if f"`{r}`" not in doc]
    assert not missing, f"docs/users.md does not list {missing}"
