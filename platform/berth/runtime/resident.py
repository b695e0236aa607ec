"""Conversations kept in memory between turns: what a conversation's next turn in this process reuses.

A conversation's turns usually run one after another in the same process. After a commit, the turn
leaves behind the timeline it committed (with its cached layouts and what the store holds of it), the
renderer that rendered it and the plan book read from it. The next turn takes them over when the store
still holds that version — no reading or parsing of the stored timeline, no laying out, rendering or
plan reading of blocks already seen — so starting a turn costs what changed, not what the conversation
holds. A version committed elsewhere is not reused, and a turn that ends without a commit leaves nothing
behind (it took the entry when it started).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from berth.runtime.persistence import CommittedTimeline
from berth.runtime.plan import PlanBookCache
from berth.runtime.render import TimelineRenderer
from berth.storage.scope import ConversationScope

__all__ = [
    "DEFAULT_RESIDENT_CONVERSATIONS",
    "DEFAULT_RESIDENT_MEDIA_BYTES",
    "ResidentConversation",
    "ResidentConversations",
]

DEFAULT_RESIDENT_CONVERSATIONS = 512
"""How many conversations a turn runner keeps in memory by default.

A server with more conversations active at once than it keeps would parse every turn's timeline again
(the load benchmark runs 200). A kept conversation costs what its timeline holds in memory: its blocks,
their rendered text and layouts.
"""


@dataclass(frozen=True, slots=True)
class ResidentConversation:
    """What one conversation's last turn in this process left for the next one."""

    committed: CommittedTimeline
    renderer: TimelineRenderer
    plans: PlanBookCache = field(default_factory=PlanBookCache)


DEFAULT_RESIDENT_MEDIA_BYTES = 256 * 1024 * 1024
"""The images and PDFs the kept conversations may hold in all (their renderers' shelves); past it the least
recent conversations are dropped, and read back from the store when they run again."""


def _media_bytes(resident: ResidentConversation) -> int:
    return sum(len(data) for data in resident.renderer.media.values())


class ResidentConversations:
    """The most recently run conversations, at most ``capacity`` of them and ``media_bytes`` of images and PDFs
    (the least recent is dropped)."""

    def __init__(
        self, capacity: int = DEFAULT_RESIDENT_CONVERSATIONS, media_bytes: int = DEFAULT_RESIDENT_MEDIA_BYTES
    ) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self._capacity = capacity
        self._media_budget = media_bytes
        self._media: dict[ConversationScope, int] = {}
        self._conversations: OrderedDict[ConversationScope, ResidentConversation] = OrderedDict()

    def __len__(self) -> int:
        return len(self._conversations)

    def take(self, scope: ConversationScope) -> ResidentConversation | None:
        """Remove and return what the last turn of ``scope`` in this process left, if it is still kept.

        The caller owns it from then on (a turn changes the timeline); :meth:`keep` puts it back.
        """
        self._media.pop(scope, None)
        return self._conversations.pop(scope, None)

    def keep(self, scope: ConversationScope, resident: ResidentConversation) -> None:
        """Keep ``resident`` for the next turn of ``scope``, dropping the least recent conversation if full."""
        self._conversations[scope] = resident
        self._conversations.move_to_end(scope)
        self._media[scope] = _media_bytes(resident)
        while len(self._conversations) > self._capacity or (
            len(self._conversations) > 1 and sum(self._media.values()) > self._media_budget
        ):
            dropped, _ = self._conversations.popitem(last=False)
            self._media.pop(dropped, None)
