"""The exposed endpoint driven by a client no one here wrote: the MCP Inspector CLI (``--cli``), with a Bearer
key sent through its ``--header`` option."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from api_stack import KEYS, ApiStack
from conftest import DESK_V2, endpoint_url, reload_bundle

Inspector = Callable[..., Awaitable[tuple[int, str, str]]]


def bearer(who: str = "acme") -> list[str]:
    return ["--header", f"Authorization: Bearer {KEYS[who]}"]


async def test_the_inspector_lists_and_calls_the_bundle_tools(stack: ApiStack, inspector: Inspector) -> None:
    url = endpoint_url(stack, "acme/support/hello")
    code, out, err = await inspector(url, "--transport", "http", *bearer(), "--method", "tools/list")
    assert code == 0, err
    tools = json.loads(out)["tools"]
    assert [tool["name"] for tool in tools] == ["hello.greet"]
    assert tools[0]["inputSchema"]["required"] == ["name"]

    code, out, err = await inspector(
        url, "--transport", "http", *bearer(), "--method", "tools/call", "--tool-name", "hello.greet",
        "--tool-arg", "name=Ada",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False}


async def test_the_inspector_sees_tool_errors_and_the_new_generation(
    stack: ApiStack, inspector: Inspector, desk_folder: Path
) -> None:
    url = endpoint_url(stack, "acme/support/desk")
    code, out, err = await inspector(
        url, "--transport", "http", *bearer(), "--method", "tools/call", "--tool-name", "desk.explode"
    )
    # the Inspector prints the result and exits 5 ("tool_is_error") for a result with isError
    assert code == 5, err
    assert json.loads(out)["isError"] is True
    assert json.loads(err)["error"]["code"] == "tool_is_error"

    (desk_folder / "__init__.py").write_text(DESK_V2)
    await reload_bundle(stack, "desk")
    code, out, err = await inspector(url, "--transport", "http", *bearer(), "--method", "tools/list")
    assert code == 0, err
    assert [tool["name"] for tool in json.loads(out)["tools"]] == ["desk.count", "desk.lookup"]


async def test_the_inspector_is_refused_with_another_tenants_key(stack: ApiStack, inspector: Inspector) -> None:
    url = endpoint_url(stack, "acme/support/hello")
    code, _, err = await inspector(url, "--transport", "http", *bearer("globex"), "--method", "tools/list")
    assert code != 0
    assert "404" in err, err
