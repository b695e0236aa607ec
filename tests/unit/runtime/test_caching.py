"""Cache checkpoints: previous turn (and its last tail), pre-tail and tail, only at stops; the editable tail."""

from __future__ import annotations

import pytest
from runtime_builders import ConversationBuilder

from berth.runtime.caching import (
    MAX_CACHE_BREAKPOINTS,
    CacheCheckpoint,
    editable_tail_start,
    plan_checkpoints,
    turn_stops,
)
from berth.runtime.timeline import TimelineError


def kinds_and_ends(checkpoints: tuple[CacheCheckpoint, ...]) -> list[tuple[str, int]]:
    return [(cp.kind, cp.end) for cp in checkpoints]


def test_empty_timeline_has_no_checkpoints(conversation: ConversationBuilder) -> None:
    assert plan_checkpoints(conversation.timeline) == ()


def test_first_round_of_a_turn_reads_where_the_previous_turn_last_wrote(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=2)
    last_round_of_turn_1 = conversation.timeline.turn_layouts()[-1].rounds[1].end
    turn_2_start = len(conversation.timeline)
    conversation.turn("turn_2")
    assert kinds_and_ends(plan_checkpoints(conversation.timeline)) == [
        ("previous_turn_tail", last_round_of_turn_1),
        ("previous_turn", turn_2_start),
        ("tail", len(conversation.timeline)),
    ]


def test_previous_turn_without_tool_rounds_is_read_up_to_its_head(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=0)
    head_of_turn_1 = conversation.timeline.turn_layouts()[-1].head_end
    conversation.turn("turn_2")
    assert plan_checkpoints(conversation.timeline)[0] == CacheCheckpoint("previous_turn_tail", head_of_turn_1)


def test_previous_turn_tail_is_dropped_once_the_turn_has_a_complete_round(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=1)
    conversation.turn("turn_2").tool_round("c1")
    assert [cp.kind for cp in plan_checkpoints(conversation.timeline)] == ["previous_turn", "tail"]


def test_tail_sits_at_the_end_of_the_head_before_any_round_completes(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1")
    head_end = len(conversation.timeline)
    conversation.timeline.contribute(*conversation.round_blocks("c1")[:2])  # the call, no result yet
    assert kinds_and_ends(plan_checkpoints(conversation.timeline)) == [("tail", head_end)]


def test_tail_sits_at_the_end_of_the_last_complete_round(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1")
    assert kinds_and_ends(plan_checkpoints(conversation.timeline)) == [("tail", len(conversation.timeline))]


def test_pre_tail_sits_offset_rounds_before_the_last_once_there_are_enough(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=0)
    turn_2_start = len(conversation.timeline)
    conversation.turn("turn_2").tool_round("c1").tool_round("c2")
    assert [cp.kind for cp in plan_checkpoints(conversation.timeline, offset=2)] == ["previous_turn", "tail"]
    conversation.tool_round("c3")
    rounds = conversation.timeline.turn_layouts()[-1].rounds
    assert kinds_and_ends(plan_checkpoints(conversation.timeline, offset=2)) == [
        ("previous_turn", turn_2_start),
        ("pre_tail", rounds[0].end),
        ("tail", rounds[2].end),
    ]


def test_offset_zero_keeps_only_the_tail(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1").tool_round("c2").tool_round("c3")
    assert [cp.kind for cp in plan_checkpoints(conversation.timeline, offset=0)] == ["tail"]


def test_negative_offset_is_refused(conversation: ConversationBuilder) -> None:
    with pytest.raises(ValueError, match="offset"):
        plan_checkpoints(conversation.timeline, offset=-1)


def test_tail_never_falls_inside_a_multi_block_result(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1", result_parts=4)
    (tail,) = plan_checkpoints(conversation.timeline)
    assert tail.end == len(conversation.timeline)
    assert all(block.call_id == "c1" for block in conversation.timeline.blocks[tail.end - 4 : tail.end])


def test_an_incomplete_round_is_left_out_of_the_cached_prefix(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1")
    end_of_c1 = len(conversation.timeline)
    conversation.timeline.contribute(*conversation.round_blocks("c2")[:2])  # the call, no result yet
    assert kinds_and_ends(plan_checkpoints(conversation.timeline)) == [("tail", end_of_c1)]


def test_final_answer_round_gets_the_tail_checkpoint(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=1)
    assert plan_checkpoints(conversation.timeline)[-1].end == len(conversation.timeline)


def test_checkpoints_start_at_the_given_block(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=1)
    start = len(conversation.timeline)
    conversation.turn("turn_2")
    assert kinds_and_ends(plan_checkpoints(conversation.timeline, start=start)) == [
        ("tail", len(conversation.timeline))
    ]


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
@pytest.mark.parametrize("rounds", [0, 1, 2, 3, 4, 7])
def test_never_more_than_three_timeline_checkpoints_at_increasing_stops(
    conversation: ConversationBuilder, rounds: int, offset: int
) -> None:
    conversation.full_turn("turn_1", rounds=3).turn("turn_2")
    for n in range(1, rounds + 1):
        conversation.tool_round(f"c{n}")
    checkpoints = plan_checkpoints(conversation.timeline, offset=offset)
    ends = [cp.end for cp in checkpoints]
    assert len(checkpoints) <= MAX_CACHE_BREAKPOINTS - 1
    assert ends == sorted(set(ends))
    stops = {stop for layout in conversation.timeline.turn_layouts() for stop in turn_stops(layout)}
    assert set(ends) <= stops | {layout.start for layout in conversation.timeline.turn_layouts()}


def test_editable_tail_starts_after_the_pre_tail_checkpoint(conversation: ConversationBuilder) -> None:
    conversation.full_turn("turn_1", rounds=0)
    turn_2_start = len(conversation.timeline)
    conversation.turn("turn_2").tool_round("c1")
    assert editable_tail_start(conversation.timeline) == turn_2_start
    conversation.tool_round("c2").tool_round("c3")
    first_round_end = conversation.timeline.turn_layouts()[-1].rounds[0].end
    assert editable_tail_start(conversation.timeline) == first_round_end


def test_hide_is_allowed_in_the_editable_tail_and_refused_before_it(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1").tool_round("c2").tool_round("c3")
    timeline = conversation.timeline
    tail_start = editable_tail_start(timeline)
    assert timeline.hide("tc:turn_1.c3.result", "c3 output, hidden", editable_from=tail_start) == 1
    with pytest.raises(TimelineError) as caught:
        timeline.hide("tc:turn_1.c1.result", "c1 output", editable_from=tail_start)
    assert caught.value.code == "hide_outside_tail"


def test_a_plan_asked_again_follows_every_change_of_either_of_two_timelines() -> None:
    """The plan a round makes for its render is reused for its editable tail; any append, hide or other
    timeline in between is planned afresh, as if nothing were kept."""
    first, second = ConversationBuilder(), ConversationBuilder()
    first.full_turn("turn_1", rounds=1)
    second.full_turn("turn_1", rounds=4)
    fresh_second = kinds_and_ends(plan_checkpoints(second.timeline, offset=2))
    for _ in range(2):  # asked twice in a row, then alternately
        assert kinds_and_ends(plan_checkpoints(first.timeline, offset=2)) == [("tail", len(first.timeline))]
        assert kinds_and_ends(plan_checkpoints(second.timeline, offset=2)) == fresh_second
    assert plan_checkpoints(second.timeline, offset=0) == (CacheCheckpoint("tail", len(second.timeline)),)
    first.turn("turn_2").tool_round("c1")
    assert [cp.kind for cp in plan_checkpoints(first.timeline, offset=2)] == ["previous_turn", "tail"]
    assert editable_tail_start(first.timeline, offset=2) == first.timeline.turn_layouts()[-1].start
