"""ANNOUNCE: the per-round state shown at the very end of the prompt, after every cache checkpoint.

Everything that changes from round to round (iteration count, remaining budget, the clock, plan
progress, notices) lives here and nowhere earlier in the prompt, so it never moves the cached prefix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final
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


_LOCAL_MINUTES: dict[tuple[str, int], str] = {}
_LOCAL_MINUTES_LIMIT: Final = 256


def _local_time(now: datetime, timezone: str) -> str:
    """``now`` in ``timezone`` to the minute, with the zone's abbreviation (``2026-03-01 11:00 CET``).

    ANNOUNCE shows it every round, and it changes once a minute; formatting it (the zone's lookup, the
    conversion, ``strftime``) cost about a twentieth of a round's instructions, so the text of a minute is
    kept for the rounds that follow in it. A minute is kept only when the zone's offset is the same, and
    whole minutes, at its start and at its end (no change of offset inside it), so the text is the same
    for every instant of it.
    """
    minute = int(now.timestamp() // 60)
    key = (timezone, minute)
    text = _LOCAL_MINUTES.get(key)
    if text is None:
        zone = ZoneInfo(timezone)
        text = now.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")
        start = datetime.fromtimestamp(minute * 60, UTC)
        offset = start.astimezone(zone).utcoffset()
        end_offset = (start + timedelta(seconds=59.999999)).astimezone(zone).utcoffset()
        if offset is not None and offset == end_offset and offset % timedelta(minutes=1) == timedelta(0):
            if len(_LOCAL_MINUTES) >= _LOCAL_MINUTES_LIMIT:
                _LOCAL_MINUTES.clear()
            _LOCAL_MINUTES[key] = text
    return text


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
