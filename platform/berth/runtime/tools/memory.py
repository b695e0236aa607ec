"""``react.memsearch``, ``react.hide`` and ``react.plan``: memory over turns, the editable tail, plans."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from berth.runtime.memory import MemsearchRequest
from berth.runtime.plan import PlanCommand, PlanError, apply_plan_command
from berth.runtime.timeline import TimelineError
from berth.runtime.toolbox import RuntimeTool, ToolNotice
from berth.runtime.turn import TurnState
from berth.tools.results import ToolOutput


async def run_memsearch(params: BaseModel, state: TurnState) -> Any:
    """Search earlier turns (this conversation, or the user's conversations in this tenant/project)."""
    assert isinstance(params, MemsearchRequest)
    if state.memory is None:
        raise ToolNotice("tool_inactive", "memory search is not available on this host")
    hits = await state.memory.search(params, now=state.now())
    rows = [
        {
            "path": hit.path,
            "conversation": hit.conversation_id,
            "turn": hit.turn_id,
            "kind": hit.kind,
            "ts": hit.ts.isoformat(),
            "snippet": hit.snippet,
        }
        for hit in hits
    ]
    return ToolOutput(value=rows or "no matches", summary=f"{len(rows)} memory hit(s)")


class HideParams(BaseModel):
    """Params of ``react.hide``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="a block path of the last rounds (e.g. tc:turn_3.c2.result)")
    replacement: str = Field(min_length=1, description="what the hidden content was, in one line")


async def run_hide(params: BaseModel, state: TurnState) -> Any:
    """Hide bulky content of the editable tail behind a one-line replacement (react.read re-opens it)."""
    assert isinstance(params, HideParams)
    try:
        count = state.timeline.hide(params.path, params.replacement, editable_from=state.editable_from)
    except TimelineError as error:
        raise ToolNotice(error.code, str(error)) from None
    return ToolOutput(value={"hidden": count, "path": params.path}, summary=f"hid {params.path}")


async def run_plan(params: BaseModel, state: TurnState) -> Any:
    """Create, replace, activate or close a plan; the snapshot blocks join the timeline."""
    assert isinstance(params, PlanCommand)
    call_id = state.current_call_id
    try:
        blocks = apply_plan_command(
            state.plan_book(),
            params,
            turn_id=state.turn_id,
            now=state.now(),
            new_plan_id=state.next_plan_id(),
            call_id=call_id,
        )
    except PlanError as error:
        raise ToolNotice(error.code, error.message) from None
    state.pending_blocks.extend(blocks)
    ack = blocks[-1].text or ""
    return ToolOutput(value=ack, summary=ack)


def memsearch_tool() -> RuntimeTool:
    """``react.memsearch``."""
    return RuntimeTool(
        "react.memsearch",
        "Search memory: earlier prompts, answers, attachments and summaries. Modes: hybrid (query), timeline "
        "(overview), ordinal (n-th turn), temporal (from/to). Scope: conversation or user.",
        MemsearchRequest,
        run_memsearch,
        read_only=True,
    )


def hide_tool() -> RuntimeTool:
    """``react.hide``."""
    return RuntimeTool(
        "react.hide",
        "Hide a block of the last rounds behind a one-line replacement to save context; react.read re-opens it.",
        HideParams,
        run_hide,
    )


def plan_tool() -> RuntimeTool:
    """``react.plan``."""
    return RuntimeTool(
        "react.plan",
        "Manage plans: mode new|replace (with steps), activate|close (with plan_id). Report progress with "
        "lines like '✓ [1]', '… [2]', '✗ [3]' in your action notes.",
        PlanCommand,
        run_plan,
    )


__all__ = ["HideParams", "hide_tool", "memsearch_tool", "plan_tool"]
