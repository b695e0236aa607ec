"""McpToolManager over in-process MCPServer objects: listing, allow-lists, session modes, list_changed,
concurrency, cancellation and closing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from mcp.server.mcpserver import Context, MCPServer

from berth.config.secrets import Secret
from berth.tools.contributions import McpServer
from berth.tools.mcp import InProcessConnector, McpToolError, McpToolManager


def no_secrets(name: str) -> Secret:
    raise AssertionError(f"no secret expected, asked for {name}")


def config(alias: str = "demo", **fields: object) -> McpServer:
    return McpServer.model_validate({"alias": alias, "transport": "stdio", "command": "unused", **fields})


class Demo:
    """An in-process server with a few tools; records which session each call came from."""

    def __init__(self) -> None:
        self.connections = 0
        self.sessions: list[int] = []
        self.released = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

        @asynccontextmanager
        async def lifespan(_: MCPServer[dict[str, int]]) -> AsyncIterator[dict[str, int]]:
            # The in-memory transport runs the server once per connection, so this numbers sessions.
            self.connections += 1
            yield {"connection": self.connections}

        self.server = server = MCPServer("demo", lifespan=lifespan)

        @server.tool(structured_output=False)
        def add(a: int, b: int, ctx: Context) -> str:
            """Add two numbers."""
            self.sessions.append(ctx.request_context.lifespan_context["connection"])
            return str(a + b)

        @server.tool(structured_output=False)
        async def wait_for_release(ctx: Context) -> str:
            """Wait until ``release`` is called."""
            self.started.set()
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return "released"

        @server.tool(structured_output=False)
        def release() -> str:
            """Release ``wait_for_release``."""
            self.released.set()
            return "ok"

        @server.tool(structured_output=False)
        async def grow(name: str, ctx: Context) -> str:
            """Add a tool called ``name`` and tell the client the list changed."""

            def added() -> str:
                return "added"

            server.add_tool(added, name=name, description="A tool added at run time.", structured_output=False)
            await ctx.session.send_tool_list_changed()
            return "grown"

    def manager(self, *configs: McpServer, **options: object) -> McpToolManager:
        connector = InProcessConnector({c.alias: self.server for c in configs})
        return McpToolManager(configs, no_secrets, connector=connector, **options)  # type: ignore[arg-type]


@pytest.fixture
def demo() -> Demo:
    return Demo()


async def test_tools_appear_as_mcp_alias_tool_with_the_servers_schema_and_description(demo: Demo) -> None:
    async with demo.manager(config(session="shared")) as manager:
        [status] = await manager.load()
    assert status.state == "available"
    add = next(tool for tool in status.tools if tool.name == "add")
    assert add.tool_id == "mcp.demo.add"
    assert add.description == "Add two numbers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.active


async def test_the_allow_list_hides_other_tools_and_refuses_calls_to_them(demo: Demo) -> None:
    async with demo.manager(config(session="shared", tools=["add", "missing"])) as manager:
        [status] = await manager.load()
        assert [tool.tool_id for tool in status.tools] == ["mcp.demo.add"]
        assert status.missing_tools == ("missing",)
        with pytest.raises(McpToolError) as refused:
            await manager.call("mcp.demo.release", {})
    assert refused.value.code == "mcp_unknown_tool"
    assert "allow-list" in refused.value.message


async def test_an_id_of_no_configured_server_is_an_unknown_tool(demo: Demo) -> None:
    async with demo.manager(config()) as manager:
        for tool_id in ("mcp.other.add", "demo.add", "mcp.demo"):
            with pytest.raises(McpToolError) as unknown:
                await manager.call(tool_id, {}, "c1")
            assert unknown.value.code == "mcp_unknown_tool"


async def test_a_shared_server_serves_every_conversation_on_one_session(demo: Demo) -> None:
    async with demo.manager(config(session="shared")) as manager:
        await manager.call("mcp.demo.add", {"a": 1, "b": 2}, "c1")
        await manager.call("mcp.demo.add", {"a": 1, "b": 2}, "c2")
    assert len(set(demo.sessions)) == 1


async def test_per_conversation_sessions_are_kept_per_conversation_and_closed_with_it(demo: Demo) -> None:
    async with demo.manager(config(session="per_conversation")) as manager:
        await manager.load()
        for conversation in ("c1", "c2", "c1"):
            output = await manager.call("mcp.demo.add", {"a": 2, "b": 3}, conversation)
            assert output.value == "5"
        assert demo.sessions[0] == demo.sessions[2] != demo.sessions[1]
        await manager.close_scope("c1")
        await manager.call("mcp.demo.add", {"a": 2, "b": 3}, "c1")
    assert demo.sessions[3] not in demo.sessions[:3]


async def test_per_conversation_calls_need_a_conversation_id(demo: Demo) -> None:
    async with demo.manager(config(session="per_conversation")) as manager:
        with pytest.raises(McpToolError) as refused:
            await manager.call("mcp.demo.add", {"a": 1, "b": 1})
    assert refused.value.code == "mcp_scope_required"


async def test_per_call_opens_a_session_for_each_call(demo: Demo) -> None:
    async with demo.manager(config(session="per_call")) as manager:
        await manager.load()
        await manager.call("mcp.demo.add", {"a": 1, "b": 2})
        await manager.call("mcp.demo.add", {"a": 1, "b": 2})
    assert len(set(demo.sessions)) == 2


async def test_calls_on_one_session_run_concurrently(demo: Demo) -> None:
    async with demo.manager(config(session="shared")) as manager:
        waiting = asyncio.create_task(manager.call("mcp.demo.wait_for_release", {}))
        await demo.started.wait()
        await manager.call("mcp.demo.release", {})  # would deadlock if calls on a session were serialized
        assert (await waiting).value == "released"


async def test_a_cancelled_caller_cancels_its_request_on_the_server(demo: Demo) -> None:
    async with demo.manager(config(session="shared")) as manager:
        waiting = asyncio.create_task(manager.call("mcp.demo.wait_for_release", {}))
        await demo.started.wait()
        waiting.cancel()
        await demo.cancelled.wait()
        assert (await manager.call("mcp.demo.add", {"a": 1, "b": 1})).value == "2"  # the session is still fine


async def test_list_changed_makes_the_manager_list_the_tools_again(demo: Demo) -> None:
    changes: list[str] = []
    relisted = asyncio.Event()

    def on_change(alias: str) -> None:
        changes.append(alias)
        if len(changes) == 2:
            relisted.set()

    async with demo.manager(config(session="shared"), on_change=on_change) as manager:
        await manager.load()
        await manager.call("mcp.demo.grow", {"name": "fresh"})
        await asyncio.wait_for(relisted.wait(), 30)
        assert "mcp.demo.fresh" in [tool.tool_id for tool in manager.tools()]
        assert (await manager.call("mcp.demo.fresh", {})).value == "added"


async def test_a_closed_manager_refuses_calls_with_a_code(demo: Demo) -> None:
    manager = demo.manager(config(session="shared"))
    await manager.call("mcp.demo.add", {"a": 1, "b": 1})
    await manager.aclose()
    with pytest.raises(McpToolError) as closed:
        await manager.call("mcp.demo.add", {"a": 1, "b": 1})
    assert closed.value.code == "mcp_closed"


async def test_servers_are_listed_concurrently_and_one_unknown_server_does_not_stop_the_others(demo: Demo) -> None:
    configs = [config("one", session="shared"), config("two", session="per_call"), config("ghost")]
    connector = InProcessConnector({"one": demo.server, "two": demo.server})
    async with McpToolManager(configs, no_secrets, connector=connector) as manager:
        statuses = {status.alias: status for status in await manager.load()}
    assert statuses["one"].state == statuses["two"].state == "available"
    assert statuses["ghost"].state == "unavailable"
    assert "not registered" in (statuses["ghost"].reason or "")


def test_aliases_must_be_unique() -> None:
    with pytest.raises(ValueError, match="configured twice"):
        McpToolManager([config(), config()], no_secrets)


_: Callable[..., object] = Demo  # keep the helper class referenced for readers of the module
