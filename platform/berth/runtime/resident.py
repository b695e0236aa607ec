"""Conversations kept in memory between turns: what a conversation's next turn in this process reuses.

A conversation's turns usually run one after another in the same process. After a commit, the turn
leaves behind the timeline it committed (with its cached layouts and what the store holds of it), the
renderer that rendered it and the plan book read from it. The next turn takes them over when the store
still holds that version — no reading or parsing of the stored timeline, no laying out, rendering or
plan reading of blocks already seen — so starting a turn costs what changed, not what the conversation
holds. A version committed elsewhere is not reused, and a turn that ends without a commit leaves nothing
behind (it took the entry when it started).

What is kept is bounded by bytes (``platform.resident_conversations.max_mb``): each kept conversation is
counted at what it holds in memory (:func:`resident_bytes`, from sizes its timeline and renderer keep as
they grow, so counting costs nothing per block), and past the budget the least recently used ones are
dropped; their next turn reads them back from the store. A conversation whose turn is running is never
dropped: the turn took it out, and puts it back when it commits.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from berth.runtime.persistence import CommittedTimeline
from berth.runtime.plan import PlanBookCache
from berth.runtime.render import TimelineRenderer
from berth.storage.scope import ConversationScope

__all__ = [
    "BLOCK_BYTES",
    "CONVERSATION_OVERHEAD_BYTES",
    "DEFAULT_RESIDENT_BYTES",
    "ResidentConversation",
    "ResidentConversations",
    "resident_bytes",
]

DEFAULT_RESIDENT_BYTES: Final = 256 * 1024 * 1024
"""What a process keeps of idle conversations by default (``platform.resident_conversations.max_mb``: 256)."""

BLOCK_BYTES: Final = 1200
"""Bytes of memory a block takes beyond its content: a pydantic model's ``__dict__`` (about 650 bytes for a
block's thirteen fields), the object, its datetime, ``meta`` dict, path and turn strings, and its share of the
timeline's layouts and the renderer's cache keys.

Measured with ``tracemalloc`` (the memory freed when kept conversations are dropped) on the hello bundle's tool
turns (``bench/memory.py``'s workload, 14 blocks a turn): 1.0 to 1.3 KB a block over its JSON and rendered text.
"""

CONVERSATION_OVERHEAD_BYTES: Final = 4 * 1024
"""What a kept conversation costs whatever its length: its renderer, timeline, stored-timeline bookkeeping and
plan book objects, and their dicts."""


@dataclass(frozen=True, slots=True)
class ResidentConversation:
    """What one conversation's last turn in this process left for the next one."""

    committed: CommittedTimeline
    renderer: TimelineRenderer
    plans: PlanBookCache = field(default_factory=PlanBookCache)


def resident_bytes(resident: ResidentConversation) -> int:
    """An estimate of the memory ``resident`` holds: its timeline (its blocks, by their number and the size of their
    JSON), the prompt text its renderer keeps, the images and PDFs on its shelf, and a fixed overhead.

    Every term is a size kept up to date as the conversation grows, so this costs a few additions (and one
    per file on the shelf), not a walk over the blocks.
    """
    renderer = resident.renderer
    stored = resident.committed.stored
    return (
        BLOCK_BYTES * stored.block_count
        + stored.json_chars
        + renderer.text_chars
        + renderer.media_bytes
        + CONVERSATION_OVERHEAD_BYTES
    )


class ResidentConversations:
    """The most recently used idle conversations, at most ``budget_bytes`` of them (by :func:`resident_bytes`);
    the least recently used is dropped first.

    One is shared by the turn runners of a process, so the budget holds for all its tenants together.
    """

    def __init__(self, budget_bytes: int = DEFAULT_RESIDENT_BYTES) -> None:
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self._budget = budget_bytes
        self._bytes = 0
        self._conversations: OrderedDict[ConversationScope, tuple[ResidentConversation, int]] = OrderedDict()
        self.dropped = 0
        """How many conversations were dropped for the budget so far."""

    def __len__(self) -> int:
        return len(self._conversations)

    @property
    def bytes(self) -> int:
        """What the kept conversations hold, by :func:`resident_bytes` (at most :attr:`budget_bytes`)."""
        return self._bytes

    @property
    def budget_bytes(self) -> int:
        """The most the kept conversations may hold."""
        return self._budget

    def configure(self, budget_bytes: int) -> None:
        """Change the budget (the settings were reloaded); drop the least recent conversations beyond it."""
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self._budget = budget_bytes
        self._drop_over_budget()

    def take(self, scope: ConversationScope) -> ResidentConversation | None:
        """Remove and return what the last turn of ``scope`` in this process left, if it is still kept.

        The caller owns it from then on (a turn changes the timeline); :meth:`keep` puts it back.
        """
        entry = self._conversations.pop(scope, None)
        if entry is None:
            return None
        self._bytes -= entry[1]
        return entry[0]

    def keep(self, scope: ConversationScope, resident: ResidentConversation) -> None:
        """Keep ``resident`` for the next turn of ``scope``, dropping the least recently used conversations while
        the kept ones hold more than the budget (``resident`` too, when it alone holds more)."""
        self.take(scope)
        size = resident_bytes(resident)
        self._conversations[scope] = (resident, size)
        self._bytes += size
        self._drop_over_budget()

    def _drop_over_budget(self) -> None:
        while self._bytes > self._budget and self._conversations:
            _, (_, size) = self._conversations.popitem(last=False)
            self._bytes -= size
            self.dropped += 1
