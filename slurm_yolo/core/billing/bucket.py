"""Token-bucket refills and charge amounts (pure functions; the ledger applies them)."""

from __future__ import annotations

import math

DAY = 86400.0


def refill(balance: int, capacity: int, rate_per_day: int, last: float, now: float) -> tuple[int, float]:
    """Tokens to add since ``last`` at ``rate_per_day``, never lifting the balance above ``capacity``;
    and the new refill mark (it only advances by what was credited, so no fraction is lost)."""
    if rate_per_day <= 0 or now <= last:
        return 0, max(last, now) if rate_per_day <= 0 else last
    earned = int((now - last) / DAY * rate_per_day)
    room = max(0, capacity - balance)
    if room == 0:
        return 0, now  # full: time spent full earns nothing
    if earned <= 0:
        return 0, last
    add = min(earned, room)
    mark = now if add < earned else last + add / rate_per_day * DAY
    return add, mark


def seconds_until(tokens: int, rate_per_day: int) -> float | None:
    """How long the bucket takes to earn ``tokens`` (None: it never refills)."""
    if tokens <= 0:
        return 0.0
    if rate_per_day <= 0:
        return None
    return math.ceil(tokens / rate_per_day * DAY)


COVER_MARGIN_SECONDS = 2  # a begin time is whole seconds from a clock read as whole seconds (Lua's os.time)


def seconds_to_cover(total: int, balance: int, capacity: int, rate_per_day: int) -> float | None:
    """How long until the bucket's refill lifts ``balance`` to ``total`` (0: it covers it now; None:
    never, since refills stop at ``capacity``). Counted from now, not from the last refill mark, with
    ``COVER_MARGIN_SECONDS`` more: a begin time set from a clock truncated to the second could fall up
    to a second before the refill (CI caught a hold 1,286 tokens short at its begin time)."""
    if total <= balance:
        return 0.0
    if total > capacity:
        return None
    wait = seconds_until(total - balance, rate_per_day)
    return None if wait is None else wait + COVER_MARGIN_SECONDS
