"""Conformance against MCP servers no one here wrote: ``mcp-server-time`` (PyPI, stdio) and
``@modelcontextprotocol/server-everything`` (npm, stdio and streamable HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from berth.config.secrets import Secret
from berth.tools.contributions import McpServer
from berth.tools.mcp import McpToolManager

Lookup = Callable[[str], Secret]


def everything_stdio(node: str, everything_js: Path, **fields: object) -> McpServer:
    values: dict[str, object] = {
        "alias": "everything",
        "transport": "stdio",
        "command": node,
        "args": [str(everything_js), "stdio"],
        "session": "shared",
    }
    values.update(fields)
    return McpServer.model_validate(values)


def everything_http(url: str, **fields: object) -> McpServer:
    values: dict[str, object] = {"alias": "everything", "transport": "streamable-http", "url": url, "session": "shared"}
    values.update(fields)
    return McpServer.model_validate(values)


# -- mcp-server-time ------------------------------------------------------------------------------------


async def test_time_server_tools_carry_their_own_schema(time_server: McpServer, secret: Lookup) -> None:
    async with McpToolManager([time_server], secret) as manager:
        [status] = await manager.load()
    assert status.state == "available"
    tools = {tool.tool_id: tool for tool in status.tools}
    assert set(tools) == {"mcp.time.get_current_time", "mcp.time.convert_time"}
    schema = tools["mcp.time.get_current_time"].input_schema
    assert schema["required"] == ["timezone"]
    assert "timezone" in tools["mcp.time.get_current_time"].description.lower()


async def test_time_server_answers_with_structured_content(time_server: McpServer, secret: Lookup) -> None:
    async with McpToolManager([time_server], secret) as manager:
        output = await manager.call(
            "mcp.time.convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        )
    assert not output.is_error
    assert output.value["target"]["datetime"].endswith("21:00:00+09:00")


async def test_time_server_errors_become_tool_errors(time_server: McpServer, secret: Lookup) -> None:
    async with McpToolManager([time_server], secret) as manager:
        output = await manager.call("mcp.time.get_current_time", {"timezone": "Nowhere/Atlantis"})
    assert output.is_error
    assert "Nowhere/Atlantis" in output.value


# -- server-everything over stdio --------------------------------------------------------------------------


async def test_everything_images_join_the_images(node: str, everything_js: Path, secret: Lookup) -> None:
    async with McpToolManager([everything_stdio(node, everything_js)], secret) as manager:
        output = await manager.call("mcp.everything.get-tiny-image", {})
    assert [image.mime for image in output.images] == ["image/png"]
    assert output.images[0].data_base64
    assert "MCP logo" in output.value


async def test_everything_embedded_resources_become_sources(node: str, everything_js: Path, secret: Lookup) -> None:
    async with McpToolManager([everything_stdio(node, everything_js)], secret) as manager:
        text = await manager.call("mcp.everything.get-resource-reference", {"resourceType": "Text", "resourceId": 2})
        blob = await manager.call("mcp.everything.get-resource-reference", {"resourceType": "Blob", "resourceId": 2})
    [source] = text.sources
    assert source.url.startswith("demo://resource/")
    assert source.text
    assert source.source_type == "file"
    assert "not shown" in blob.value  # a non-image blob is named, not inlined


async def test_everything_structured_content_is_the_value(node: str, everything_js: Path, secret: Lookup) -> None:
    async with McpToolManager([everything_stdio(node, everything_js)], secret) as manager:
        output = await manager.call("mcp.everything.get-structured-content", {"location": "Chicago"})
    assert set(output.value) == {"temperature", "conditions", "humidity"}


async def test_everything_invalid_arguments_are_a_tool_error(node: str, everything_js: Path, secret: Lookup) -> None:
    async with McpToolManager([everything_stdio(node, everything_js)], secret) as manager:
        output = await manager.call("mcp.everything.get-resource-reference", {"resourceType": "Sound", "resourceId": 1})
    assert output.is_error
    assert "resourceType" in output.value


async def test_everything_progress_reaches_the_caller(node: str, everything_js: Path, secret: Lookup) -> None:
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    async with McpToolManager([everything_stdio(node, everything_js)], secret) as manager:
        output = await manager.call(
            "mcp.everything.trigger-long-running-operation", {"duration": 0.3, "steps": 3}, on_progress=on_progress
        )
    assert "completed" in output.value
    assert progress == [(1, 3), (2, 3), (3, 3)]


async def test_everything_list_changed_is_followed_by_a_new_listing(
    node: str, everything_js: Path, secret: Lookup
) -> None:
    # The server registers more tools right after `initialized` and announces them with list_changed.
    changes: list[str] = []
    relisted = asyncio.Event()

    def on_change(alias: str) -> None:
        changes.append(alias)
        if len(changes) >= 2:
            relisted.set()

    async with McpToolManager([everything_stdio(node, everything_js)], secret, on_change=on_change) as manager:
        await manager.load()
        await asyncio.wait_for(relisted.wait(), 30)
        names = {tool.name for tool in manager.tools()}
    assert {"echo", "get-tiny-image", "simulate-research-query"} <= names


async def test_everything_allow_list_and_per_conversation_sessions(
    node: str, everything_js: Path, secret: Lookup
) -> None:
    server = everything_stdio(node, everything_js, tools=["echo"], session="per_conversation")
    async with McpToolManager([server], secret) as manager:
        [status] = await manager.load()
        assert [tool.tool_id for tool in status.tools] == ["mcp.everything.echo"]
        first = await manager.call("mcp.everything.echo", {"message": "hi"}, "conversation-1")
        second = await manager.call("mcp.everything.echo", {"message": "there"}, "conversation-2")
        await manager.close_scope("conversation-1")
    assert first.value == "Echo: hi"
    assert second.value == "Echo: there"


async def test_everything_receives_env_secrets_resolved_at_connect(
    node: str, everything_js: Path, secret: Lookup, secrets: dict[str, str]
) -> None:
    secrets.update({"b:service_token": "tok-123", "shared_key": "key-456"})
    server = everything_stdio(node, everything_js, env={"SERVICE_TOKEN": "b:service_token", "KEY": "secret:shared_key"})
    async with McpToolManager([server], secret) as manager:
        output = await manager.call("mcp.everything.get-env", {})
    assert '"SERVICE_TOKEN": "tok-123"' in output.value
    assert '"KEY": "key-456"' in output.value


# -- server-everything over streamable HTTP ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["shared", "per_call"])
async def test_everything_over_streamable_http(everything_http: str, secret: Lookup, mode: str) -> None:
    async with McpToolManager([everything_http_config(everything_http, mode)], secret) as manager:
        [status] = await manager.load()
        assert status.state == "available", status.reason
        echo = await manager.call("mcp.everything.echo", {"message": "over http"})
        image = await manager.call("mcp.everything.get-tiny-image", {})
        error = await manager.call("mcp.everything.get-sum", {"a": "one", "b": 2})
    assert echo.value == "Echo: over http"
    assert len(image.images) == 1
    assert error.is_error


async def test_everything_progress_over_streamable_http(everything_http: str, secret: Lookup) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with McpToolManager([everything_http_config(everything_http, "shared")], secret) as manager:
        await manager.call(
            "mcp.everything.trigger-long-running-operation", {"duration": 0.2, "steps": 2}, on_progress=on_progress
        )
    assert progress == [1, 2]


def everything_http_config(url: str, mode: str) -> McpServer:
    return everything_http(url, session=mode)
