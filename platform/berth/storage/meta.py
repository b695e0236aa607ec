"""Conversation metadata, feedback and usage records: what the API lists and shows besides the timeline itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from berth.storage.scope import ConversationScope, OwnerScope
from berth.storage.usage import SpentRow, UsageGrouping, UsageRecord, UsageTotals

Reaction: TypeAlias = Literal["ok", "not_ok", "neutral"]
TitleSource: TypeAlias = Literal["user", "summary", "message"]


@dataclass(frozen=True, slots=True)
class ConversationMeta:
    """A conversation as the API lists it."""

    scope: ConversationScope
    title: str | None
    bundle: str | None
    created_at: datetime
    updated_at: datetime
    title_source: TitleSource | None = None
    """Who set the title: the user, the summarizer after the first turn, or the first message (provisional)."""


@dataclass(frozen=True, slots=True)
class Feedback:
    """Feedback on one turn: from the user, or from a bundle (``origin='machine'``)."""

    scope: ConversationScope
    turn_id: str
    reaction: Reaction
    text: str
    origin: Literal["user", "machine"]
    created_at: datetime


class MetaStore(Protocol):
    """Conversation index rows, feedback and usage records, scoped like everything else."""

    async def open(self) -> None:
        """Create or migrate the schema."""
        ...

    async def aclose(self) -> None:
        """Release the connection."""
        ...

    async def create_conversation(self, meta: ConversationMeta) -> None:
        """Record a new conversation (its id must be new for this owner)."""
        ...

    async def get_conversation(self, scope: ConversationScope) -> ConversationMeta | None:
        """The conversation, or None when it does not exist in this scope."""
        ...

    async def touch_conversation(self, scope: ConversationScope, *, at: datetime, title: str | None = None) -> None:
        """Mark activity (and set ``title`` as a provisional title when the conversation has none)."""
        ...

    async def set_title(self, scope: ConversationScope, title: str, *, source: TitleSource) -> bool:
        """Set the title; a ``summary`` never replaces the user's own. Return whether it was set."""
        ...

    async def list_conversations(
        self, owner: OwnerScope, *, limit: int, before: datetime | None = None
    ) -> list[ConversationMeta]:
        """The owner's conversations, most recently active first, older than ``before``."""
        ...

    async def inactive_conversations(
        self, tenant: str, project: str, *, before: datetime, limit: int
    ) -> list[ConversationScope]:
        """Up to ``limit`` conversations of one tenant/project (every user's) whose last activity is older than
        ``before``, least recent first (what a retention sweep deletes)."""
        ...

    async def erase_conversation(self, scope: ConversationScope) -> bool:
        """Delete the conversation's row (its title) and its feedback; its usage records stay for the totals, with
        the conversation id replaced by an anonymous one (:func:`~berth.storage.usage.erased_conversation_id`).
        Return whether the row existed."""
        ...

    async def put_feedback(self, feedback: Feedback) -> None:
        """Set (replace) the feedback of one origin on one turn."""
        ...

    async def feedback_for(self, scope: ConversationScope) -> list[Feedback]:
        """Every feedback on the conversation."""
        ...

    async def feedback_between(self, tenant: str, project: str, start: datetime, end: datetime) -> list[Feedback]:
        """Feedback given in ``[start, end)`` in one tenant/project."""
        ...

    async def record_usage(self, records: Sequence[UsageRecord]) -> None:
        """Store model calls' usage, all of them in one transaction (a turn's calls as it ends)."""
        ...

    async def usage_totals(
        self, tenant: str, project: str, start: datetime, end: datetime, group_by: UsageGrouping | None
    ) -> list[UsageTotals]:
        """The usage of one tenant/project in ``[start, end)``: one row per group, ordered by key (``group_by``
        None: one row for the whole period, ``key`` None, even when there was no call)."""
        ...

    async def usage_spent(
        self, since: datetime, *, tenant: str | None = None, project: str | None = None, user_id: str | None = None
    ) -> list[SpentRow]:
        """Tokens and priced cost spent since ``since``, per tenant, project, user and UTC day; narrowed to a
        tenant, a tenant's project, or a user of one when given (budgets start from these)."""
        ...
