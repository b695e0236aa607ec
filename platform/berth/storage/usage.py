"""Usage records: one row per model call, and the totals the usage report and the budgets read back."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

from berth.storage.scope import ConversationScope

__all__ = ["ERASED_PREFIX", "SpentRow", "UsageGrouping", "UsageRecord", "UsageTotals", "erased_conversation_id"]

ERASED_PREFIX = "erased-"
"""How the conversation id of a deleted conversation's usage records begins."""


def erased_conversation_id() -> str:
    """An anonymous conversation id for the usage records of a deleted conversation: random, so it links them to
    nothing, and one per deletion, so the calls of two deleted conversations still count as distinct turns."""
    return ERASED_PREFIX + secrets.token_hex(8)


UsageGrouping: TypeAlias = Literal["user", "bundle", "day", "model"]
"""How usage totals are grouped: by user (API key), bundle, UTC day (``YYYY-MM-DD``) or model label."""


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One model call a turn (or a conversation's title) made, as stored.

    ``cost_usd`` is None when the price table has no price for ``model``: its cost is unknown, not zero.
    """

    scope: ConversationScope
    turn_id: str
    bundle: str
    model: str
    purpose: str
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cost_usd: float | None
    at: datetime

    @property
    def tokens(self) -> int:
        """Every token of the call: input + output + cache read + cache write (what token budgets count)."""
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """The calls of one group (or of a whole period, ``key`` None) summed up.

    ``cost_usd`` sums the calls that have a price and is None when none has; ``unpriced_calls`` counts the
    calls whose model has no price (their cost is not in ``cost_usd``).
    """

    key: str | None
    calls: int
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cost_usd: float | None
    unpriced_calls: int

    @property
    def total_tokens(self) -> int:
        """Input + output + cache read + cache write tokens."""
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True, slots=True)
class SpentRow:
    """What one user spent in one tenant/project on one UTC day (``YYYY-MM-DD``): what budgets start from."""

    tenant: str
    project: str
    user_id: str
    day: str
    tokens: int
    cost_usd: float
