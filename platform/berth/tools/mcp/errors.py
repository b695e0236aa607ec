"""The failures of MCP tool calls that the runtime and the model see, each with a stable code."""

from __future__ import annotations

from typing import Literal

McpErrorCode = Literal[
    "mcp_unknown_tool",
    "mcp_scope_required",
    "mcp_server_unavailable",
    "mcp_session_lost",
    "mcp_call_timeout",
    "mcp_call_failed",
    "mcp_closed",
]
"""Stable codes:

* ``mcp_unknown_tool`` — no such ``mcp.<alias>.<tool>`` (not listed by the server, or not in the allow-list);
* ``mcp_scope_required`` — a ``per_conversation`` server was called without a conversation id;
* ``mcp_server_unavailable`` — the server did not start or answer within its connect timeout (or a secret
  it needs is missing); its tools are inactive until it is retried;
* ``mcp_session_lost`` — the session died, was reopened once, and the retried call failed the same way;
* ``mcp_call_timeout`` — the server did not answer the call within its call timeout;
* ``mcp_call_failed`` — the server answered the call with a protocol error (unknown tool, invalid params …);
* ``mcp_closed`` — the tool manager was closed (the bundle generation was unloaded).
"""


class McpToolError(Exception):
    """A failed MCP tool call or connection, with a stable ``code`` and a message saying what to do next.

    Messages name the server alias and tool, never a header or environment value.
    """

    def __init__(self, code: McpErrorCode, message: str) -> None:
        self.code: McpErrorCode = code
        self.message = message
        super().__init__(message)

    def __repr__(self) -> str:
        return f"McpToolError({self.code!r}, {self.message!r})"


class SessionLostError(Exception):
    """The session's connection ended under a request (the server process died, the HTTP peer went away).

    Internal to the MCP package: the manager reconnects once and retries, then reports ``mcp_session_lost``.
    """
