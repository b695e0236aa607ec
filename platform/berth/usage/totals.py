"""Running totals of what each tenant, project and user spent in the current UTC day and month.

Budgets are checked against these, in memory, before every turn and after every round: no database round
trip. They start from the stored usage of the current month (:meth:`SpendTotals.add_stored`, as the host
starts) and take each model call as it completes (:meth:`SpendTotals.add`), so every turn of the process sees
what the others spent at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from berth.config.models.gateway import BudgetPeriod
from berth.storage.usage import SpentRow
from berth.usage.periods import PERIODS, Window, window_of

__all__ = ["SpendKey", "SpendTotals", "Spent"]

SpendKey = tuple[str, str | None, str | None]
"""``(tenant, project, user_id)``; a None project or user sums every project or user."""


@dataclass(slots=True)
class Spent:
    """Tokens (input + output + cache read + cache write) and priced cost in USD."""

    tokens: int = 0
    cost_usd: float = 0.0


class SpendTotals:
    """What each tenant — and each of its projects, users and users of a project — spent this day and month.

    One window per period is kept: a call of a later window starts it afresh (the period reset), a call of an
    earlier one (a turn that began before midnight) no longer counts against a budget.
    """

    def __init__(self) -> None:
        self._windows: dict[BudgetPeriod, tuple[Window, dict[SpendKey, Spent]]] = {}

    def add(self, tenant: str, project: str, user_id: str, at: datetime, tokens: int, cost_usd: float | None) -> None:
        """Count one call's tokens and cost (None: unpriced, it costs nothing here) at ``at``."""
        keys: tuple[SpendKey, ...] = (
            (tenant, None, None),
            (tenant, project, None),
            (tenant, None, user_id),
            (tenant, project, user_id),
        )
        for period in PERIODS:
            current = self._windows.get(period)
            if current is None or not current[0].contains(at):
                window = window_of(period, at)
                if current is not None and window.start < current[0].start:
                    continue
                current = (window, {})
                self._windows[period] = current
            spent_in = current[1]
            for key in keys:
                spent = spent_in.get(key)
                if spent is None:
                    spent = spent_in[key] = Spent()
                spent.tokens += tokens
                if cost_usd is not None:
                    spent.cost_usd += cost_usd

    def add_stored(self, rows: Iterable[SpentRow]) -> None:
        """Count what the store holds (a user's spending of one UTC day per row)."""
        for row in rows:
            day = datetime.fromisoformat(row.day).replace(tzinfo=UTC)
            self.add(row.tenant, row.project, row.user_id, day, row.tokens, row.cost_usd)

    def spent(self, period: BudgetPeriod, key: SpendKey, now: datetime) -> Spent:
        """What ``key`` spent in the ``period`` that ``now`` falls in (nothing when no call fell in it yet)."""
        current = self._windows.get(period)
        if current is None or not current[0].contains(now):
            return Spent()
        return current[1].get(key) or Spent()
