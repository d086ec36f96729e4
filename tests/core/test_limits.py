"""The time limit near its end: the USR2 lead, and the limit a run requeued for time comes back with."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_yolo.core import limits
from slurm_yolo.slurm import parsers

REC = Path(__file__).parents[1] / "recorded"


@pytest.mark.parametrize(("limit", "lead"), [(120, 0), (179, 0), (180, 90), (200, 100), (600, 120), (86400, 120)])
def test_the_usr2_lead_is_at_most_half_the_limit_and_none_under_three_minutes(limit: int, lead: int) -> None:
    assert limits.usr2_lead(limit, 120) == lead


def test_a_site_that_asks_no_usr2_gets_none_and_no_run_of_it_is_requeued_for_time() -> None:
    """``job.signal_seconds = 0``: a site whose OverTimeLimit lets runs finish past their limit."""
    assert [limits.usr2_lead(limit, 0) for limit in (120, 180, 3600)] == [0, 0, 0]
    assert not limits.requeued_for_time(3600, 3599, 0)


def test_a_requeue_for_time_is_one_inside_the_lead_or_a_minute_before_it() -> None:
    """Slurm may send the USR2 up to 60 s early (sbatch(1)): measured here, 70 s into a 3-minute job
    whose lead is 90 s."""
    assert limits.requeued_for_time(600, 420, 120) and limits.requeued_for_time(600, 600, 120)
    assert limits.requeued_for_time(180, 70, 120)
    assert not limits.requeued_for_time(600, 419, 120)  # a preemption, the watchdog's or an admin's requeue
    assert not limits.requeued_for_time(None, 10**6, 120) and not limits.requeued_for_time(120, 119, 120)


def test_the_next_limit_lets_the_rest_finish_before_its_usr2() -> None:
    """A 3-minute job that trained 10 of 150 epochs in 100 s of its 170: start-up 70 s, 141 epochs left
    at 10 s (the final validation as one), a 20% buffer: 1,776 s of work; the smallest whole-minute
    limit whose USR2 (120 s before it, or up to 60 s earlier) comes after that is 1,980 s (33 min)."""
    need = (70 + 141 * 10) * 1.2
    got = limits.next_limit(180, 170, 100.0, 10, 150, 120, 0.2)
    assert got == 1980 and got % 60 == 0
    assert got - limits.usr2_lead(got, 120) - 60 >= need > got - 60 - limits.usr2_lead(got - 60, 120) - 60


def test_the_next_limit_is_never_beyond_a_year() -> None:
    """A hostile helper's summaries: 10**12 epochs left at 10**12 s each asked 2 x 10**10 min, which
    Slurm stored as 60 years (squeue: INVALID); 5 x 10**29 epochs hung the loop at float precision."""
    assert limits.next_limit(180, 100, 999_999_999_999.0, 1, 999_999_999_999, 120, 0.2) == 365 * 86400
    assert limits.next_limit(180, 100, 20.0, 10, 5 * 10**29, 120, 0.2) == 365 * 86400


def test_the_next_limit_is_never_below_the_present_one() -> None:
    assert limits.next_limit(3600, 3500, 3000.0, 99, 100, 120, 0.2) == 3600  # one epoch left
    assert limits.next_limit(600, 590, 0.0, 0, 100, 120, 0.2) == 600  # no progress measured
    assert limits.next_limit(600, 590, math.nan, 5, 100, 120, 0.2) == 600


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_a_partitions_time_limit_from_sinfo(release: str) -> None:
    assert parsers.partition_time_limit((REC / release / "sinfo_time_limit.txt").read_text()) is None  # infinite
    assert parsers.partition_time_limit("30:00\n") == 1800  # sinfo's MM:SS
    assert parsers.partition_time_limit("1-00:00:00\n") == 86400
    for bad in ("", "30:00\n1:00:00\n", "soon\n"):
        with pytest.raises(ValueError):
            parsers.partition_time_limit(bad)
