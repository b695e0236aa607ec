"""MCP tools as runtime tools: ``mcp.<alias>.<tool>`` with the server's own schema, called through the
generation's :class:`~berth.tools.mcp.McpToolManager` (sessions per conversation, shared or per call)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from berth.runtime.toolbox import RuntimeTool, ToolBox, ToolNotice
from berth.runtime.turn import TurnState
from berth.tools.mcp import McpServerStatus, McpTool, McpToolError, McpToolManager
from berth.tools.mcp.manager import TOOL_ID_PREFIX


class McpParams(BaseModel):
    """Params of an MCP tool: any JSON object; the server's schema is checked in :func:`mcp_tool`."""

    model_config = ConfigDict(extra="allow")


def mcp_tool(manager: McpToolManager, tool: McpTool) -> RuntimeTool:
    """A runtime tool for one MCP tool."""

    async def run(params: BaseModel, state: TurnState) -> Any:
        import jsonschema  # with the first MCP call: a host whose bundles use no MCP server never loads it

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
    unavailable servers' tools are listed as inactive with the reason and since when."""
    await manager.load()
    toolbox.unknown_codes[TOOL_ID_PREFIX] = "mcp_unknown_tool"
    sync_mcp_tools(toolbox, manager)


def sync_mcp_tools(toolbox: ToolBox, manager: McpToolManager) -> list[str]:
    """Bring ``toolbox`` in line with the servers' state now (called before every round; waits for nothing).

    A tool whose server came back is offered (within the turn's allow-list), one whose server went down is
    listed inactive with the code ``mcp_server_unavailable``. Returns a line per server that came back, naming
    its tools, for ANNOUNCE: the system message's catalog stays as the turn began (it is cached), and the
    tools appear there from the next turn.
    """
    recovered: list[str] = []
    for status in manager.statuses():
        added = []
        for tool in status.tools:
            if tool.active:
                toolbox.inactive.pop(tool.tool_id, None)
                toolbox.inactive_codes.pop(tool.tool_id, None)
                if tool.tool_id not in toolbox.tools and toolbox.allows(tool.tool_id):
                    toolbox.add(mcp_tool(manager, tool))
                    added.append(tool)
            else:
                toolbox.tools.pop(tool.tool_id, None)
                _mark_inactive(toolbox, tool.tool_id, status)
        wildcard = f"{TOOL_ID_PREFIX}{status.alias}.*"
        if status.tools or status.state == "available":
            toolbox.inactive.pop(wildcard, None)
            toolbox.inactive_codes.pop(wildcard, None)
        else:
            _mark_inactive(toolbox, wildcard, status)
        if added and status.state == "available":
            listed = "; ".join(f"{tool.tool_id} (params: {json.dumps(tool.input_schema)})" for tool in added)
            recovered.append(f"MCP server {status.alias} is available again: {listed}")
    return recovered


def _mark_inactive(toolbox: ToolBox, tool_id: str, status: McpServerStatus) -> None:
    toolbox.inactive[tool_id] = status.describe_unavailable()
    toolbox.inactive_codes[tool_id] = "mcp_server_unavailable"
