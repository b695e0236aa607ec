"""Conversation metadata and feedback: what the API lists and shows besides the timeline itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from berth.storage.scope import ConversationScope, OwnerScope

Reaction: TypeAlias = Literal["ok", "not_ok", "neutral"]


@dataclass(frozen=True, slots=True)
class ConversationMeta:
    """A conversation as the API lists it."""

    scope: ConversationScope
    title: str | None
    bundle: str | None
    created_at: datetime
    updated_at: datetime


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
    """Conversation index rows and feedback, scoped like everything else."""

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
        """Mark activity (and optionally set a title)."""
        ...

    async def list_conversations(
        self, owner: OwnerScope, *, limit: int, before: datetime | None = None
    ) -> list[ConversationMeta]:
        """The owner's conversations, most recently active first, older than ``before``."""
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
