"""Secret references in MCP server configs: resolved at connect time, sent where configured, never shown."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from mcp.server.mcpserver import Context, MCPServer

from berth.config.secrets import Secret
from berth.tools.contributions import McpServer
from berth.tools.mcp import McpToolError, McpToolManager

Lookup = Callable[[str], Secret]


def header_echo() -> MCPServer:
    server = MCPServer("header-echo")

    @server.tool(structured_output=False)
    def authorization(ctx: Context) -> str:
        """The Authorization header of this request."""
        return (ctx.headers or {}).get("authorization", "<none>")

    return server


def http_config(url: str, **fields: object) -> McpServer:
    values: dict[str, object] = {"alias": "api", "transport": "streamable-http", "url": url, "session": "per_call"}
    values.update(fields)
    return McpServer.model_validate(values)


async def test_a_secret_header_is_resolved_at_connect_and_sent(
    serve_http: Callable[[MCPServer], str], secret: Lookup, secrets: dict[str, str]
) -> None:
    url = serve_http(header_echo())
    secrets["b:api_token"] = "Bearer first"
    async with McpToolManager([http_config(url, headers={"Authorization": "b:api_token"})], secret) as manager:
        first = await manager.call("mcp.api.authorization", {})
        secrets["b:api_token"] = "Bearer rotated"  # per_call: every call connects, so it reads the secret anew
        second = await manager.call("mcp.api.authorization", {})
    assert (first.value, second.value) == ("Bearer first", "Bearer rotated")


async def test_plain_header_values_are_sent_as_they_are(serve_http: Callable[[MCPServer], str], secret: Lookup) -> None:
    url = serve_http(header_echo())
    async with McpToolManager([http_config(url, headers={"Authorization": "Token plain"})], secret) as manager:
        assert (await manager.call("mcp.api.authorization", {})).value == "Token plain"


async def test_a_missing_secret_makes_the_server_unavailable_naming_the_reference(
    serve_http: Callable[[MCPServer], str], secret: Lookup
) -> None:
    url = serve_http(header_echo())
    config = http_config(url, headers={"Authorization": "secret:absent_token"})
    async with McpToolManager([config], secret) as manager:
        [status] = await manager.load()
        with pytest.raises(McpToolError) as unavailable:
            await manager.call("mcp.api.authorization", {})
    assert status.state == "unavailable"
    assert "header 'Authorization' names 'secret:absent_token'" in (status.reason or "")
    assert unavailable.value.code == "mcp_server_unavailable"


async def test_secret_values_never_reach_errors_or_logs(
    secret: Lookup, secrets: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    secrets["api_token"] = "Bearer do-not-print-me"
    # Nothing listens on port 9 of 127.0.0.1 ("discard"): the connection is refused.
    config = http_config(
        "http://127.0.0.1:9/mcp?key=query-secret", headers={"Authorization": "secret:api_token"}, connect_timeout_s=5
    )
    caplog.set_level(logging.DEBUG)
    async with McpToolManager([config], secret) as manager:
        [status] = await manager.load()
        with pytest.raises(McpToolError) as unavailable:
            await manager.call("mcp.api.authorization", {})
    assert status.state == "unavailable"
    shown = f"{status.reason}\n{unavailable.value}\n{caplog.text}"
    assert "do-not-print-me" not in shown
    assert "query-secret" not in (status.reason or "")
