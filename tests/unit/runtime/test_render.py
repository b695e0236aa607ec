"""Rendering: order of sections, at most four breakpoints, and a cached prefix nothing volatile touches."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_builders import T0, ConversationBuilder

from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import BlockType
from berth.runtime.caching import MAX_CACHE_BREAKPOINTS, editable_tail_start
from berth.runtime.plan import PlanBook, PlanCommand, apply_plan_command, apply_step_markers
from berth.runtime.pruning import PRUNING_NOTICE
from berth.runtime.render import BLOCK_SEPARATOR, RenderedPrompt, TimelineRenderer, render_block, render_timeline
from berth.runtime.sources import Source, SourcesPool

if TYPE_CHECKING:
    from berth.runtime.timeline import Timeline

SYSTEM = "You are a careful assistant.\n[TOOLS]\nreact.read\nweb.search"


def render(timeline: Timeline, announce: AnnounceState, sources: SourcesPool | None = None) -> RenderedPrompt:
    return render_timeline(timeline, system=SYSTEM, sources=sources or SourcesPool(), announce=announce)


def flat_prefix(prompt: RenderedPrompt) -> str:
    return BLOCK_SEPARATOR.join(prompt.cached_prefix())


def breakpoint_prefixes(prompt: RenderedPrompt) -> dict[str, tuple[str, ...]]:
    """The prefix (part texts) a provider caches at each breakpoint, by checkpoint kind."""
    parts = prompt.parts()
    return {
        part.cache_checkpoint: tuple(p.text for p in parts[: index + 1])
        for index, part in enumerate(parts)
        if part.cache_checkpoint
    }


def test_sections_come_in_the_specified_order(conversation: ConversationBuilder, announce_state: AnnounceState) -> None:
    conversation.full_turn("turn_1", rounds=1).turn("turn_2").tool_round("c1")
    prompt = render(conversation.timeline, announce_state)
    assert [message.role for message in prompt.messages] == ["system", "user"]
    sections = [section for section, _ in itertools.groupby(part.section for part in prompt.parts())]
    assert sections == ["system", "history", "current_turn", "sources", "announce"]
    assert prompt.parts()[0].text == SYSTEM


def test_each_turn_head_and_round_is_its_own_part(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=2).turn("turn_2").tool_round("c1", result_parts=3)
    parts = render(conversation.timeline, announce_state).parts()
    firsts = [part.text.splitlines()[0] for part in parts if part.section in ("history", "current_turn")]
    assert firsts == [
        f"[TURN turn_1] started {firsts[0].split()[-1]}",
        "[react.notes] ar:turn_1.react.notes.c1",
        "[react.notes] ar:turn_1.react.notes.c2",
        "[assistant.completion] ar:turn_1.assistant.completion",
        f"[TURN turn_2] started {firsts[4].split()[-1]}",
        "[react.notes] ar:turn_2.react.notes.c1",
    ]
    assert "fi:turn_2.outputs/c1/part2.txt" in parts[-3].text  # the whole multi-block result in one part


def test_system_message_and_each_timeline_checkpoint_carry_a_breakpoint(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=1).turn("turn_2")
    for n in range(1, 6):
        conversation.tool_round(f"c{n}")
    prompt = render(conversation.timeline, announce_state)
    marks = [part.cache_checkpoint for part in prompt.parts() if part.cache_checkpoint]
    assert marks == ["system", "previous_turn", "pre_tail", "tail"]
    assert prompt.breakpoint_count() == MAX_CACHE_BREAKPOINTS


def test_first_round_of_a_turn_spends_the_free_breakpoint_on_the_previous_turns_last_tail(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=1).turn("turn_2").tool_round("c1").tool_round("c2")
    last_request_of_turn_2 = render(conversation.timeline, announce_state)
    conversation.final().turn("turn_3")
    first_request_of_turn_3 = render(conversation.timeline, announce_state)
    marks = [part.cache_checkpoint for part in first_request_of_turn_3.parts() if part.cache_checkpoint]
    assert marks == ["system", "previous_turn_tail", "previous_turn", "tail"]
    assert (
        breakpoint_prefixes(first_request_of_turn_3)["previous_turn_tail"]
        == (breakpoint_prefixes(last_request_of_turn_2)["tail"])
    )


def test_a_checkpoint_inside_a_pruned_card_is_left_out(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=2).turn("turn_2")
    prompt = render_timeline(
        conversation.timeline,
        system=SYSTEM,
        sources=SourcesPool(),
        announce=announce_state,
        pruned_turns=frozenset({"turn_1"}),
    )
    assert [cp.kind for cp in prompt.checkpoints] == ["previous_turn", "tail"]
    checkpointed = [part for part in prompt.parts() if part.cache_checkpoint == "previous_turn"]
    assert [part.text for part in checkpointed] == [PRUNING_NOTICE]
    assert prompt.characters == len(BLOCK_SEPARATOR.join(part.text for part in prompt.parts()))


def test_sources_pool_and_announce_come_after_the_last_checkpoint(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.turn("turn_1").tool_round("c1")
    parts = render(conversation.timeline, announce_state).parts()
    assert [(p.section, p.cache_checkpoint) for p in parts[-2:]] == [("sources", None), ("announce", None)]


def test_announce_never_moves_the_cached_prefix(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=2).turn("turn_2").tool_round("c1").tool_round("c2").tool_round("c3")
    timeline = conversation.timeline
    plan_blocks = apply_plan_command(
        PlanBook.from_blocks(timeline.blocks),
        PlanCommand(mode="new", steps=("search", "draft")),
        turn_id="turn_2",
        now=T0,
        new_plan_id="plan_a",
    )
    book = PlanBook.from_blocks(plan_blocks)
    first = render(timeline, announce_state, SourcesPool())

    progressed = apply_step_markers(book, "✓ [1] searched", turn_id="turn_2", now=T0)
    later_book = PlanBook.from_blocks([*plan_blocks, *progressed])
    changed_state = AnnounceState(
        iteration=4,
        max_iterations=15,
        budget_tokens_left=3_000,
        now=announce_state.now + timedelta(minutes=7, seconds=13),
        user_timezone="America/New_York",
        open_plans=later_book.open_plans(),
        current_plan_id=later_book.current_plan_id,
        notices=("the bundle was reloaded",),
    )
    pool = SourcesPool().merge([Source(url="https://a.org", title="A", text="fresh")]).pool
    timeline.announce(conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_2.notice.live", text="steer arrived"))
    second = render(timeline, changed_state, pool)

    assert second.cached_prefix() == first.cached_prefix()
    assert second.checkpoints == first.checkpoints
    assert second.section_text("announce") != first.section_text("announce")
    assert second.section_text("sources") != first.section_text("sources")


def test_a_new_round_extends_the_cached_prefix_without_changing_it(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=1).turn("turn_2").tool_round("c1").tool_round("c2").tool_round("c3")
    before = render(conversation.timeline, announce_state)
    conversation.tool_round("c4")
    after = render(conversation.timeline, announce_state)
    assert flat_prefix(after).startswith(flat_prefix(before))
    # The previous request's pre-tail prefix is a prefix of this request's checkpointed parts too.
    assert after.cached_prefix()[:2] == before.cached_prefix()[:2]


def test_rendering_starts_at_the_latest_range_summary(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    conversation.full_turn("turn_1", rounds=1).full_turn("turn_2", rounds=1)
    conversation.turn("turn_3")
    summary = conversation.block(
        BlockType.CONV_RANGE_SUMMARY,
        "su:turn_3.conv.range.summary",
        text="Turns 1-2: searched and answered.",
        meta={"covered_turn_ids": ["turn_1", "turn_2"]},
    )
    conversation.timeline.contribute(summary)
    conversation.tool_round("c1")
    prompt = render(conversation.timeline, announce_state)
    user_text = prompt.section_text("current_turn") + prompt.section_text("history")
    assert "Turns 1-2: searched and answered." in user_text
    assert "turn_1" not in user_text
    assert prompt.start == conversation.timeline.blocks.index(summary)


def test_hidden_block_renders_its_replacement_and_how_to_reopen_it(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1").tool_round("c1", result_text="SECRET-LONG-LOG")
    conversation.timeline.hide("tc:turn_1.c1.result", "build log (40 kB) hidden", editable_from=0)
    hidden = conversation.timeline.blocks[conversation.timeline.indices_of("tc:turn_1.c1.result")[0]]
    text = render_block(hidden)
    assert "SECRET-LONG-LOG" not in text
    assert "build log (40 kB) hidden" in text
    assert 'react.read(["tc:turn_1.c1.result"])' in text


def test_block_text_names_type_and_path_and_renders_data_as_sorted_json(conversation: ConversationBuilder) -> None:
    conversation.turn("turn_1")
    call = conversation.round_blocks("c1")[1]
    assert render_block(call).splitlines() == [
        "[react.tool.call] tc:turn_1.c1.call (application/json)",
        '{"params": {"query": "c1"}, "tool_id": "web.search"}',
    ]


def test_renderer_reuses_text_of_unchanged_blocks_and_rerenders_changed_ones(
    conversation: ConversationBuilder, announce_state: AnnounceState
) -> None:
    renderer = TimelineRenderer()
    conversation.turn("turn_1").tool_round("c1").tool_round("c2")
    timeline = conversation.timeline
    first = renderer.render(timeline, system=SYSTEM, sources=SourcesPool(), announce=announce_state)
    timeline.hide("tc:turn_1.c2.result", "c2 hidden", editable_from=editable_tail_start(timeline))
    second = renderer.render(timeline, system=SYSTEM, sources=SourcesPool(), announce=announce_state)
    fresh = render_timeline(timeline, system=SYSTEM, sources=SourcesPool(), announce=announce_state)
    assert second == fresh
    assert second != first


# --- property: nothing volatile before the last checkpoint -----------------------------------

shapes = st.lists(st.lists(st.integers(1, 3), max_size=6), min_size=1, max_size=4)
announce_states = st.builds(
    AnnounceState,
    iteration=st.integers(1, 30),
    max_iterations=st.just(30),
    budget_tokens_left=st.integers(-1000, 200_000),
    now=st.datetimes(timezones=st.just(T0.tzinfo)),  # type: ignore[arg-type]
    user_timezone=st.sampled_from(["UTC", "Europe/Berlin", "Asia/Tokyo"]),
    notices=st.lists(st.text(max_size=20), max_size=3).map(tuple),
)
pools = st.lists(st.sampled_from(["https://a.org", "https://b.org/x", "file:///tmp/c"]), max_size=3).map(
    lambda urls: SourcesPool().merge([Source(url=u, text="t") for u in urls]).pool
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, announce_states, announce_states, pools, pools, st.integers(0, 3))
def test_cached_prefix_is_byte_identical_whatever_the_clock_budget_plans_and_sources(
    shape: list[list[int]],
    state_a: AnnounceState,
    state_b: AnnounceState,
    pool_a: SourcesPool,
    pool_b: SourcesPool,
    offset: int,
) -> None:
    timeline = ConversationBuilder.from_shape(shape).timeline
    a = render_timeline(timeline, system=SYSTEM, sources=pool_a, announce=state_a, offset=offset)
    b = render_timeline(timeline, system=SYSTEM, sources=pool_b, announce=state_b, offset=offset)
    assert a.cached_prefix() == b.cached_prefix()
    assert a.breakpoint_count() <= MAX_CACHE_BREAKPOINTS
    blocks = timeline.blocks
    for checkpoint in a.checkpoints:
        # A checkpoint ends a round: the next block never continues the same tool call.
        if checkpoint.end < len(blocks) and blocks[checkpoint.end].call_id is not None:
            assert blocks[checkpoint.end].call_id != blocks[checkpoint.end - 1].call_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, st.integers(1, 3))
def test_each_request_rereads_at_most_offset_plus_one_parts_of_the_timeline(
    shape: list[list[int]], offset: int
) -> None:
    """Replays a conversation request by request through a strict prompt cache: a prefix is served only
    at a breakpoint where an earlier request put one (same content blocks, same text). Each request
    then re-reads at most ``offset + 1`` timeline parts (a head or a final answer, and rounds); the
    first request of a turn re-reads only the previous final answer and the new head."""
    state = AnnounceState(iteration=1, max_iterations=30, budget_tokens_left=1, now=T0, user_timezone="UTC")
    conversation = ConversationBuilder()
    renderer = TimelineRenderer()
    written: set[tuple[str, ...]] = set()

    def reread_parts() -> int:
        prompt = renderer.render(
            conversation.timeline, system=SYSTEM, sources=SourcesPool(), announce=state, offset=offset
        )
        assert prompt.breakpoint_count() <= MAX_CACHE_BREAKPOINTS
        prefixes = breakpoint_prefixes(prompt).values()
        served = max((len(prefix) for prefix in prefixes if prefix in written), default=1)
        written.update(prefixes)
        timeline_parts = [part for part in prompt.parts() if part.section in ("history", "current_turn")]
        return 1 + len(timeline_parts) - served

    for turn_number, rounds in enumerate(shape, start=1):
        conversation.turn(f"turn_{turn_number}")
        assert reread_parts() == (1 if turn_number == 1 else 2)
        for round_number, parts in enumerate(rounds, start=1):
            conversation.tool_round(f"c{round_number}", result_parts=parts)
            assert reread_parts() <= offset + 1
        conversation.final()


def test_a_renderer_that_follows_a_growing_timeline_renders_what_a_fresh_one_does(
    announce_state: AnnounceState,
) -> None:
    conversation = ConversationBuilder().full_turn("turn_1", rounds=2).turn("turn_2")
    renderer = TimelineRenderer()
    # a block without a call id joins the round before it, so the last part grows too
    steps = [
        lambda: conversation.tool_round("c1"),
        lambda: conversation.tool_round("c2", result_parts=3),
        lambda: conversation.timeline.contribute(
            conversation.block(BlockType.SYSTEM_MESSAGE, "ar:turn_2.system.message.n1", text="a note")
        ),
        lambda: conversation.tool_round("c3"),
        lambda: conversation.final(),
        lambda: conversation.turn("turn_3"),  # the renderer keeps the earlier turns' parts
        lambda: conversation.tool_round("c1"),
        lambda: conversation.final().turn("turn_4"),
        lambda: conversation.tool_round("c1", result_parts=2),
    ]
    for step in steps:
        step()
        followed = renderer.render(conversation.timeline, system=SYSTEM, sources=SourcesPool(), announce=announce_state)
        assert followed == render(conversation.timeline, announce_state)
        assert followed.characters == len(BLOCK_SEPARATOR.join(part.text for part in followed.parts()))
