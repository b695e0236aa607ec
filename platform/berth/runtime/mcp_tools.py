"""MCP tools as runtime tools: ``mcp.<alias>.<tool>`` with the server's own schema, called through the
generation's :class:`~berth.tools.mcp.McpToolManager` (sessions per conversation, shared or per call)."""

from __future__ import annotations

from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict

from berth.runtime.toolbox import RuntimeTool, ToolBox, ToolNotice
from berth.runtime.turn import TurnState
from berth.tools.mcp import McpTool, McpToolError, McpToolManager


class McpParams(BaseModel):
    """Params of an MCP tool: any JSON object; the server's schema is checked in :func:`mcp_tool`."""

    model_config = ConfigDict(extra="allow")


def mcp_tool(manager: McpToolManager, tool: McpTool) -> RuntimeTool:
    """A runtime tool for one MCP tool."""

    async def run(params: BaseModel, state: TurnState) -> Any:
        arguments = params.model_dump()
        try:
            jsonschema.validate(arguments, tool.input_schema)
        except jsonschema.ValidationError as error:
            where = ".".join(str(p) for p in error.absolute_path) or "params"
            raise ToolNotice("tool_params_invalid", f"{where}: {error.message}") from None
        except jsonschema.SchemaError:
            pass  # a server with a broken schema still gets the call; it validates itself
        try:
            return await manager.call(tool.tool_id, arguments, state.scope.conversation_id)
        except McpToolError as error:
            raise ToolNotice(error.code, error.message) from None

    return RuntimeTool(
        tool_id=tool.tool_id,
        description=tool.description or f"{tool.name} (MCP server {tool.alias})",
        params_model=McpParams,
        run=run,
        input_schema_override=tool.input_schema,
    )


async def add_mcp_tools(toolbox: ToolBox, manager: McpToolManager) -> None:
    """List the servers (each within its connect timeout, never blocking longer) and add their tools;
    unavailable servers' tools are listed as inactive with the reason."""
    await manager.load()
    for status in manager.statuses():
        for tool in status.tools:
            if tool.active:
                toolbox.add(mcp_tool(manager, tool))
            else:
                toolbox.inactive[tool.tool_id] = status.reason or f"MCP server {status.alias} is {status.state}"
        if not status.tools and status.state != "available":
            toolbox.inactive[f"mcp.{status.alias}.*"] = status.reason or f"MCP server {status.alias} is {status.state}"
