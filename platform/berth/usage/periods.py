"""UTC calendar periods: the day or month a moment falls in, and how long until it ends.

Budgets count per period: a day starts at 00:00 UTC, a month at 00:00 UTC on its first day, whatever the
time zone of the users or the host. A period's end is the next one's start (a budget resets there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from berth.config.models.gateway import BudgetPeriod

__all__ = ["PERIODS", "Window", "seconds_until", "window_of"]

PERIODS: tuple[BudgetPeriod, ...] = ("day", "month")


@dataclass(frozen=True, slots=True)
class Window:
    """One UTC day or month: ``[start, end)``."""

    period: BudgetPeriod
    start: datetime
    end: datetime

    def contains(self, at: datetime) -> bool:
        """True when ``at`` falls in this window."""
        return self.start <= at < self.end


def window_of(period: BudgetPeriod, at: datetime) -> Window:
    """The UTC day or month ``at`` falls in (a naive ``at`` is taken as UTC).

    :raises OverflowError: for a moment in the last day or month of year 9999 (its end has no ``datetime``).
    """
    utc = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if period == "day":
        start = datetime(utc.year, utc.month, utc.day, tzinfo=UTC)
        return Window(period, start, start + timedelta(days=1))
    start = datetime(utc.year, utc.month, 1, tzinfo=UTC)
    try:
        end = datetime(utc.year + utc.month // 12, utc.month % 12 + 1, 1, tzinfo=UTC)
    except ValueError:  # year 10000
        raise OverflowError("the month after December 9999 has no datetime") from None
    return Window(period, start, end)


def seconds_until(end: datetime, now: datetime) -> int:
    """Whole seconds from ``now`` to ``end``, rounded up and at least 1 (a ``Retry-After`` value)."""
    return max(math.ceil((end - now).total_seconds()), 1)
