"""Durations and instants, the one grammar of them: what users type and what Slurm prints (pure,
import-light).

Users (``--deadline``, ``--wait-timeout``, ``watch --timeout``) write units, ``90s``, ``15m``, ``2h``,
``1d``, ``1h30m``, ``1.5h`` (d, h, m, s in that order, each at most once), or anything sbatch's
``--time`` takes, with its meaning: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS`` (a bare number is minutes; ``5:30`` is five minutes thirty). Slurm prints the clock
forms (squeue's TimeLimit, TimeLeft and TimeUsed, sacct's Elapsed and Timelimit) and ``UNLIMITED``
or ``INFINITE`` for no limit. Only ASCII digits count (no Arabic-Indic or fullwidth ones).

Instants (``instant``): ``now``, sacct's ``now[+-N[unit]]``, or a local ISO date and time
(``2026-12-01T00:00``), for report windows, audits and prices that take effect later.
"""

from __future__ import annotations

import re

from slurm_yolo.core.errors import UsageError

YEAR = 366 * 86400
UNLIMITED = frozenset({"UNLIMITED", "INFINITE"})
_MAX_CHARS = 40  # longer than any duration worth writing: refused before any arithmetic
_NUM = r"([0-9]{1,15}(?:\.[0-9]{1,9})?)"
_UNITS = re.compile(rf"(?:{_NUM}d)?(?:{_NUM}h)?(?:{_NUM}m)?(?:{_NUM}s)?", re.IGNORECASE)
_CLOCK = re.compile(r"(?:([0-9]{1,15})-)?([0-9]{1,15})(?::([0-9]{1,15}))?(?::([0-9]{1,15}))?")
_UNIT_SECONDS = (86400, 3600, 60, 1)


def _clock(text: str) -> int | None:
    """Slurm's ``[D-]HH:MM:SS`` family as seconds, with sbatch's reading of the shorter forms."""
    m = _CLOCK.fullmatch(text)
    if not m:
        return None
    days, *fields = m.groups()
    parts = [int(p) for p in fields if p is not None]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, mi, s = [*parts, 0, 0][:3]
        return int(days) * 86400 + h * 3600 + mi * 60 + s
    if len(parts) == 1:  # MM
        return parts[0] * 60
    h, mi, s = [0, *parts][-3:]  # MM:SS, HH:MM:SS
    return h * 3600 + mi * 60 + s


def slurm(text: str) -> int | None:
    """A duration as Slurm prints it, in whole seconds; None for UNLIMITED or INFINITE. ValueError for
    anything else (an empty field included: the caller decides what a missing value means)."""
    t = text.strip()
    if t in UNLIMITED:
        return None
    seconds = _clock(t) if len(t) <= _MAX_CHARS else None
    if seconds is None:
        raise ValueError(f"not a duration: {text[:30]!r}")
    return seconds


def parse(text: str) -> float:
    """A duration a user typed, in seconds: at least one second and at most a year. ``UsageError``
    (one line, naming the value) for anything else."""
    t = text.strip()
    seconds: float | None = None
    if 0 < len(t) <= _MAX_CHARS:
        m = _UNITS.fullmatch(t)
        if m and any(m.groups()):
            seconds = sum(float(g) * unit for g, unit in zip(m.groups(), _UNIT_SECONDS, strict=True) if g)
        else:
            seconds = _clock(t)
    if seconds is None:
        raise UsageError(f"duration {text[:30]!r} not understood (use 90m, 2h, 1h30m, 1d or [D-]HH:MM:SS)")
    if not 1 <= seconds <= YEAR:
        raise UsageError(f"duration {text[:30]!r} must be between 1 second and a year")
    return seconds


def seconds_text(seconds: float) -> str:
    """A duration as people say it in an error line: ``45 s`` under a minute, else whole minutes."""
    return f"{seconds:.0f} s" if seconds < 59.5 else f"{seconds / 60:.0f} min"


def fmt_duration(seconds: float) -> str:
    """A prediction as people read it: ``40 s``, ``25 min``, ``3.2 h``, ``4.1 days``."""
    if round(seconds) < 60:
        return f"{round(seconds)} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} days"


def fmt_minutes(seconds: float) -> str:
    """``12.5 min``, or ``40 s`` under a minute: a short run's time is never shown as ``0.0 min``."""
    return f"{round(seconds)} s" if round(seconds) < 60 else f"{seconds / 60:.1f} min"


_RELATIVE = re.compile(
    r"^now(?:([+-])(\d+)(s|sec|secs|seconds?|min|mins|minutes?|hours?|days?|weeks?)?)?$", re.IGNORECASE
)
_RELATIVE_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def instant(text: str, now: float) -> float | None:
    """Epoch seconds of ``now``, ``now-7days`` (sacct's form: s, min, hours, days, weeks) or a local ISO
    date and time; None for anything else (the caller says what it takes)."""
    from datetime import datetime

    if len(text) > _MAX_CHARS:
        return None
    m = _RELATIVE.match(text.strip())
    if m:
        sign, count, unit = m.groups()
        seconds = int(count or 0) * _RELATIVE_UNIT[(unit or "s")[0].lower()]
        return now + seconds if sign == "+" else now - seconds
    try:
        return datetime.fromisoformat(text.strip()).timestamp()  # local, as sacct's times are
    except ValueError:
        return None
