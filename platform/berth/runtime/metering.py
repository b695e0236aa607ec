"""The seam between a running turn and whoever accounts for what it spends (usage records, budgets).

The loop reports every model call it makes — each round's call, compaction's summaries — to the
turn's :class:`TurnMeter` as a :class:`ModelCall`, and after every round asks the meter whether a
budget has been crossed; a crossed budget ends the turn after that round with ``turn.failed {code:
budget_exceeded}``. The host's meter (``berth.usage``) records the calls and holds the budgets; the
runtime knows neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from berth.models.protocol import Usage

__all__ = ["BudgetBreach", "CallPurpose", "ModelCall", "TurnMeter"]

CallPurpose: TypeAlias = Literal["round", "compaction", "title"]
"""Why a model was called: a round of the loop, a compaction summary, a conversation's title."""


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call: which model (``provider:model``), why, what the provider reported it used, when."""

    model: str
    purpose: CallPurpose
    usage: Usage
    at: datetime


@dataclass(frozen=True, slots=True)
class BudgetBreach:
    """A budget a turn crossed: its code is ``budget_exceeded``; the message says which budget and when it resets."""

    message: str
    details: dict[str, object]


class TurnMeter(Protocol):
    """Accounts for one turn's model calls."""

    def model_called(self, call: ModelCall) -> None:
        """Take one model call into account (called once per call, in order, right after it completed)."""
        ...

    def cost_usd(self) -> float | None:
        """What the turn's calls cost so far by the price table, or None when a model it used has no price."""
        ...

    def breach(self) -> BudgetBreach | None:
        """The budget this turn's spending has crossed so far, if any (asked after every round)."""
        ...
