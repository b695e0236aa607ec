"""The timeline: contribute vs announce, hide/unhide, and grouping a turn into rounds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.runtime.blocks import Block, BlockType
from berth.runtime.timeline import FINAL_ROUND_KEY, Timeline, TimelineError, TimelinePayload, TurnLayout

if TYPE_CHECKING:
    from runtime_builders import ConversationBuilder


def test_contributed_blocks_are_persisted_and_announced_blocks_are_not(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1")
    notice = conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_1.notice.budget", text="budget low")
    conversation.timeline.announce(notice)
    assert conversation.timeline.announced == (notice,)
    payload = conversation.timeline.to_payload()
    assert notice not in payload.blocks
    assert [block.type for block in payload.blocks] == [BlockType.TURN_HEADER, BlockType.USER_PROMPT]


def test_announcing_again_replaces_the_previous_rounds_announcements(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1")
    first = conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_1.notice.a", text="a")
    second = conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_1.notice.b", text="b")
    conversation.timeline.announce(first)
    conversation.timeline.announce(second)
    assert conversation.timeline.announced == (second,)
    conversation.timeline.clear_announcements()
    assert conversation.timeline.announced == ()


def test_payload_round_trips_through_json_without_announcements(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=2)
    conversation.timeline.announce(conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_1.n", text="x"))
    payload = TimelinePayload.model_validate_json(conversation.timeline.to_payload().model_dump_json())
    restored = Timeline.from_payload(payload)
    assert restored.blocks == conversation.timeline.blocks
    assert restored.announced == ()


def test_rounds_are_grouped_by_tool_call_id_after_the_turn_head(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=2)
    (layout,) = conversation.timeline.turn_layouts()
    blocks = conversation.timeline.blocks
    assert [blocks[i].type for i in range(layout.start, layout.head_end)] == [
        BlockType.TURN_HEADER,
        BlockType.USER_PROMPT,
    ]
    assert [(r.key, r.kind, r.complete) for r in layout.rounds] == [
        ("c1", "tool", True),
        ("c2", "tool", True),
        (FINAL_ROUND_KEY, "final", True),
    ]
    for round_ in layout.rounds[:2]:
        assert {blocks[i].call_id for i in range(round_.start, round_.end)} == {round_.key}


def test_final_answer_family_is_a_round_of_its_own(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=1)
    final = conversation.timeline.turn_layouts()[0].rounds[-1]
    types = [conversation.timeline.blocks[i].type for i in range(final.start, final.end)]
    assert types == [BlockType.ASSISTANT_COMPLETION, BlockType.ASSISTANT_FOLLOWUPS]


def test_all_parts_of_a_multi_block_result_belong_to_one_round(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1", result_parts=3).tool_round("c2")
    rounds = conversation.timeline.turn_layouts()[0].rounds
    assert [(r.key, r.end - r.start) for r in rounds] == [("c1", 5), ("c2", 3)]


def test_block_without_call_id_joins_the_round_before_it(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1")
    steer = conversation.block(BlockType.USER_STEER, "ar:turn_1.user.steer.m1", text="shorter please", author="user")
    conversation.timeline.contribute(steer)
    conversation.tool_round("c2")
    rounds = conversation.timeline.turn_layouts()[0].rounds
    assert [(r.key, r.end - r.start) for r in rounds] == [("c1", 4), ("c2", 3)]


def test_call_without_result_is_an_incomplete_round(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1")
    conversation.timeline.contribute(*conversation.round_blocks("c1")[:2])
    (round_,) = conversation.timeline.turn_layouts()[0].rounds
    assert not round_.complete


def test_turns_are_laid_out_in_order(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=1).full_turn("turn_2", rounds=0).turn("turn_3")
    assert conversation.timeline.turn_ids() == ("turn_1", "turn_2", "turn_3")
    assert conversation.timeline.current_turn_id == "turn_3"
    assert [layout.turn_id for layout in conversation.timeline.turn_layouts()] == ["turn_1", "turn_2", "turn_3"]
    assert conversation.timeline.turn_layouts()[-1].rounds == ()


def test_hide_replaces_content_with_the_replacement_text_and_unhide_restores_it(
    conversation: ConversationBuilder,
) -> None:
    conversation.turn("turn_1").tool_round("c1", result_text="a very long log")
    timeline = conversation.timeline
    original = timeline.blocks[timeline.indices_of("tc:turn_1.c1.result")[0]]
    assert timeline.hide("tc:turn_1.c1.result", "log of c1 (2 MB), not needed", editable_from=0) == 1
    hidden = timeline.blocks[timeline.indices_of("tc:turn_1.c1.result")[0]]
    assert hidden.hidden
    assert hidden.replacement == "log of c1 (2 MB), not needed"
    assert hidden.text == "a very long log"
    assert timeline.to_payload().blocks[timeline.indices_of("tc:turn_1.c1.result")[0]].hidden
    assert timeline.unhide("tc:turn_1.c1.result") == 1
    assert timeline.blocks[timeline.indices_of("tc:turn_1.c1.result")[0]] == original


def test_hiding_a_path_twice_is_harmless(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1")
    conversation.timeline.hide("tc:turn_1.c1.result", "hidden", editable_from=0)
    assert conversation.timeline.hide("tc:turn_1.c1.result", "hidden again", editable_from=0) == 0


def test_hide_before_the_editable_tail_is_refused(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1").tool_round("c2")
    with pytest.raises(TimelineError) as caught:
        conversation.timeline.hide("tc:turn_1.c1.result", "gone", editable_from=len(conversation.timeline) - 3)
    assert caught.value.code == "hide_outside_tail"


@pytest.mark.parametrize(
    ("path", "replacement", "code"),
    [
        ("tc:turn_1.c9.result", "gone", "path_not_found"),
        ("tc:turn_1.c1.result", "  ", "empty_replacement"),
    ],
)
def test_hide_failures_have_stable_codes(
    conversation: ConversationBuilder, path: str, replacement: str, code: str
) -> None:
    conversation.turn("turn_1").tool_round("c1")
    with pytest.raises(TimelineError) as caught:
        conversation.timeline.hide(path, replacement, editable_from=0)
    assert caught.value.code == code


def test_unhide_of_a_visible_block_is_refused(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1")
    with pytest.raises(TimelineError) as caught:
        conversation.timeline.unhide("tc:turn_1.c1.result")
    assert caught.value.code == "not_hidden"
    with pytest.raises(TimelineError) as missing:
        conversation.timeline.unhide("tc:turn_1.c7.result")
    assert missing.value.code == "path_not_found"


def test_layouts_stay_right_as_a_timeline_grows_is_hidden_and_compacted(conversation: ConversationBuilder) -> None:
    timeline = conversation.timeline

    def laid_out(layouts: tuple[TurnLayout, ...]) -> list[tuple[TurnLayout, tuple[int, ...]]]:
        return [(layout, layout.complete_ends) for layout in layouts]

    def fresh() -> list[tuple[TurnLayout, tuple[int, ...]]]:
        return laid_out(Timeline(timeline.blocks).turn_layouts())

    conversation.full_turn("turn_1", rounds=2).turn("turn_2").tool_round("c1")
    assert laid_out(timeline.turn_layouts()) == fresh()
    conversation.tool_round("c2")  # the cached last turn grows
    timeline.hide("tc:turn_2.c2.result", "hidden", editable_from=0)
    assert laid_out(timeline.turn_layouts()) == fresh()
    timeline.contribute(*conversation.round_blocks("c3")[:2])  # an incomplete round: later ones are not stops
    assert laid_out(timeline.turn_layouts()) == fresh()
    conversation.tool_round("c4")
    assert laid_out(timeline.turn_layouts()) == fresh()
    assert timeline.turn_layouts()[-1].complete_ends == tuple(r.end for r in timeline.turn_layouts()[-1].rounds[:2])
    conversation.final().turn("turn_3")
    assert laid_out(timeline.turn_layouts()) == fresh()
    summary = conversation.block(
        BlockType.CONV_RANGE_SUMMARY, "su:turn_3.conv.range.summary", text="turns 1-2", meta={}
    )
    timeline.replace_prefix(len(timeline) - 2, summary)
    assert laid_out(timeline.turn_layouts()) == fresh()
    assert timeline.latest_summary_index == 0
    assert Timeline(timeline.blocks).latest_summary_index == 0


_T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _block(turn: int, n: int, media: bool) -> Block:
    return Block(
        type=BlockType.USER_PROMPT,
        path=f"ar:turn_{turn}.user.prompt.{n}",
        turn_id=f"turn_{turn}",
        ts=_T0,
        author="user",
        text="x",
        meta={"media": "image"} if media else {},
    )


_edits = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.tuples(st.integers(1, 6), st.booleans()), min_size=1, max_size=4)),
        st.tuples(st.just("compact"), st.integers(1, 8)),
        st.tuples(st.just("hide"), st.integers(0, 30)),
        st.tuples(st.just("read"), st.integers(0, 12)),
    ),
    max_size=25,
)


@given(_edits)
def test_turn_ids_and_media_blocks_match_a_scan_of_the_whole_timeline_after_any_edits(
    edits: list[tuple[str, object]],
) -> None:
    timeline = Timeline()
    made = 0
    for kind, argument in edits:
        if kind == "add":
            assert isinstance(argument, list)
            blocks = [_block(turn, made + i, media) for i, (turn, media) in enumerate(argument)]
            made += len(blocks)
            timeline.contribute(*blocks)
        elif kind == "compact" and len(timeline):
            assert isinstance(argument, int)
            summary = Block(
                type=BlockType.CONV_RANGE_SUMMARY,
                path=f"ar:turn_9.summary.{made}",
                turn_id="turn_9",
                ts=_T0,
                author="runtime",
                text="summary",
            )
            made += 1
            timeline.replace_prefix(min(argument, len(timeline)), summary)
        elif kind == "hide" and len(timeline):
            assert isinstance(argument, int)
            path = timeline.blocks[argument % len(timeline)].path
            if not timeline.blocks[argument % len(timeline)].hidden:
                timeline.hide(path, "hidden", editable_from=0)
        start = argument if kind == "read" and isinstance(argument, int) else 0
        blocks = list(timeline.blocks)
        assert timeline.turn_ids() == tuple(dict.fromkeys(block.turn_id for block in blocks))
        assert timeline.media_blocks(start) == [b for b in blocks[start:] if b.meta.get("media")]
