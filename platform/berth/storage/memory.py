"""The memory index seam behind ``react.memsearch``.

A :class:`MemoryIndex` keeps one entry per indexed text of a conversation (user prompts, completions,
attachment texts, summaries) with its embedding. It answers two questions, always inside one user's
conversations of one tenant/project (a :class:`~berth.storage.scope.OwnerScope`), optionally narrowed
to one conversation:

* :meth:`MemoryIndex.search_lexical`: the best entries for a query by BM25 (SQLite FTS5 when embedded);
* :meth:`MemoryIndex.list_entries`: the entries in a time window, oldest first, with their vectors.

Fusing the two rankings with embedding similarity and recency is the runtime's job
(``berth.runtime.memory``); the index only stores and retrieves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from berth.storage.scope import ConversationScope, OwnerScope

__all__ = ["LexicalHit", "MemoryEntry", "MemoryFilter", "MemoryIndex", "MemoryKind"]

MemoryKind: TypeAlias = Literal["user", "assistant", "attachment", "summary"]


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One indexed text: where it is (``path``), whose it is (``scope``) and when it was said.

    :ivar turn_ordinal: the turn's position in its conversation, from 1.
    :ivar vector: the text's embedding (unit length), as the embedder made it.
    """

    scope: ConversationScope
    path: str
    turn_id: str
    turn_ordinal: int
    kind: MemoryKind
    ts: datetime
    text: str
    vector: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which entries a query may see: one user's, optionally one conversation, kinds and a time window.

    ``since`` is inclusive and ``until`` exclusive; ``None`` leaves that side open.
    """

    owner: OwnerScope
    conversation_id: str | None = None
    kinds: frozenset[MemoryKind] = frozenset({"user", "assistant", "attachment", "summary"})
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class LexicalHit:
    """An entry matched by the lexical index, with its BM25 score (higher is better)."""

    entry: MemoryEntry
    score: float


class MemoryIndex(Protocol):
    """Stores memory entries and retrieves them lexically or by time. Open before use, close after."""

    async def open(self) -> None:
        """Prepare the index (create its tables, open connections)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...

    async def add(self, entries: tuple[MemoryEntry, ...]) -> None:
        """Insert or replace entries (keyed by conversation and path), in one transaction."""
        ...

    async def search_lexical(self, where: MemoryFilter, query: str, *, limit: int) -> tuple[LexicalHit, ...]:
        """Return up to ``limit`` entries matching ``query`` best first; an empty query matches nothing."""
        ...

    async def list_entries(self, where: MemoryFilter) -> tuple[MemoryEntry, ...]:
        """Return every entry ``where`` admits, oldest first (ties by conversation, turn and path)."""
        ...

    async def erase_conversation(self, scope: ConversationScope) -> int:
        """Delete every entry of one conversation (its text, its vector and what the lexical index holds of it);
        return how many there were."""
        ...
