"""One duration grammar for users and for Slurm: forms, hostile values, and properties."""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import durations
from slurm_yolo.core.errors import UsageError
from slurm_yolo.slurm import parsers, records
from slurm_yolo.state import ledger

DAY = 86400


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1d", DAY),
        ("1h30m", 5400),
        ("1d2h3m4s", DAY + 7384),
        ("1.5h", 5400),
        ("0.5m", 30),
        ("2H", 7200),
        (" 45m\n", 2700),
        ("7d", 7 * DAY),
        # sbatch --time's forms, with its meaning: a bare number is minutes, MM:SS, D-HH[:MM[:SS]]
        ("90", 5400),
        ("5:30", 330),
        ("01:02:03", 3723),
        ("1-12", DAY + 12 * 3600),
        ("1-12:30", DAY + 45000),
        ("1-02:03:04", 93784),
        ("366-00:00:00", 366 * DAY),
        ("1s", 1),
    ],
)
def test_user_forms(text: str, seconds: float) -> None:
    assert durations.parse(text) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:05:00", 300),
        ("1-02:03:04", 93784),
        ("4:59", 299),
        ("10", 600),
        ("0", 0),
        ("2-00:00:00", 2 * DAY),
        ("1-12", DAY + 12 * 3600),
        ("UNLIMITED", None),
        ("INFINITE", None),
        (" 00:00:07 ", 7),
    ],
)
def test_slurm_forms(text: str, seconds: int | None) -> None:
    assert durations.slurm(text) == seconds


HOSTILE = [
    "",
    " ",
    "soon",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "infinity",
    "-5m",
    "-1",
    "-1-00:00:00",
    "0",
    "0s",
    "0:00",
    "0.5s",
    "1e3",
    "1e3s",
    "9999d",
    "367d",
    "367-00:00:00",
    "9" * 20 + "d",
    "1" * 5000,
    "1" * 41 + "s",
    "٣h",
    "١٠",
    "１０m",
    "1h\n30m",
    "1h 30m",
    "1m30h",
    "1h1h",
    "1:2:3:4",
    "1-",
    "-",
    ":",
    "1:",
    ":30",
    "1.5",
    ".5h",
    "1.h",
    "1-2-3",
    "UNLIMITED",
    "INFINITE",
    "INVALID",
    "N/A",
    "2h; rm -rf /",
    "$(id)",
    "2h\x00",
    "h",
    "d",
    "ms",
    "1ms",
    "1w",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_user_values_refused_with_one_line(text: str) -> None:
    with pytest.raises(UsageError) as e:
        durations.parse(text)
    message = str(e.value)
    assert message.startswith("duration ") and "\n" not in message and len(message) < 140


@pytest.mark.parametrize(
    "text",
    ["", "soon", "INVALID", "N/A", "Partition_Limit", "1:2:3:4", "١٠", "１０", "9" * 5000, "-5", "1.5", "1h", "nan"],
)
def test_slurm_unreadable_is_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        durations.slurm(text)
    assert parsers.duration(text) is None  # the lenient reader: None, never an exception


def test_records_keep_their_field_meanings() -> None:
    assert records.duration("365-00:00:00") == 365 * DAY  # held as the year it may run, never as no limit
    assert records.duration("UNLIMITED") is None
    assert records.duration("1-00:00:00") == DAY
    with pytest.raises(ValueError):
        records.duration("")


@given(st.text(max_size=60))
def test_any_text_is_a_bounded_duration_or_one_usage_error(text: str) -> None:
    try:
        seconds = durations.parse(text)
    except UsageError as e:
        assert "\n" not in str(e)
    else:
        assert math.isfinite(seconds) and 1 <= seconds <= durations.YEAR


@given(st.text(max_size=60))
def test_any_text_is_a_slurm_duration_or_value_error(text: str) -> None:
    try:
        seconds = durations.slurm(text)
    except ValueError:
        return
    assert seconds is None or (isinstance(seconds, int) and seconds >= 0)


@given(st.integers(min_value=0, max_value=10**6 * DAY))
def test_slurm_round_trip(seconds: int) -> None:
    d, rest = divmod(seconds, DAY)
    text = (
        f"{d}-{rest // 3600:02}:{rest % 3600 // 60:02}:{rest % 60:02}"
        if d
        else f"{rest // 3600:02}:{rest % 3600 // 60:02}:{rest % 60:02}"
    )
    assert durations.slurm(text) == seconds
    if 1 <= seconds <= durations.YEAR:
        assert durations.parse(text) == seconds  # what Slurm prints, a user may type back


@given(st.integers(0, 400), st.integers(0, 48), st.integers(0, 120), st.integers(0, 120))
def test_units_add_up(d: int, h: int, m: int, s: int) -> None:
    text = f"{d}d{h}h{m}m{s}s"
    total = d * DAY + h * 3600 + m * 60 + s
    if 1 <= total <= durations.YEAR:
        assert durations.parse(text) == total
    else:
        with pytest.raises(UsageError, match="between 1 second and a year"):
            durations.parse(text)


@pytest.mark.parametrize("value", ["nan", "inf", "-5m", "", "9" * 400, "٣h", "1h\n2h", "0"])
def test_commands_refuse_bad_durations_with_one_error_line(value: str, dataset: Path) -> None:
    runs = [
        (yolo_sbatch, ["--dry-run", "-p", "a100", "--deadline", value, "train", f"data={dataset}"]),
        (yolo_sbatch, ["--dry-run", "-p", "a100", "--wait", "--wait-timeout", value, "train", f"data={dataset}"]),
        (admin, ["watch", "1", "--timeout", value]),
    ]
    for cli, args in runs:
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 1, (args, res.output)
        assert res.output.startswith("Error: duration ") and len(res.output.strip().splitlines()) == 1, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("now", 1_000_000.0),
        ("NOW", 1_000_000.0),
        ("now-7days", 1_000_000.0 - 7 * 86400),
        ("now-2hours", 1_000_000.0 - 7200),
        ("now+30min", 1_000_000.0 + 1800),
        ("now-1week", 1_000_000.0 - 604800),
        ("2026-11-01T10:00:00", datetime(2026, 11, 1, 10).timestamp()),
        ("midnight", None),
        ("now-7fortnights", None),
        ("tomorrow", None),
        ("now-" + "9" * 60, None),
    ],
)
def test_an_instant_has_one_grammar_for_reports_audits_and_prices(text: str, want: float | None) -> None:
    assert durations.instant(text, 1_000_000.0) == want


def test_a_price_time_is_an_instant_or_one_error() -> None:
    assert abs(ledger.parse_when("now-1days") - (time.time() - 86400)) < 5
    with pytest.raises(UsageError, match="not understood"):
        ledger.parse_when("next tuesday")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(40, "40 s"), (59.6, "1 min"), (1500, "25 min"), (11520, "3.2 h"), (354240, "4.1 days")],
)
def test_a_prediction_reads_in_the_unit_people_use(seconds: float, text: str) -> None:
    assert durations.fmt_duration(seconds) == text
