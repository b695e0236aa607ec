"""Conversations kept in memory between turns, within a budget of bytes: a conversation dropped for the budget is
read back from the store by its next turn, which goes on exactly as if it had been kept."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from turn_harness import TurnHarness, action, complete, turn_harness

from berth.config.models.assembly import ModelRef
from berth.runtime.loop import TurnRunner
from berth.runtime.resident import ResidentConversations

pytestmark = pytest.mark.usefixtures("storage_kind")

HELLO = {"hello": {"source": {"entry_point": "hello"}}}
CONVERSATIONS = ("conv_a", "conv_b", "conv_c")
SMALL_BUDGET = 60_000
"""About one conversation of two tool turns (each is counted at 30 to 40 KB): most are dropped between turns."""


def keeping(harness: TurnHarness, conversations: ResidentConversations) -> None:
    """Give the harness a runner that keeps its conversations in ``conversations``."""
    ref = ModelRef(provider="scripted", model="script")
    models: Any = lambda role: (ref, harness.summarizer if role == "summarizer" else harness.model)  # noqa: E731
    harness.runner = TurnRunner(store=harness.store, models=models, clock=harness.clock, resident=conversations)


async def tool_turns(harness: TurnHarness, kept: ResidentConversations, rounds: int) -> list[tuple[str, ...]]:
    """Run ``rounds`` tool turns in each conversation, taking them in turn; return every prompt's part texts."""
    for round_ in range(rounds):
        for conversation in CONVERSATIONS:
            script = [action("hello.greet", name=f"Ann {round_}"), complete(f"Greeted for {conversation}, {round_}.")]
            result = await harness.turn(
                "hello", f"{conversation}: greet Ann, {round_}", script=script, conversation=conversation
            )
            assert result.outcome == "completed"
            assert kept.bytes <= kept.budget_bytes
    return [tuple(part.text for part in request.prompt.parts()) for request in harness.model.requests]


async def test_a_conversation_dropped_for_the_budget_is_read_back_and_goes_on_as_if_it_had_been_kept(
    tmp_path: Path,
) -> None:
    prompts = {}
    dropped = {}
    for name, budget in (("kept", 1 << 30), ("dropped", SMALL_BUDGET)):
        async with turn_harness(tmp_path / name, HELLO) as harness:
            kept = ResidentConversations(budget)
            keeping(harness, kept)
            prompts[name] = await tool_turns(harness, kept, rounds=3)
            dropped[name] = kept.dropped
            if name == "dropped":  # the last turn's conversation, and nothing else, fits
                assert len(kept) <= 1
    assert dropped["kept"] == 0 and dropped["dropped"] >= 6
    assert len(prompts["dropped"]) == len(prompts["kept"]) == 3 * len(CONVERSATIONS) * 2
    # Every model call of the conversations read back saw exactly what it saw when they stayed in memory
    assert prompts["dropped"] == prompts["kept"]
    last = prompts["dropped"][-1]
    assert all(f"conv_c: greet Ann, {n}" in "\n".join(last) for n in range(3))  # its whole history


async def test_what_a_kept_conversation_is_counted_at_is_near_what_dropping_it_frees(tmp_path: Path) -> None:
    """The budget counts memory: dropping every kept conversation frees about what they were counted at
    (``tracemalloc``), so a process keeping a budget's worth holds about that much."""
    async with turn_harness(tmp_path, HELLO) as harness:
        kept = ResidentConversations()
        keeping(harness, kept)
        tracemalloc.start()  # before the turns: only what is allocated while tracing is seen freed
        try:
            await tool_turns(harness, kept, rounds=4)
            harness.model.requests.clear()  # the model's record of prompts would keep rendered text alive
            conversations = len(kept)
            counted = kept.bytes
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            kept.configure(0)
            gc.collect()
            freed = before - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert conversations == len(CONVERSATIONS)
    assert 0.6 < counted / max(freed, 1) < 1.5, (counted, freed)
