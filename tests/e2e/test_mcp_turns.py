"""MCP servers as tools inside a turn: the reference ``mcp-server-time`` over stdio, and a dead server."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from turn_harness import action, complete, turn_harness

pytest.importorskip("mcp_server_time", reason="mcp-server-time is not installed (bash .ci/install-mcp-peers)")

BUNDLE = f"""
from berth import AgentSpec, BundleInfo, McpServer, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="clock", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="Tell the time.")

@hookimpl
def berth_tools(ctx):
    return [
        McpServer(alias="time", transport="stdio", command={sys.executable!r}, args=["-m", "mcp_server_time"]),
        McpServer(alias="dead", transport="stdio", command={sys.executable!r},
                  args=["-c", "import time; time.sleep(60)"], connect_timeout_s=1.0),
    ]
"""


async def test_an_mcp_tool_is_called_through_the_turn_and_a_dead_server_is_inactive(tmp_path: Path) -> None:
    folder = tmp_path / "clock"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE))
    async with turn_harness(tmp_path, {"clock": {"source": {"path": str(folder)}}}) as harness:
        result = await harness.turn(
            "clock",
            "what time is it in Tokyo?",
            script=[
                action("mcp.time.get_current_time", timezone="Asia/Tokyo"),
                action("mcp.time.get_current_time", tz="Asia/Tokyo"),
                complete("It is late in Tokyo."),
            ],
        )
        assert result.outcome == "completed"
        first_request = harness.model.requests[0].prompt
        assert "## mcp.time.get_current_time" in first_request.section_text("system")
        assert "mcp.dead" in first_request.section_text("announce")  # the dead server is listed as inactive
        results = harness.of_type("tool.result")
        assert results[0]["ok"] is True
        assert "Asia/Tokyo" in results[0]["summary"]
        assert results[1]["ok"] is False
        assert "tool_params_invalid" in results[1]["summary"]
