"""Resident conversations: what a conversation's next turn in this process takes over from the last one."""

from __future__ import annotations

from berth.runtime.persistence import CommittedTimeline, StoredTimeline
from berth.runtime.render import TimelineRenderer
from berth.runtime.resident import ResidentConversation, ResidentConversations
from berth.runtime.timeline import Timeline
from berth.storage.scope import OwnerScope

OWNER = OwnerScope(tenant="acme", project="support", user_id="ada")


def resident(version: int = 1) -> ResidentConversation:
    return ResidentConversation(CommittedTimeline(version, Timeline(), StoredTimeline()), TimelineRenderer())


def test_a_turn_takes_its_conversation_so_a_turn_without_commit_leaves_nothing_behind() -> None:
    conversations = ResidentConversations()
    kept = resident()
    conversations.keep(OWNER.conversation("c1"), kept)
    assert conversations.take(OWNER.conversation("c1")) is kept
    assert conversations.take(OWNER.conversation("c1")) is None


def test_the_least_recently_kept_conversation_is_dropped_first() -> None:
    conversations = ResidentConversations(capacity=2)
    for name in ("c1", "c2", "c3"):
        conversations.keep(OWNER.conversation(name), resident())
    assert len(conversations) == 2
    assert conversations.take(OWNER.conversation("c1")) is None
    assert conversations.take(OWNER.conversation("c3")) is not None
