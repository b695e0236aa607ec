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


def with_media(size: int) -> ResidentConversation:
    kept = resident()
    kept.renderer.media["fi:turn_1.attachments/a.png"] = bytes(size)
    return kept


def test_conversations_holding_more_images_than_the_budget_are_dropped_least_recent_first() -> None:
    conversations = ResidentConversations(capacity=10, media_bytes=1_000)
    conversations.keep(OWNER.conversation("c1"), with_media(400))
    conversations.keep(OWNER.conversation("c2"), with_media(400))
    conversations.keep(OWNER.conversation("c3"), resident())  # no media: within the budget, all three kept
    assert len(conversations) == 3
    conversations.keep(OWNER.conversation("c4"), with_media(400))  # 1,200 bytes: c1 goes
    assert len(conversations) == 3
    assert conversations.take(OWNER.conversation("c1")) is None
    assert conversations.take(OWNER.conversation("c2")) is not None  # taken: its bytes no longer count
    conversations.keep(OWNER.conversation("c5"), with_media(500))  # 900 bytes with c4: both kept
    assert conversations.take(OWNER.conversation("c4")) is not None


def test_one_conversation_over_the_budget_alone_is_still_kept() -> None:
    conversations = ResidentConversations(capacity=10, media_bytes=100)
    conversations.keep(OWNER.conversation("c1"), with_media(400))
    assert conversations.take(OWNER.conversation("c1")) is not None
