"""What ``berth_tools(ctx)`` may return besides ``@tool`` functions: tool packs and MCP servers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ALIAS_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"


class ToolPack(BaseModel):
    """A platform tool pack enabled by id (``web``, ``exec``), with per-bundle options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=ALIAS_PATTERN)
    options: dict[str, Any] = Field(default_factory=dict)


class McpServer(BaseModel):
    """An MCP server whose tools appear as ``mcp.<alias>.<tool>``.

    Header and env values may be ``secret:NAME`` or ``b:NAME`` references, resolved at connect time.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str = Field(pattern=ALIAS_PATTERN)
    transport: Literal["stdio", "streamable-http", "sse"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tools: list[str] = Field(default_factory=lambda: ["*"])
    session: Literal["per_conversation", "shared", "per_call"] = "per_conversation"
    connect_timeout_s: float = Field(10.0, gt=0)
    call_timeout_s: float = Field(60.0, gt=0)
    retry_after_s: float = Field(30.0, gt=0, description="first background retry of a server that is down")
    retry_max_s: float = Field(600.0, gt=0, description="the longest wait between retries (the delay doubles)")

    @model_validator(mode="after")
    def _transport_needs(self) -> McpServer:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server '{self.alias}': transport stdio needs 'command'")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"MCP server '{self.alias}': transport {self.transport} needs 'url'")
        return self


class BundleTools(BaseModel):
    """The full form of a tools descriptor: an alias for the bundle's own tools plus the items.

    ``berth_tools`` may return just the list of items; the alias then is the bundle id.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    alias: str | None = Field(None, pattern=ALIAS_PATTERN)
    items: list[Any] = Field(default_factory=list)


def merge_tool_contributions(contributions: Iterable[Any]) -> BundleTools:
    """Combine what every ``berth_tools`` implementation returned into one :class:`BundleTools`.

    Each contribution is a list of items or a :class:`BundleTools`; the first alias given wins.
    """
    items: list[Any] = []
    aliases: list[str] = []
    for contribution in contributions:
        if isinstance(contribution, BundleTools):
            if contribution.alias:
                aliases.append(contribution.alias)
            items.extend(contribution.items)
        elif contribution is not None:
            items.extend(contribution)
    return BundleTools(alias=aliases[0] if aliases else None, items=items)
