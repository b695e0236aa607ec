"""A bundle's tools served over MCP at /mcp/{tenant}/{project}/{bundle}, exercised with the SDK's own client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import yaml
from api_stack import ApiStack
from conftest import DESK_V2, reload_bundle
from mcp.shared.exceptions import MCPError

from berth.config import Configuration


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_sdk_client_lists_and_calls_the_bundle_tools_with_an_api_key(
    mcp_session: Callable[..., Any], mode: str
) -> None:
    async with mcp_session("acme/support/hello", mode=mode) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == ["hello.greet"]
        greet = listed.tools[0]
        assert greet.input_schema["required"] == ["name"]
        assert greet.input_schema["properties"]["name"]["description"] == "who to greet."
        assert greet.annotations is not None and greet.annotations.read_only_hint is True

        result = await client.call_tool("hello.greet", {"name": "Ada", "language": "fr"})
        assert result.is_error is False
        assert result.content == [types.TextContent(text="Bonjour, Ada!")]


async def test_bad_params_are_a_tool_error_the_caller_can_fix(mcp_session: Callable[..., Any]) -> None:
    async with mcp_session("acme/support/hello") as client:
        result = await client.call_tool("hello.greet", {"nom": "Ada"})
        assert result.is_error is True
        text = result.content[0]
        assert isinstance(text, types.TextContent)
        assert text.text.startswith("tool_params_invalid: params of hello.greet do not match its schema")
        assert "name: Field required" in text.text


async def test_an_unknown_tool_is_a_protocol_error_naming_the_known_ones(mcp_session: Callable[..., Any]) -> None:
    async with mcp_session("acme/support/hello") as client:
        with pytest.raises(MCPError, match=r"unknown_tool: .*hello\.greet"):
            await client.call_tool("hello.wave", {})


async def test_results_map_values_tool_outputs_errors_and_timeouts(mcp_session: Callable[..., Any]) -> None:
    async with mcp_session("acme/support/desk") as client:
        lookup = await client.call_tool("desk.lookup", {"ticket": 7})
        assert lookup.structured_content == {"ticket": 7, "status": "open", "version": 1}
        assert lookup.is_error is False

        audit = await client.call_tool("desk.audit", {})
        assert audit.is_error is True
        text, image, resource = audit.content
        assert text == types.TextContent(text="3 tickets have no owner")
        assert isinstance(image, types.ImageContent) and image.mime_type == "image/png"
        assert isinstance(resource, types.EmbeddedResource)
        assert isinstance(resource.resource, types.TextResourceContents)
        assert resource.resource.text == "Every ticket has an owner."

        exploded = await client.call_tool("desk.explode", {})
        assert exploded.is_error is True
        assert exploded.content == [
            types.TextContent(text="tool_failed: desk.explode raised RuntimeError: the desk is on fire")
        ]

        timed_out = await client.call_tool("desk.wait_forever", {})
        assert timed_out.is_error is True
        assert timed_out.content == [
            types.TextContent(text="tool_timeout: desk.wait_forever did not finish within 0.05 s")
        ]


async def test_tool_pack_tools_are_exposed_but_not_react_or_mcp_tools(mcp_session: Callable[..., Any]) -> None:
    async with mcp_session("acme/support/desk") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
    assert names[:4] == ["desk.audit", "desk.explode", "desk.lookup", "desk.wait_forever"]
    assert "web.fetch" in names
    assert not [name for name in names if name.startswith(("react.", "mcp."))]


async def test_requests_without_a_valid_key_get_401(stack: ApiStack) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        response = await stack.client.post("/mcp/acme/support/hello", json=initialize_request(), headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("who", "path", "status"), [(None, "acme/support/hello", 401), ("globex", "acme/support/hello", 404)]
)
async def test_the_sdk_client_cannot_open_a_session_without_a_key_for_the_scope(
    mcp_session: Callable[..., Any], who: str | None, path: str, status: int
) -> None:
    statuses: list[int] = []

    async def seen(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK reports the refusal as a generic MCPError group
        async with mcp_session(path, who=who, statuses_seen=seen):
            pass
    assert statuses == [status]


@pytest.mark.parametrize(
    ("who", "path"),
    [
        ("globex", "acme/support/hello"),  # a key of another tenant
        ("acme", "acme/sales/hello"),  # a project the key does not cover
        ("acme", "acme/support/ghost"),  # an unknown bundle
        ("acme", "nowhere/support/hello"),  # an unknown tenant
    ],
)
async def test_scopes_the_key_does_not_cover_and_unknown_bundles_are_not_found(
    stack: ApiStack, who: str, path: str
) -> None:
    response = await stack.client.post(f"/mcp/{path}", json=initialize_request(), headers=accept(stack.auth(who)))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_a_bundle_not_enabled_for_the_scope_is_not_found(stack: ApiStack, tmp_path: Path) -> None:
    descriptors = tmp_path / "descriptors"
    document = yaml.safe_load((descriptors / "bundles.yaml").read_text())
    document["tenants"]["globex"]["bundles"] = ["hello"]
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump(document))
    await stack.services.registry.apply_configuration(Configuration.load(descriptors))

    for bundle, status in (("desk", 404), ("hello", 200)):
        response = await stack.client.post(
            f"/mcp/globex/research/{bundle}", json=initialize_request(), headers=accept(stack.auth("globex"))
        )
        assert response.status_code == status, (bundle, response.text)
    # still served where it is enabled
    acme = await stack.client.post("/mcp/acme/support/desk", json=initialize_request(), headers=accept(stack.auth()))
    assert acme.status_code == 200


async def test_a_session_is_bound_to_its_key_and_path(stack: ApiStack) -> None:
    opened = await stack.client.post(
        "/mcp/acme/support/hello", json=initialize_request(), headers=accept(stack.auth("admin"))
    )
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    elsewhere = await stack.client.post(
        "/mcp/acme/support/desk", json=listing, headers=accept({**stack.auth("admin"), **session})
    )
    assert elsewhere.status_code == 404
    other_key = await stack.client.post(
        "/mcp/acme/support/hello", json=listing, headers=accept({**stack.auth("acme"), **session})
    )
    assert other_key.status_code == 404


async def test_after_a_reload_the_tools_are_the_new_generation(
    stack: ApiStack, desk_folder: Path, mcp_session: Callable[..., Any]
) -> None:
    async with mcp_session("acme/support/desk") as client:
        before = [tool.name for tool in (await client.list_tools()).tools]
        assert "desk.audit" in before and "desk.count" not in before

        (desk_folder / "__init__.py").write_text(DESK_V2)
        await reload_bundle(stack, "desk")

        # the same session follows the current generation
        after = [tool.name for tool in (await client.list_tools()).tools]
        assert after == ["desk.count", "desk.lookup"]
        lookup = await client.call_tool("desk.lookup", {"ticket": 7})
        assert lookup.structured_content == {"ticket": 7, "status": "closed", "version": 2}
        gone = await client.call_tool("desk.count", {})
        assert gone.content == [types.TextContent(text="0")]
        with pytest.raises(MCPError, match="unknown_tool"):
            await client.call_tool("desk.audit", {})


async def test_a_session_that_listed_the_tools_hears_when_they_change(
    stack: ApiStack, desk_folder: Path, mcp_session: Callable[..., Any]
) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with mcp_session("acme/support/desk", message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        await client.list_tools()
        (desk_folder / "__init__.py").write_text(DESK_V2)
        # The notification rides the session's GET stream, which the client opens on its own after the
        # handshake; a change before that stream is up has no one to reach, so reload until one arrives.
        for _ in range(20):
            await reload_bundle(stack, "desk")
            await client.list_tools()  # a round trip: the notification, if sent, has reached the client
            if changed.is_set():
                break
        assert changed.is_set()
        assert [tool.name for tool in (await client.list_tools()).tools] == ["desk.count", "desk.lookup"]


def initialize_request() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-http", "version": "1"},
        },
    }


def accept(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Accept": "application/json, text/event-stream"}
