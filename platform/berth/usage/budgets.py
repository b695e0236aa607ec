"""Which budget of ``gateway.yaml`` a tenant, project or user has used up, and what to tell them.

A budget is used up when what its scope spent in the current UTC period is at or over its limit: a turn
does not start then (429 ``budget_exceeded``), and a running turn ends after the round that reached it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from berth.config.models.gateway import Budget
from berth.runtime.blocks import format_utc
from berth.runtime.metering import BudgetBreach
from berth.storage.scope import OwnerScope
from berth.usage.periods import Window, seconds_until, window_of
from berth.usage.totals import SpendTotals

__all__ = ["ExhaustedBudget", "exhausted_budget"]


@dataclass(frozen=True, slots=True)
class ExhaustedBudget:
    """A budget a scope has used up: which one, by which measure, how much, and when it resets."""

    budget: Budget
    user_id: str | None
    """The user whose own budget it is (a ``per_user`` budget), else None."""
    metric: Literal["tokens", "cost_usd"]
    limit: int | float
    used: int | float
    window: Window
    now: datetime

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the budget resets (at least 1)."""
        return seconds_until(self.window.end, self.now)

    @property
    def resets_at(self) -> str:
        """When the budget resets, ISO 8601 UTC (``2025-07-01T00:00:00Z``)."""
        return format_utc(self.window.end)

    def details(self) -> dict[str, object]:
        """The error's ``details``: the budget (scope, period, limit) and where the caller stands."""
        details: dict[str, object] = {
            "scope": self.budget.scope,
            "per_user": self.budget.per_user,
            "period": self.budget.period,
            "metric": self.metric,
            "limit": self.limit,
            "used": self.used,
            "resets_at": self.resets_at,
            "retry_after_s": self.retry_after_s,
        }
        if self.user_id is not None:
            details["user_id"] = self.user_id
        return details

    def message(self, *, during_turn: bool) -> str:
        """What happened and when it may go on (no secrets: scope names, numbers and times only)."""
        spender = f"user {self.user_id}" if self.user_id is not None else self.budget.scope
        used = f"{self.used:,} tokens" if self.metric == "tokens" else f"${self.used:,.4f}"
        reset = f"{self.resets_at} (in {_duration(self.retry_after_s)})"
        then = (
            f"the turn stopped after the round that reached it; the budget resets at {reset}"
            if during_turn
            else f"new turns may start when it resets at {reset}"
        )
        standing = f"{spender} has used {used} this {self.budget.period}"
        return f"budget exceeded: {self.budget.describe()}, and {standing}; {then}"

    def breach(self, *, during_turn: bool) -> BudgetBreach:
        """The :class:`~berth.runtime.metering.BudgetBreach` a turn's meter reports."""
        return BudgetBreach(self.message(during_turn=during_turn), self.details())


def exhausted_budget(
    budgets: Sequence[Budget], totals: SpendTotals, scope: OwnerScope, now: datetime
) -> ExhaustedBudget | None:
    """The budget of ``scope``'s tenant, project or user that is used up at ``now``, if any.

    Of several, the one that resets last: until then the scope may not spend, whatever resets first.
    """
    found: ExhaustedBudget | None = None
    for budget in budgets:
        if not budget.applies_to(scope.tenant, scope.project):
            continue
        user_id = scope.user_id if budget.per_user else None
        spent = totals.spent(budget.period, (scope.tenant, budget.project, user_id), now)
        if budget.tokens is not None and spent.tokens >= budget.tokens:
            metric: Literal["tokens", "cost_usd"] = "tokens"
            limit: int | float = budget.tokens
            used: int | float = spent.tokens
        elif budget.cost_usd is not None and spent.cost_usd >= budget.cost_usd:
            metric, limit, used = "cost_usd", budget.cost_usd, round(spent.cost_usd, 6)
        else:
            continue
        window = window_of(budget.period, now)
        if found is None or window.end > found.window.end:
            found = ExhaustedBudget(budget, user_id, metric, limit, used, window, now)
    return found


def _duration(seconds: int) -> str:
    """``3 h 12 min``, ``12 min``, ``40 s``: roughly how long until a reset."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24} days"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{secs} s"
