"""MCP servers as tools: ``mcp.<alias>.<tool>`` listed, called and mapped onto tool results.

``McpToolManager`` is the entry point (one per bundle generation); ``preview_tool_output`` bounds a large
result for the model's context while the runtime stores the whole one.
"""

from berth.tools.mcp.errors import McpToolError
from berth.tools.mcp.manager import McpServerStatus, McpTool, McpToolManager
from berth.tools.mcp.results import preview_tool_output, tool_output_from_result, tool_output_size
from berth.tools.mcp.sessions import McpSession, OwnedSession
from berth.tools.mcp.transports import InProcessConnector, McpConnector, TransportConnector

__all__ = [
    "InProcessConnector",
    "McpConnector",
    "McpServerStatus",
    "McpSession",
    "McpTool",
    "McpToolError",
    "McpToolManager",
    "OwnedSession",
    "TransportConnector",
    "preview_tool_output",
    "tool_output_from_result",
    "tool_output_size",
]
