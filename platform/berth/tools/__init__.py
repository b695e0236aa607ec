"""Tools: specs from typed functions, tool-pack and MCP references, and the per-bundle catalog."""

from berth.tools.spec import ToolSpec, tool, tool_spec_of

__all__ = ["ToolSpec", "tool", "tool_spec_of"]
