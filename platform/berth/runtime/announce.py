"""ANNOUNCE: the per-round state shown at the very end of the prompt, after every cache checkpoint.

Everything that changes from round to round (iteration count, remaining budget, the clock, plan
progress, notices) lives here and nowhere earlier in the prompt, so it never moves the cached prefix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from berth.runtime.blocks import Block, UtcTimestamp, format_utc
from berth.runtime.plan import PlanSnapshot

__all__ = ["AnnounceState", "render_announce"]


class AnnounceState(BaseModel):
    """What the runtime tells the model about the current round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    iteration: int = Field(ge=1, description="this round's number, 1-based")
    max_iterations: int = Field(ge=1)
    budget_tokens_left: int
    now: UtcTimestamp
    user_timezone: str = "UTC"
    open_plans: tuple[PlanSnapshot, ...] = ()
    current_plan_id: str | None = None
    notices: tuple[str, ...] = ()
    inactive_tools: tuple[str, ...] = ()
    live_events: tuple[str, ...] = ()
    """The follow-ups and steers the user sent during this turn, one line each (new ones marked NEW)."""

    @field_validator("user_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA timezone {value!r} (e.g. 'Europe/Berlin')") from None
        return value


def _local_time(now: datetime, timezone: str) -> str:
    local = now.astimezone(ZoneInfo(timezone))
    return local.strftime("%Y-%m-%d %H:%M %Z")


def _announced_line(block: Block) -> str:
    if block.text is not None:
        return block.text
    if block.data is not None:
        return json.dumps(block.data, ensure_ascii=False, sort_keys=True)
    return f"{block.type} {block.path}"


def render_announce(state: AnnounceState, announced: Sequence[Block] = ()) -> str:
    """Render the ANNOUNCE section for ``state``, then the round's announced blocks as notices.

    ``announced`` are the blocks :meth:`~berth.runtime.timeline.Timeline.announce` set for this round;
    each becomes one line under ``[NOTICES]``, after ``state.notices``.
    """
    lines = [
        "[ANNOUNCE]",
        f"iteration {state.iteration}/{state.max_iterations} · token budget left: {state.budget_tokens_left}",
        f"now: {format_utc(state.now)} (UTC) · user timezone: {state.user_timezone} "
        f"(local {_local_time(state.now, state.user_timezone)})",
    ]
    if state.open_plans:
        lines.append("[OPEN PLANS]")
        lines.extend(plan.render(current=plan.plan_id == state.current_plan_id) for plan in state.open_plans)
    if state.live_events:
        lines.append("[LIVE EVENTS] sent by the user while you work; a steer changes direction, a follow-up adds to it")
        lines.extend(f"- {line}" for line in state.live_events)
    notices = [*state.notices, *(_announced_line(block) for block in announced)]
    if notices:
        lines.append("[NOTICES]")
        lines.extend(f"- {notice}" for notice in notices)
    if state.inactive_tools:
        lines.append("[INACTIVE TOOLS] " + ", ".join(sorted(state.inactive_tools)))
    return "\n".join(lines)
