"""Resident conversations: what a conversation's next turn in this process takes over from the last one, within a
budget of bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from berth.runtime.blocks import Block, BlockType
from berth.runtime.persistence import CommittedTimeline, StoredTimeline, block_record
from berth.runtime.render import TimelineRenderer
from berth.runtime.resident import (
    BLOCK_BYTES,
    CONVERSATION_OVERHEAD_BYTES,
    ResidentConversation,
    ResidentConversations,
    resident_bytes,
)
from berth.runtime.timeline import Timeline
from berth.storage.scope import OwnerScope

OWNER = OwnerScope(tenant="acme", project="support", user_id="ada")
TS = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def turn_blocks(turn: int, text_chars: int = 200) -> list[Block]:
    """A turn's header, prompt and answer, the answer ``text_chars`` long."""
    turn_id = f"turn_{turn}"
    return [
        Block(type=BlockType.TURN_HEADER, path=f"ar:{turn_id}.turn.header", turn_id=turn_id, ts=TS, author="runtime"),
        Block(
            type=BlockType.USER_PROMPT,
            path=f"ar:{turn_id}.user.prompt",
            turn_id=turn_id,
            ts=TS,
            author="user",
            text=f"question {turn}",
        ),
        Block(
            type=BlockType.ASSISTANT_COMPLETION,
            path=f"ar:{turn_id}.assistant.completion",
            turn_id=turn_id,
            ts=TS,
            author="assistant",
            text="a" * text_chars,
        ),
    ]


def resident(turns: int = 0, text_chars: int = 200) -> ResidentConversation:
    """A conversation of ``turns`` turns as a commit leaves it."""
    blocks = [block for turn in range(1, turns + 1) for block in turn_blocks(turn, text_chars)]
    stored = StoredTimeline()
    stored.stored(blocks)
    return ResidentConversation(CommittedTimeline(1, Timeline(blocks), stored), TimelineRenderer())


def test_a_turn_takes_its_conversation_so_a_turn_without_commit_leaves_nothing_behind() -> None:
    conversations = ResidentConversations()
    kept = resident()
    conversations.keep(OWNER.conversation("c1"), kept)
    assert conversations.take(OWNER.conversation("c1")) is kept
    assert conversations.take(OWNER.conversation("c1")) is None
    assert conversations.bytes == 0


def test_a_conversation_counts_its_blocks_their_json_and_what_its_renderer_keeps() -> None:
    kept = resident(turns=2)
    json_chars = sum(len(block_record(block).json) for block in kept.committed.timeline.blocks)
    assert kept.committed.stored.json_chars == json_chars
    assert resident_bytes(kept) == 6 * BLOCK_BYTES + json_chars + CONVERSATION_OVERHEAD_BYTES
    kept.renderer.media["fi:turn_1.attachments/a.png"] = bytes(1000)
    assert resident_bytes(kept) == 6 * BLOCK_BYTES + json_chars + CONVERSATION_OVERHEAD_BYTES + 1000


def test_the_least_recently_used_conversations_are_dropped_to_stay_within_the_budget() -> None:
    size = resident_bytes(resident(turns=3))
    conversations = ResidentConversations(budget_bytes=3 * size)
    for name in ("c1", "c2", "c3"):
        conversations.keep(OWNER.conversation(name), resident(turns=3))
    assert len(conversations) == 3 and conversations.bytes == 3 * size
    conversations.keep(OWNER.conversation("c1"), conversations.take(OWNER.conversation("c1")) or resident(turns=3))
    conversations.keep(OWNER.conversation("c4"), resident(turns=3))  # c2 is now the least recently used
    assert conversations.bytes <= conversations.budget_bytes
    assert conversations.take(OWNER.conversation("c2")) is None
    assert all(conversations.take(OWNER.conversation(name)) is not None for name in ("c1", "c3", "c4"))
    assert conversations.dropped == 1


def test_a_conversation_that_grew_is_counted_at_its_new_size() -> None:
    conversations = ResidentConversations(budget_bytes=10 * resident_bytes(resident(turns=3)))
    conversations.keep(OWNER.conversation("c1"), resident(turns=1))
    conversations.keep(OWNER.conversation("c1"), resident(turns=3))  # its next turn's commit, kept again
    assert len(conversations) == 1
    assert conversations.bytes == resident_bytes(resident(turns=3))


def test_a_conversation_larger_than_the_whole_budget_is_not_kept() -> None:
    conversations = ResidentConversations(budget_bytes=resident_bytes(resident(turns=3)) - 1)
    conversations.keep(OWNER.conversation("small"), resident(turns=1))
    conversations.keep(OWNER.conversation("large"), resident(turns=3))
    assert conversations.take(OWNER.conversation("large")) is None
    assert conversations.bytes == 0


def test_a_budget_of_zero_keeps_nothing_and_a_lower_budget_drops_at_once() -> None:
    nothing = ResidentConversations(budget_bytes=0)
    nothing.keep(OWNER.conversation("c1"), resident())
    assert len(nothing) == 0
    conversations = ResidentConversations()
    for name in ("c1", "c2", "c3"):
        conversations.keep(OWNER.conversation(name), resident(turns=2))
    conversations.configure(resident_bytes(resident(turns=2)))
    assert len(conversations) == 1 and conversations.take(OWNER.conversation("c3")) is not None
    with pytest.raises(ValueError, match="budget_bytes must be >= 0"):
        conversations.configure(-1)


def test_the_json_size_follows_commits_that_append_change_and_replace_blocks() -> None:
    """Kept from the positions each commit writes; always what the stored blocks' JSON adds up to."""
    stored = StoredTimeline()
    timeline = Timeline()

    def commit() -> None:
        blocks = timeline.blocks
        stored.change(blocks)
        stored.stored(blocks)
        assert stored.json_chars == sum(len(block_record(block).json) for block in blocks)
        assert stored.block_count == len(blocks)

    for turn in range(1, 4):
        timeline.contribute(*turn_blocks(turn))
        commit()
    timeline.hide("ar:turn_2.assistant.completion", "an answer, hidden", editable_from=0)
    commit()
    summary = Block(
        type=BlockType.CONV_RANGE_SUMMARY,
        path="ar:turn_3.conv.range.summary",
        turn_id="turn_3",
        ts=TS,
        author="runtime",
        text="turns 1 and 2, summarized",
    )
    timeline.replace_prefix(6, summary)
    commit()
    stored.stored(list(timeline.blocks))  # stored without a change first (a timeline read from the store)
    assert stored.json_chars == sum(len(block_record(block).json) for block in timeline.blocks)
