"""An MCP server that is down when the bundle loads, comes up, dies and comes back: recovered in the background,
its tools offered again, every failure with the code docs/mcp.md documents. A real server process throughout."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from turn_harness import TurnHarness, action, complete, turn_harness

from berth.runtime.mcp_tools import add_mcp_tools, sync_mcp_tools
from berth.runtime.toolbox import ToolBox
from berth.tools.contributions import McpServer
from berth.tools.mcp import McpToolManager

SERVER = """
import os, sys
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("probe")

@server.tool(structured_output=False)
def echo(text: str) -> str:
    '''Return text, with the answering process.'''
    return f"{text} from {os.getpid()}"

@server.tool(structured_output=False)
def client_name(ctx: Context) -> str:
    '''The name the client announced in initialize.'''
    return ctx.session.client_params.client_info.name

uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

BUNDLE = """
from berth import AgentSpec, BundleInfo, McpServer, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="probe", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="Use the probe.")

@hookimpl
def berth_tools(ctx):
    return [McpServer(alias="probe", transport="streamable-http", url="{url}", tools=["echo", "client_name"],
                      session="shared", connect_timeout_s=2.0, retry_after_s=0.2, retry_max_s=0.8)]
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """The probe server on a fixed port: started, killed and started again by the test."""

    def __init__(self, script: Path, port: int) -> None:
        self.script, self.port = script, port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(self.script), str(self.port)])
        for _ in range(400):  # until the port accepts connections (bounded: 20 s)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("the probe server exited") from None
                time.sleep(0.05)
        raise RuntimeError("the probe server did not listen")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[ServerProcess]:
    script = tmp_path / "probe_server.py"
    script.write_text(textwrap.dedent(SERVER))
    server = ServerProcess(script, free_port())
    yield server
    if server.process is not None:
        server.kill()


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Wait for ``condition`` (polled), failing with ``what`` after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


def server_state(harness: TurnHarness) -> str:
    manager = harness.registry.current("probe").mcp
    assert manager is not None
    (status,) = manager.statuses()
    return status.state


@asynccontextmanager
async def probe_bundle(tmp_path: Path, url: str) -> AsyncIterator[TurnHarness]:
    folder = tmp_path / "probe_bundle"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE.format(url=url)))
    async with turn_harness(tmp_path, {"probe": {"source": {"path": str(folder)}}}) as harness:
        yield harness


def last_result(harness: TurnHarness) -> dict[str, object]:
    return harness.of_type("tool.result")[-1]


async def test_a_server_down_at_load_comes_back_and_a_killed_one_is_recovered_across_turns(
    tmp_path: Path, probe: ServerProcess
) -> None:
    async with probe_bundle(tmp_path, probe.url) as harness:
        # turn 1: the server is not running; its tools are inactive, with the documented code and since when
        await harness.turn("probe", "echo", script=[action("mcp.probe.echo", text="one"), complete("down")])
        assert last_result(harness)["ok"] is False
        assert str(last_result(harness)["summary"]).startswith("mcp_server_unavailable: ")
        announce = harness.model.requests[0].prompt.section_text("announce")
        assert "mcp.probe.echo" in announce and "down since" in announce

        # the server starts: the background retry lists it, without any turn calling it
        probe.start()
        await until(lambda: server_state(harness) == "available", "the server is listed again")
        await harness.turn(
            "probe",
            "echo",
            script=[action("mcp.probe.echo", text="two"), action("mcp.probe.client_name"), complete("up")],
        )
        echoed, client = harness.of_type("tool.result")[-2:]
        assert echoed["ok"] is True and "two from" in str(echoed["summary"])
        assert client["ok"] is True and "berth" in str(client["summary"])  # clientInfo names Berth
        assert "## mcp.probe.echo" in harness.model.requests[-1].prompt.section_text("system")

        # the server is killed between turns: the next call finds the session lost, reconnects once, finds no
        # server, and the server is marked down and retried in the background
        probe.kill()
        await harness.turn("probe", "echo", script=[action("mcp.probe.echo", text="three"), complete("down")])
        assert str(last_result(harness)["summary"]).startswith("mcp_server_unavailable: ")
        assert server_state(harness) == "unavailable"

        # and started again: recovered in the background, called on the new process
        probe.start()
        await until(lambda: server_state(harness) == "available", "the restarted server is listed again")
        await harness.turn("probe", "echo", script=[action("mcp.probe.echo", text="four"), complete("up")])
        assert last_result(harness)["ok"] is True
        assert f"four from {probe.process.pid if probe.process else ''}" in str(last_result(harness)["summary"])

        # a tool the server does not offer, in the MCP namespace
        await harness.turn("probe", "nope", script=[action("mcp.probe.nope"), complete("no")])
        assert str(last_result(harness)["summary"]).startswith("mcp_unknown_tool: ")


async def test_tools_of_a_server_that_comes_back_are_offered_from_the_next_round(
    probe: ServerProcess,
) -> None:
    config = McpServer(
        alias="probe",
        transport="streamable-http",
        url=probe.url,
        tools=["echo"],
        session="shared",
        connect_timeout_s=2.0,
        retry_after_s=0.2,
        retry_max_s=0.8,
    )
    changes: list[str] = []
    async with McpToolManager(
        [config], lambda name: pytest.fail("no secret is named"), on_change=changes.append
    ) as manager:
        toolbox = ToolBox()
        await add_mcp_tools(toolbox, manager)  # a turn starts while the server is down
        assert "mcp.probe.echo" not in toolbox.tools
        assert toolbox.refusal("mcp.probe.echo")[0] == "mcp_server_unavailable"
        assert sync_mcp_tools(toolbox, manager) == []  # a round later, still down: nothing to announce

        probe.start()
        await until(lambda: manager.statuses()[0].state == "available", "the server is listed again")
        (announced,) = sync_mcp_tools(toolbox, manager)  # the next round
        assert announced.startswith("MCP server probe is available again: mcp.probe.echo (params: ")
        assert "mcp.probe.echo" in toolbox.tools and "mcp.probe.echo" not in toolbox.inactive
        assert changes.count("probe") >= 2  # down, then up


async def test_the_retry_backs_off_and_is_capped(caplog: pytest.LogCaptureFixture) -> None:
    config = McpServer(
        alias="gone",
        transport="streamable-http",
        url=f"http://127.0.0.1:{free_port()}/mcp",
        connect_timeout_s=1.0,
        retry_after_s=0.05,
        retry_max_s=0.2,
    )

    def retries() -> list[str]:
        return [
            r.getMessage().rpartition("next retry in ")[2] for r in caplog.records if "next retry in" in r.getMessage()
        ]

    with caplog.at_level(logging.INFO, logger="berth.tools.mcp.manager"):
        async with McpToolManager([config], lambda name: pytest.fail("no secret is named")) as manager:
            await manager.load()
            (status,) = manager.statuses()
            assert status.state == "unavailable" and status.since is not None
            assert status.next_retry_in_s is not None and 0 <= status.next_retry_in_s <= 0.05
            assert "down since" in status.describe_unavailable()
            await until(lambda: len(retries()) >= 4, "four retries failed")
    assert retries()[:4] == ["0.1 s", "0.2 s", "0.2 s", "0.2 s"]  # doubling from retry_after_s, capped
    went_down = [r for r in caplog.records if "is unavailable" in r.getMessage()]
    assert len(went_down) == 1 and went_down[0].levelno == logging.WARNING
