"""The settler's pure parts (its cluster behaviour is in the money path's cluster tests)."""

from __future__ import annotations

import pytest

from slurm_yolo.controller import settler


@pytest.mark.parametrize(
    ("timeout", "grace"),
    [("30 sec", 120.0), ("120 sec", 300.0), ("", 300.0), ("(null)", 300.0)],
)
def test_a_swept_run_waits_out_a_controllers_takeover(timeout: str, grace: float) -> None:
    """A backup controller takes over within SlurmctldTimeout and may end the run again: twice that
    and a minute (Slurm's default 120 s when it does not say)."""
    assert settler.orphan_grace(timeout) == grace
