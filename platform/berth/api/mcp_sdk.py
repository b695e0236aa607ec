"""The MCP SDK's side of bundles served as MCP servers (:mod:`berth.api.mcp_server`).

This module imports the SDK's server (hundreds of milliseconds): :class:`~berth.api.mcp_server.McpEndpoint` imports
it when the first MCP request arrives, so a host nobody asks over MCP starts without it.
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["LOOPBACK", "BerthMcpServer", "StreamableHTTPSessionManager"]

LOOPBACK = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)
"""With auth ``none``: only loopback ``Host``/``Origin`` headers (a web page must not reach the tools through DNS
rebinding)."""


class BerthMcpServer(Server[Any]):
    """The SDK server, announcing ``tools.listChanged`` (the handshake-era capabilities are otherwise derived
    from ``NotificationOptions`` nobody passes on the streamable HTTP path)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The ``initialize`` result, with ``tools.listChanged``."""
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)
