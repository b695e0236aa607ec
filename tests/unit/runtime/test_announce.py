"""ANNOUNCE: iteration, budget, UTC time and user timezone, open plans, notices, inactive tools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from runtime_builders import T0

from berth.runtime.announce import AnnounceState, render_announce
from berth.runtime.blocks import Block, BlockType
from berth.runtime.plan import PlanSnapshot, PlanStep


def snapshot(plan_id: str, *statuses: str) -> PlanSnapshot:
    steps = tuple(PlanStep(n=i, label=f"step {i}", status=s) for i, s in enumerate(statuses, start=1))  # type: ignore[arg-type]
    return PlanSnapshot(plan_id=plan_id, steps=steps, origin_turn_id="turn_1", last_turn_id="turn_1")


def test_announce_shows_iteration_budget_time_and_timezone() -> None:
    state = AnnounceState(
        iteration=3, max_iterations=15, budget_tokens_left=42_000, now=T0, user_timezone="Europe/Berlin"
    )
    lines = render_announce(state).splitlines()
    assert lines[0] == "[ANNOUNCE]"
    assert lines[1] == "iteration 3/15 · token budget left: 42000"
    assert lines[2] == "now: 2026-03-01T10:00:00Z (UTC) · user timezone: Europe/Berlin (local 2026-03-01 11:00 CET)"


def test_announce_lists_open_plans_with_markers_and_marks_the_current_one() -> None:
    state = AnnounceState(
        iteration=1,
        max_iterations=15,
        budget_tokens_left=1,
        now=T0,
        open_plans=(snapshot("plan_b", "done", "failed", "in_progress", "pending"), snapshot("plan_a", "pending")),
        current_plan_id="plan_b",
    )
    text = render_announce(state)
    assert (
        "[OPEN PLANS]\nplan_id=plan_b (current)\n  ✓ [1] step 1\n  ✗ [2] step 2\n  … [3] step 3\n  □ [4] step 4" in text
    )
    assert "plan_id=plan_a\n  □ [1] step 1" in text


def test_announce_lists_notices_then_announced_blocks_then_inactive_tools() -> None:
    announced = Block(
        type=BlockType.SYSTEM_MESSAGE,
        path="ar:turn_1.notice.ttl",
        turn_id="turn_1",
        ts=T0,
        author="runtime",
        text="older turns were pruned; react.read(path) restores them",
    )
    data_notice = announced.model_copy(update={"text": None, "data": {"reloaded": "docs"}})
    state = AnnounceState(
        iteration=1,
        max_iterations=2,
        budget_tokens_left=0,
        now=T0 + timedelta(days=1),
        notices=("the bundle was reloaded",),
        inactive_tools=("web.search", "mcp.time.now"),
    )
    text = render_announce(state, (announced, data_notice))
    assert text.endswith(
        "[NOTICES]\n- the bundle was reloaded\n- older turns were pruned; react.read(path) restores them\n"
        '- {"reloaded": "docs"}\n[INACTIVE TOOLS] mcp.time.now, web.search'
    )


def test_unknown_timezone_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown IANA timezone"):
        AnnounceState(iteration=1, max_iterations=1, budget_tokens_left=0, now=T0, user_timezone="Mars/Olympus")


@settings(max_examples=300, deadline=None)
@given(
    instant=st.datetimes(min_value=datetime(1890, 1, 1), max_value=datetime(2040, 12, 31)),
    seconds=st.lists(st.integers(0, 59_999_999), min_size=2, max_size=3),
    timezone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Africa/Monrovia"]),
)
def test_the_local_time_is_what_strftime_gives_for_every_instant_of_a_minute(
    instant: datetime, seconds: list[int], timezone: str
) -> None:
    """The local time is kept per minute: any instant of that minute (a zone's offset changing, or one of
    seconds, as Monrovia's until 1972, included) still reads exactly as formatting it anew."""
    minute = instant.replace(second=0, microsecond=0, tzinfo=UTC)
    for offset in seconds:
        now = minute + timedelta(microseconds=offset)
        expected = now.astimezone(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M %Z")
        state = AnnounceState(iteration=1, max_iterations=2, budget_tokens_left=0, now=now, user_timezone=timezone)
        assert render_announce(state).splitlines()[2].endswith(f"(local {expected})")


def test_the_utc_time_shows_microseconds_only_when_there_are_some() -> None:
    for now, shown in ((T0, "2026-03-01T10:00:00Z"), (T0 + timedelta(microseconds=5), "2026-03-01T10:00:00.000005Z")):
        state = AnnounceState(iteration=1, max_iterations=2, budget_tokens_left=0, now=now)
        assert render_announce(state).splitlines()[2].startswith(f"now: {shown} (UTC)")
