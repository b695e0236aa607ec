"""Compaction: whole old turns become one conv.range.summary; the payload starts at it; failures are reported."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_builders import T0, ConversationBuilder

from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import BlockType
from berth.runtime.compaction import (
    CompactionOutcome,
    ContextOverflowError,
    SummaryRequest,
    call_with_overflow_retry,
    compact_timeline,
    estimate_timeline_tokens,
    needs_compaction,
)
from berth.runtime.pruning import render_pruned_turn
from berth.runtime.render import render_timeline
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline


class RecordingSummarizer:
    """A summarizer that answers from a script and records every request it got."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers) or ["The user asked about X; we found Y."]
        self.requests: list[SummaryRequest] = []

    async def __call__(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def long_conversation(turns: int = 6, rounds: int = 3, result_chars: int = 2_000) -> ConversationBuilder:
    conversation = ConversationBuilder()
    for n in range(1, turns + 1):
        conversation.turn(f"turn_{n}", prompt=f"Question number {n}?")
        for r in range(1, rounds + 1):
            conversation.tool_round(f"c{r}", result_text="x" * result_chars, result_parts=2)
        if n < turns:
            conversation.final(f"Answer number {n}.")
    return conversation


def compact(timeline: Timeline, summarizer: RecordingSummarizer, **options: object) -> CompactionOutcome:
    return asyncio.run(
        compact_timeline(timeline, summarizer=summarizer, now=T0, **options)  # type: ignore[arg-type]
    )


def test_needs_compaction_only_above_threshold_times_budget() -> None:
    assert not needs_compaction(900, context_budget_tokens=1_000, threshold=0.9)
    assert needs_compaction(901, context_budget_tokens=1_000, threshold=0.9)


def test_input_under_the_threshold_is_left_alone_and_the_summarizer_is_not_called() -> None:
    timeline = long_conversation(turns=2).timeline
    before = timeline.to_payload()
    summarizer = RecordingSummarizer()
    outcome = compact(timeline, summarizer, context_budget_tokens=1_000_000)
    assert outcome.status == "not_needed"
    assert not outcome.applied
    assert summarizer.requests == []
    assert timeline.to_payload() == before


def test_oldest_whole_turns_become_one_summary_at_the_head_of_the_payload() -> None:
    timeline = long_conversation().timeline
    tokens = estimate_timeline_tokens(timeline)
    summarizer = RecordingSummarizer()
    outcome = compact(timeline, summarizer, context_budget_tokens=tokens, threshold=0.5, target_ratio=0.5)

    assert outcome.applied
    assert outcome.tokens_after < outcome.tokens_before
    payload = timeline.to_payload().blocks
    summary = payload[0]
    assert summary.type == BlockType.CONV_RANGE_SUMMARY
    assert outcome.summary == summary
    covered = outcome.covered_turn_ids
    assert covered[0] == "turn_1"
    assert summary.meta["covered_turn_ids"] == list(covered)
    assert summary.path == f"su:{covered[-1]}.conv.range.summary"
    assert all(block.turn_id not in covered for block in payload[1:])
    assert payload[-1].turn_id == "turn_6", "the current turn is never compacted"
    assert "The user asked about X; we found Y." in (summary.text or "")


def test_summary_lists_the_dropped_logical_paths_of_the_covered_turns() -> None:
    timeline = long_conversation().timeline
    original = timeline.blocks
    outcome = compact(timeline, RecordingSummarizer(), context_budget_tokens=1_000, threshold=0.5)
    assert outcome.summary is not None
    dropped = outcome.summary.meta["dropped_paths"]
    expected = list(dict.fromkeys(b.path for b in original if b.turn_id in outcome.covered_turn_ids))
    assert dropped == expected
    assert "tc:turn_1.c1.call" in dropped
    assert "tc:turn_1.c1.result" in dropped
    assert "tc:turn_1.c1.result" in (outcome.summary.text or "")


def test_summarizer_gets_the_rendered_covered_turns_and_a_token_budget() -> None:
    timeline = long_conversation(turns=3).timeline
    summarizer = RecordingSummarizer()
    compact(timeline, summarizer, context_budget_tokens=100, threshold=0.5, max_summary_tokens=300)
    (request,) = summarizer.requests
    assert request.turn_ids == ("turn_1", "turn_2")
    assert "[user.prompt] ar:turn_1.user.prompt\nQuestion number 1?" in request.transcript
    assert "Question number 3?" not in request.transcript
    assert request.previous_summary is None
    assert (request.max_tokens, request.attempt) == (300, 1)


def test_only_the_current_turn_left_means_nothing_to_compact() -> None:
    timeline = long_conversation(turns=1).timeline
    summarizer = RecordingSummarizer()
    outcome = compact(timeline, summarizer, context_budget_tokens=10)
    assert outcome.status == "nothing_to_compact"
    assert summarizer.requests == []


def test_a_summary_that_does_not_shrink_the_input_is_retried_once_then_reported_and_not_applied() -> None:
    timeline = long_conversation(turns=2, result_chars=10).timeline
    before = timeline.to_payload()
    summarizer = RecordingSummarizer("y" * 200_000)
    outcome = compact(timeline, summarizer, context_budget_tokens=10)
    assert outcome.status == "not_shrunk"
    assert not outcome.applied
    assert outcome.attempts == 2
    assert len(summarizer.requests) == 2
    assert timeline.to_payload() == before
    assert "did not shrink" in outcome.message


def test_a_failing_summarizer_is_retried_once_with_a_tighter_budget() -> None:
    timeline = long_conversation().timeline
    summarizer = RecordingSummarizer(RuntimeError("model overloaded"), "Short summary.")
    outcome = compact(timeline, summarizer, context_budget_tokens=1_000, max_summary_tokens=400)
    assert outcome.applied
    assert outcome.attempts == 2
    assert [r.attempt for r in summarizer.requests] == [1, 2]
    assert [r.max_tokens for r in summarizer.requests] == [400, 200]
    assert "model overloaded" in outcome.errors[0]


def test_two_failures_leave_the_timeline_unchanged_and_say_why() -> None:
    timeline = long_conversation().timeline
    before = timeline.to_payload()
    summarizer = RecordingSummarizer(RuntimeError("down"), "   ")
    outcome = compact(timeline, summarizer, context_budget_tokens=1_000)
    assert outcome.status == "summarizer_failed"
    assert timeline.to_payload() == before
    assert "down" in outcome.message
    assert "empty summary" in outcome.message


def test_a_second_compaction_folds_the_previous_summary_in() -> None:
    conversation = long_conversation(turns=4)
    timeline = conversation.timeline
    tokens = estimate_timeline_tokens(timeline)
    first = compact(
        timeline,
        RecordingSummarizer("first"),
        context_budget_tokens=tokens,
        threshold=0.5,
        target_ratio=0.9,
        max_summary_tokens=50,
    )
    assert first.covered_turn_ids == ("turn_1",)
    conversation.final("Answer number 4.")
    for n in (5, 6):
        conversation.turn(f"turn_{n}").tool_round("c1", result_text="z" * 4_000)
        if n == 5:
            conversation.final()
    summarizer = RecordingSummarizer("second")
    second = compact(timeline, summarizer, context_budget_tokens=10)
    assert second.applied
    assert summarizer.requests[0].previous_summary is not None
    assert "first" in summarizer.requests[0].previous_summary
    assert second.covered_turn_ids == ("turn_1", "turn_2", "turn_3", "turn_4", "turn_5")
    assert summarizer.requests[0].turn_ids == ("turn_2", "turn_3", "turn_4", "turn_5")
    assert second.summary is not None
    assert "tc:turn_1.c1.result" in second.summary.meta["dropped_paths"]
    payload = timeline.to_payload().blocks
    assert [b.type for b in payload].count(BlockType.CONV_RANGE_SUMMARY) == 1


def test_force_compacts_below_the_threshold() -> None:
    timeline = long_conversation(turns=3).timeline
    outcome = compact(timeline, RecordingSummarizer(), context_budget_tokens=10_000_000, force=True)
    assert outcome.applied


def test_rendering_after_compaction_starts_at_the_summary(announce_state: AnnounceState) -> None:
    timeline = long_conversation().timeline
    compact(timeline, RecordingSummarizer("Remember: Y."), context_budget_tokens=1_000)
    prompt = render_timeline(timeline, system="SYS", sources=SourcesPool(), announce=announce_state)
    history = prompt.section_text("history")
    assert history.startswith("[conv.range.summary] su:")
    assert "Remember: Y." in history
    assert "Question number 1?" not in history


def test_a_pruned_summary_turn_keeps_its_summary_text() -> None:
    timeline = long_conversation().timeline
    outcome = compact(timeline, RecordingSummarizer("Remember: Y."), context_budget_tokens=1_000)
    assert outcome.summary is not None
    assert "Remember: Y." in render_pruned_turn([outcome.summary])


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.lists(st.integers(1, 3), min_size=0, max_size=3), min_size=2, max_size=6),
    budget=st.integers(1, 3_000),
)
def test_compaction_cuts_only_at_turn_boundaries_so_no_call_loses_its_result(
    shape: list[list[int]], budget: int
) -> None:
    conversation = ConversationBuilder.from_shape(shape)
    timeline = conversation.timeline
    original = timeline.blocks
    outcome = compact(timeline, RecordingSummarizer("s"), context_budget_tokens=budget)
    payload = timeline.to_payload().blocks
    if not outcome.applied:
        assert payload == tuple(original)
        return
    kept = payload[1:]
    assert tuple(original[len(original) - len(kept) :]) == kept, "the kept blocks are an untouched suffix"
    first_kept = len(original) - len(kept)
    assert original[first_kept - 1].turn_id != original[first_kept].turn_id, "the cut is at a turn boundary"
    kept_paths = {b.path for b in kept}
    for block in kept:
        if block.type == BlockType.REACT_TOOL_CALL:
            assert block.path.removesuffix(".call") + ".result" in kept_paths


def overflowing_call(failures: int) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise ContextOverflowError("prompt is too long: 210000 tokens > 200000 maximum")
        return "answer"

    return call, calls


def test_context_overflow_forces_one_compaction_and_one_retry() -> None:
    timeline = long_conversation().timeline
    call, calls = overflowing_call(failures=1)

    async def forced() -> CompactionOutcome:
        return await compact_timeline(
            timeline, summarizer=RecordingSummarizer(), context_budget_tokens=10**9, now=T0, force=True
        )

    assert asyncio.run(call_with_overflow_retry(call, compact=forced)) == "answer"
    assert len(calls) == 2
    assert timeline.blocks[0].type == BlockType.CONV_RANGE_SUMMARY


def test_a_second_overflow_is_raised_not_retried_again() -> None:
    timeline = long_conversation().timeline
    call, calls = overflowing_call(failures=2)

    async def forced() -> CompactionOutcome:
        return await compact_timeline(
            timeline, summarizer=RecordingSummarizer(), context_budget_tokens=10**9, now=T0, force=True
        )

    with pytest.raises(ContextOverflowError):
        asyncio.run(call_with_overflow_retry(call, compact=forced))
    assert len(calls) == 2


def test_overflow_without_anything_to_compact_is_raised_with_the_reason() -> None:
    timeline = long_conversation(turns=1).timeline
    call, calls = overflowing_call(failures=1)

    async def forced() -> CompactionOutcome:
        return await compact_timeline(
            timeline, summarizer=RecordingSummarizer(), context_budget_tokens=10, now=T0, force=True
        )

    with pytest.raises(ContextOverflowError, match="only the current turn"):
        asyncio.run(call_with_overflow_retry(call, compact=forced))
    assert len(calls) == 1
