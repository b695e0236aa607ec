"""Fault tests against our own stdio server (servers/faulty.py): killed mid-call, hung on start, huge results,
and processes that must not outlive their sessions or the host."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from berth.config.secrets import Secret
from berth.tools.contributions import McpServer
from berth.tools.mcp import McpToolError, McpToolManager, preview_tool_output, tool_output_size

Lookup = Callable[[str], Secret]
ServerFactory = Callable[..., McpServer]
REPO_ROOT = Path(__file__).resolve().parents[3]


async def test_a_server_killed_mid_call_is_reconnected_once_and_the_call_retried(
    fault_server: ServerFactory, fault_state: Path, secret: Lookup, no_leftover_processes: list[int]
) -> None:
    async with McpToolManager([fault_server()], secret) as manager:
        output = await manager.call("mcp.faulty.crash_once", {"marker": "first"})
        killed = int((fault_state / "first").read_text())
        no_leftover_processes.append(killed)
        assert output.value == f"answered by {output.value.split()[-1]}"
        assert int(output.value.split()[-1]) != killed
        # The new session serves later calls too.
        assert (await manager.call("mcp.faulty.echo", {"text": "still here"})).value == "still here"


async def test_a_server_that_dies_again_after_the_reconnect_gives_a_clear_error(
    fault_server: ServerFactory, secret: Lookup
) -> None:
    async with McpToolManager([fault_server()], secret) as manager:
        with pytest.raises(McpToolError) as lost:
            await manager.call("mcp.faulty.crash", {})
        assert lost.value.code == "mcp_session_lost"
        assert "reconnected and the call retried once" in lost.value.message
        # The server itself is fine for other tools: the next call opens a new session.
        assert (await manager.call("mcp.faulty.echo", {"text": "ok"})).value == "ok"


async def test_a_server_killed_from_outside_during_a_call_is_retried_on_a_new_process(
    fault_server: ServerFactory, secret: Lookup, no_leftover_processes: list[int]
) -> None:
    async def kill_the_server(done: float, total: float | None, message: str | None) -> None:
        assert message is not None
        no_leftover_processes.append(int(message))
        os.kill(int(message), signal.SIGKILL)

    async with McpToolManager([fault_server(session="per_conversation")], secret) as manager:
        output = await manager.call(
            "mcp.faulty.block_once", {"marker": "m"}, "conversation", on_progress=kill_the_server
        )
    assert output.value.startswith("answered by ")


async def test_a_server_that_died_between_calls_is_reopened_for_the_next_call(
    fault_server: ServerFactory, secret: Lookup, no_leftover_processes: list[int]
) -> None:
    async with McpToolManager([fault_server()], secret) as manager:
        first = int((await manager.call("mcp.faulty.pid", {})).value)
        no_leftover_processes.append(first)
        os.kill(first, signal.SIGKILL)
        second = int((await manager.call("mcp.faulty.pid", {})).value)
    assert second != first


async def test_a_server_that_hangs_on_start_is_unavailable_and_its_tools_inactive(
    fault_server: ServerFactory, secret: Lookup
) -> None:
    hung = fault_server("--hang-on-start", connect_timeout_s=0.5, tools=["echo"])
    async with McpToolManager([hung], secret) as manager:
        [status] = await manager.load()
        assert status.state == "unavailable"
        assert "did not answer within its connect timeout (0.5 s)" in (status.reason or "")
        assert [(tool.tool_id, tool.active) for tool in status.tools] == [("mcp.faulty.echo", False)]
        # Until it is retried, calls fail at once with the reason instead of waiting for the server again.
        with pytest.raises(McpToolError) as unavailable:
            await manager.call("mcp.faulty.echo", {"text": "hello"})
        assert unavailable.value.code == "mcp_server_unavailable"
        assert unavailable.value.message == status.reason


async def test_a_hanging_server_does_not_hold_up_the_others(fault_server: ServerFactory, secret: Lookup) -> None:
    hung = fault_server("--hang-on-start", alias="hung", connect_timeout_s=600)
    healthy = fault_server(alias="healthy")
    async with McpToolManager([hung, healthy], secret) as manager:
        manager.start_loading()
        output = await manager.call("mcp.healthy.echo", {"text": "not blocked"})
        states = {status.alias: status.state for status in manager.statuses()}
    assert output.value == "not blocked"
    assert states["hung"] == "pending"


async def test_a_call_waiting_for_a_hanging_server_fails_when_its_connect_timeout_ends(
    fault_server: ServerFactory, secret: Lookup
) -> None:
    async with McpToolManager([fault_server("--hang-on-start", connect_timeout_s=0.5)], secret) as manager:
        with pytest.raises(McpToolError) as unavailable:
            await manager.call("mcp.faulty.echo", {"text": "hello"})
    assert unavailable.value.code == "mcp_server_unavailable"


async def test_a_5_mb_result_stays_whole_and_its_preview_is_bounded(
    fault_server: ServerFactory, secret: Lookup
) -> None:
    size = 5 * 1024 * 1024
    async with McpToolManager([fault_server()], secret) as manager:
        output = await manager.call("mcp.faulty.big", {"size": size})
    assert len(output.value) == size
    assert output.value[:32] == "0123456789abcdef0123456789abcdef"
    preview = preview_tool_output(output)
    assert tool_output_size(preview) <= 32_000
    assert preview.value.startswith("0123456789abcdef")
    assert f"{tool_output_size(output):,}-character result" in (preview.summary or "")


async def test_a_call_past_its_call_timeout_fails_with_a_code(fault_server: ServerFactory, secret: Lookup) -> None:
    async with McpToolManager([fault_server(call_timeout_s=0.5)], secret) as manager:
        with pytest.raises(McpToolError) as timed_out:
            await manager.call("mcp.faulty.block_once", {"marker": "slow"})
        assert timed_out.value.code == "mcp_call_timeout"
        # The session survives a timed-out call.
        assert (await manager.call("mcp.faulty.echo", {"text": "after"})).value == "after"


async def test_stdio_servers_are_gone_once_their_sessions_close(
    fault_server: ServerFactory, secret: Lookup, no_leftover_processes: list[int]
) -> None:
    manager = McpToolManager([fault_server(session="per_conversation")], secret)
    for conversation in ("a", "b"):
        no_leftover_processes.append(int((await manager.call("mcp.faulty.pid", {}, conversation)).value))
    await manager.close_scope("a")
    assert not _running(no_leftover_processes[0])
    await manager.aclose()


HOST = textwrap.dedent(
    """
    import asyncio, sys
    from berth.tools.contributions import McpServer
    from berth.tools.mcp import McpToolManager

    async def main():
        server = McpServer(
            alias="faulty", transport="stdio", command=sys.executable, args=sys.argv[1:], session="shared"
        )
        manager = McpToolManager([server], lambda name: None)
        print((await manager.call("mcp.faulty.pid", {})).value, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the host-death guard uses Linux's PDEATHSIG")
async def test_a_stdio_server_does_not_outlive_a_killed_host(fault_state: Path) -> None:
    host = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOST,
        str(Path(__file__).parent / "servers" / "faulty.py"),
        "--state",
        str(fault_state),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    assert host.stdout is not None
    server_pid = int(await asyncio.wait_for(host.stdout.readline(), 60))
    watcher = os.pidfd_open(server_pid)
    try:
        host.kill()  # SIGKILL: no cleanup code runs in the host
        await host.wait()
        # The pidfd becomes readable when the server exits; the timeout only guards against a hang.
        readable, _, _ = await asyncio.to_thread(select.select, [watcher], [], [], 30)
        assert readable == [watcher], f"MCP server {server_pid} outlived its killed host"
    finally:
        os.close(watcher)
        if _running(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
