"""Building a bundle's tool catalog from its tools descriptor."""

from __future__ import annotations

import pytest

from berth import BundleTools, McpServer, ToolPack, tool
from berth.tools.catalog import CatalogError, build_catalog


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


@tool(name="lookup")
def lookup_again(key: str) -> str:
    """Look a key up again."""
    return key


def test_function_tools_are_namespaced_by_the_bundle_id_and_sorted() -> None:
    server = McpServer(alias="time", transport="stdio", command="mcp-server-time")
    catalog = build_catalog("docs", [lookup, ToolPack(id="web"), server], known_packs={"web"})
    assert catalog.tool_ids == ["docs.lookup", "mcp.time", "web"]
    entry = catalog.get("docs.lookup")
    assert entry is not None
    assert entry.kind == "function"


def test_the_tools_descriptor_may_name_another_alias() -> None:
    catalog = build_catalog("docs-assistant", BundleTools(alias="docs", items=[lookup]))
    assert catalog.tool_ids == ["docs.lookup"]


def test_every_problem_is_reported_together() -> None:
    with pytest.raises(CatalogError) as caught:
        build_catalog("docs", [lookup, lookup_again, ToolPack(id="shell"), "not a tool"], known_packs={"web"})
    problems = caught.value.problems
    assert any("tool id 'docs.lookup' is contributed twice" in p for p in problems)
    assert "unknown tool pack 'shell' (known: web)" in problems
    assert any("item 3 of berth_tools is str" in p for p in problems)


def test_platform_namespaces_are_reserved() -> None:
    with pytest.raises(CatalogError, match="reserved"):
        build_catalog("x", BundleTools(alias="react", items=[lookup]))


def test_an_mcp_server_needs_what_its_transport_needs() -> None:
    with pytest.raises(ValueError, match="transport stdio needs 'command'"):
        McpServer(alias="x", transport="stdio")
    with pytest.raises(ValueError, match="needs 'url'"):
        McpServer(alias="x", transport="streamable-http")
