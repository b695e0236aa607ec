"""The bound context that scopes every storage read and write.

Tenant, project, user and conversation always come from here — from the authenticated request or the
turn being run — and never from a logical path or a file name. Each id is a short, path-safe name, so
an implementation may also use it as a folder name without further escaping.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SCOPE_ID_PATTERN", "ConversationScope", "OwnerScope", "ScopeId"]

SCOPE_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"
"""Every tenant, project, user and conversation id matches this (no dots, slashes or NUL)."""

ScopeId = Annotated[str, Field(pattern=SCOPE_ID_PATTERN)]
"""A tenant, project, user or conversation id."""


class OwnerScope(BaseModel):
    """One user inside one tenant/project: the widest scope a memory search may reach."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: ScopeId
    project: ScopeId
    user_id: ScopeId

    def conversation(self, conversation_id: str) -> ConversationScope:
        """Return the scope of one of this user's conversations."""
        return ConversationScope(
            tenant=self.tenant, project=self.project, user_id=self.user_id, conversation_id=conversation_id
        )


class ConversationScope(OwnerScope):
    """One conversation of one user inside one tenant/project."""

    conversation_id: ScopeId

    @property
    def owner(self) -> OwnerScope:
        """The user this conversation belongs to."""
        return OwnerScope(tenant=self.tenant, project=self.project, user_id=self.user_id)
