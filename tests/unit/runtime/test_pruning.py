"""TTL pruning: cold cache → older turns as compact cards, newest turns intact, nothing deleted."""

from __future__ import annotations

from datetime import timedelta

from runtime_builders import T0, ConversationBuilder

from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import BlockType
from berth.runtime.pruning import PRUNING_NOTICE, cache_is_cold, plan_pruning, render_pruned_turn
from berth.runtime.render import render_timeline
from berth.runtime.sources import SourcesPool

TTL = 300


def five_turns() -> ConversationBuilder:
    conversation = ConversationBuilder()
    for n in range(1, 5):
        conversation.full_turn(f"turn_{n}", rounds=1)
    return conversation.turn("turn_5").tool_round("c1")


def test_cache_is_cold_only_after_the_ttl_and_never_without_one() -> None:
    assert not cache_is_cold(now=T0, last_request_at=T0 - timedelta(seconds=TTL), cache_ttl_seconds=TTL)
    assert cache_is_cold(now=T0, last_request_at=T0 - timedelta(seconds=TTL + 1), cache_ttl_seconds=TTL)
    assert cache_is_cold(now=T0, last_request_at=None, cache_ttl_seconds=TTL)
    assert not cache_is_cold(now=T0, last_request_at=None, cache_ttl_seconds=None)


def test_cold_cache_prunes_all_but_the_current_and_newest_turns() -> None:
    timeline = five_turns().timeline
    pruned = plan_pruning(
        timeline, now=T0, last_request_at=T0 - timedelta(hours=1), cache_ttl_seconds=TTL, keep_recent_turns=2
    )
    assert pruned == {"turn_1", "turn_2"}


def test_warm_cache_keeps_the_previous_decision() -> None:
    timeline = five_turns().timeline
    previous = frozenset({"turn_1"})
    warm = plan_pruning(
        timeline, now=T0, last_request_at=T0, cache_ttl_seconds=TTL, previously_pruned=previous, keep_recent_turns=0
    )
    assert warm == previous


def test_without_a_ttl_nothing_is_pruned() -> None:
    timeline = five_turns().timeline
    assert plan_pruning(timeline, now=T0, last_request_at=None, cache_ttl_seconds=None) == frozenset()


def test_card_lists_one_line_per_artifact_with_its_logical_path() -> None:
    conversation = ConversationBuilder().full_turn("turn_1", rounds=1)
    card = render_pruned_turn(conversation.timeline.blocks).splitlines()
    assert card[0] == "[TURN turn_1 · pruned]"
    assert "- user.prompt ar:turn_1.user.prompt — What changed?" in card
    assert "- react.tool.result tc:turn_1.c1.result" in card
    assert "- assistant.completion ar:turn_1.assistant.completion — Done [[S:1]]." in card


def test_card_is_the_working_summary_when_the_turn_has_one() -> None:
    conversation = ConversationBuilder().full_turn("turn_1", rounds=1)
    conversation.timeline.contribute(
        conversation.block(
            BlockType.CONV_WORKING_SUMMARY, "ws:turn_1.conv.working.summary", text="Goal: X. Outcome: Y."
        )
    )
    card = render_pruned_turn(conversation.timeline.blocks)
    assert card == "[TURN turn_1 · pruned] working summary ws:turn_1.conv.working.summary\nGoal: X. Outcome: Y."


def test_pruned_render_shows_cards_and_the_read_notice_and_keeps_every_block(
    announce_state: AnnounceState,
) -> None:
    conversation = five_turns()
    timeline = conversation.timeline
    before = timeline.to_payload()
    pruned = frozenset({"turn_1", "turn_2"})
    prompt = render_timeline(timeline, system="S", sources=SourcesPool(), announce=announce_state, pruned_turns=pruned)
    history = prompt.section_text("history")
    assert "[TURN turn_1 · pruned]" in history
    assert "[TURN turn_2 · pruned]" in history
    assert "[TURN turn_3] started" in history
    assert history.index(PRUNING_NOTICE) > history.index("[TURN turn_2 · pruned]")
    assert history.index(PRUNING_NOTICE) < history.index("[TURN turn_3] started")
    assert timeline.to_payload() == before


def test_current_turn_is_never_pruned(announce_state: AnnounceState) -> None:
    timeline = five_turns().timeline
    prompt = render_timeline(
        timeline, system="S", sources=SourcesPool(), announce=announce_state, pruned_turns=frozenset({"turn_5"})
    )
    assert "pruned" not in prompt.section_text("current_turn")
    assert PRUNING_NOTICE not in prompt.section_text("history")


def test_pruning_keeps_the_cached_prefix_stable_while_the_decision_stands(announce_state: AnnounceState) -> None:
    timeline = five_turns().timeline
    pruned = frozenset({"turn_1"})
    later = announce_state.model_copy(update={"now": announce_state.now + timedelta(seconds=30), "iteration": 4})
    first = render_timeline(timeline, system="S", sources=SourcesPool(), announce=announce_state, pruned_turns=pruned)
    second = render_timeline(timeline, system="S", sources=SourcesPool(), announce=later, pruned_turns=pruned)
    assert first.cached_prefix() == second.cached_prefix()
