"""Bundle code is not trusted to yield: an async tool that blocks runs on its generation's own loop, so the host
answers other requests meanwhile and the tool's timeout holds."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
import stall_bundle
from api_stack import ApiStack, api_stack
from stall_bundle import ANSWER, BLOCK, stall_bundles


async def turn_events(stack: ApiStack, who: str, tenant: str, project: str) -> list[tuple[str, str, dict]]:
    conversation = await stack.conversation(who, tenant, project)
    started = await stack.start_turn(conversation, "go", who, tenant, project)
    return await stack.events(started["events_url"], who)


async def test_a_blocking_async_tool_times_out_at_its_limit_and_the_host_keeps_answering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stall_bundle.reset()
    caplog.set_level(logging.WARNING, logger="berth.host.bundle_loop")
    async with api_stack(tmp_path, [BLOCK, ANSWER, ANSWER], bundles=stall_bundles(tmp_path)) as stack:
        blocked_turn = asyncio.create_task(turn_events(stack, "acme", "acme", "support"))
        assert await asyncio.to_thread(stall_bundle.entered.wait, 30), "the tool never ran"

        # while the tool blocks its loop: the host answers a health check and another tenant's whole turn
        began = time.perf_counter()
        health = await stack.client.get("/healthz")
        health_s = time.perf_counter() - began
        began = time.perf_counter()
        other = await turn_events(stack, "globex", "globex", "research")
        other_turn_s = time.perf_counter() - began
        assert health.status_code == 200
        assert other[-1][1] == "turn.completed"
        assert not stall_bundle.finished.is_set(), "the host answered only after the tool stopped blocking"

        # the blocked turn ends with tool_timeout at the tool's limit, not when the block ends
        events = await blocked_turn
        assert not stall_bundle.finished.is_set()
        result = next(data for _, kind, data in events if kind == "tool.result")
        assert result["ok"] is False and result["summary"].startswith("tool_timeout: stall.block")
        assert events[-1][1] == "turn.completed"

        # the watchdog names the tool that keeps its loop blocked
        for _ in range(400):
            if any("tool 'block' blocks the event loop" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("no WARNING named the blocking tool")
        assert await asyncio.to_thread(stall_bundle.finished.wait, 30)
    # generous bounds: the point is that neither waited for the 4 s block
    assert health_s < 1.0, health_s
    assert other_turn_s < 2.0, other_turn_s
