"""A resumed turn numbers its calls and plans after those its log holds, and a tool learns which call it runs in
(the idempotency key that tells the re-run of one call from another call)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runtime_builders import T0, ConversationBuilder

from berth import current_call, tool
from berth.runtime.blocks import BlockType
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline
from berth.runtime.toolbox import function_tool
from berth.runtime.turn import BundleView, TurnState
from berth.runtime.workspace import Workspace
from berth.storage.scope import ConversationScope
from berth.tools.spec import tool_spec_of

SCOPE = ConversationScope(tenant="acme", project="support", user_id="ann", conversation_id="conv-1")


def state(turn_id: str = "turn_1") -> TurnState:
    return TurnState(
        scope=SCOPE,
        turn_id=turn_id,
        bundle=BundleView("hello"),
        timeline=Timeline(),
        sources=SourcesPool(),
        workspace=Workspace(turn_id, cast(Any, None)),
        clock=lambda: T0,
    )


@given(st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=6))
def test_a_resumed_turn_numbers_its_calls_after_the_highest_logged_one(logged: list[int]) -> None:
    builder = ConversationBuilder().turn("turn_1")
    blocks = [block for number in logged for block in builder.round_blocks(f"c{number}")]
    resumed = state()
    resumed.continue_numbering(blocks)
    assert resumed.next_call_id() == f"c{max(logged) + 1}"
    assert resumed.next_call_id() == f"c{max(logged) + 2}"


def test_plans_and_other_turns_blocks_are_counted_apart() -> None:
    builder = ConversationBuilder().turn("turn_0")
    earlier = builder.round_blocks("c9")  # another turn's calls do not count
    builder.turn("turn_1")
    plan = builder.block(BlockType.REACT_PLAN, "ar:turn_1.react.plan.1p2")
    ack = builder.block(BlockType.REACT_PLAN_ACK, "ar:turn_1.react.plan.ack.1p3")
    thinking = builder.block(BlockType.REACT_THINKING, "ar:turn_1.react.thinking.c4")
    resumed = state()
    resumed.continue_numbering([*earlier, plan, ack, thinking])
    assert (resumed.next_call_id(), resumed.next_plan_id()) == ("c5", "1p4")
    fresh = state()
    fresh.continue_numbering([])
    assert (fresh.next_call_id(), fresh.next_plan_id()) == ("c1", "1p1")


@tool
def where_am_i() -> str:
    """Say which call this is."""
    return current_call().idempotency_key


@tool
async def where_am_i_async() -> str:
    """Say which call this is, from a coroutine."""
    await asyncio.sleep(0)
    return current_call().idempotency_key


@pytest.mark.parametrize("function", [where_am_i, where_am_i_async])
async def test_a_tool_reads_the_call_it_runs_in(function: Any) -> None:
    spec = tool_spec_of(function)
    assert spec is not None
    runtime_tool = function_tool("hello.where", spec)
    running = state("turn_7")
    running.current_call_id = "c3"
    assert await runtime_tool.run(spec.validate_params({}), running) == "turn_7.c3"
    with pytest.raises(LookupError, match="only known inside a turn's tool call"):
        current_call()  # outside the call, nothing leaks
