"""How a session reaches its server: an SDK :class:`mcp.client.Client` per ``McpServer`` config.

:class:`McpConnector` is the seam. :class:`TransportConnector` is the real one (stdio child process,
streamable HTTP, SSE), resolving ``secret:`` / ``b:`` references in env and header values at connect time;
:class:`InProcessConnector` connects to :class:`~mcp.server.mcpserver.MCPServer` objects in this process, for
tests. Both use the handshake-era protocol (``initialize``), which every server in the wild speaks and which
delivers ``notifications/tools/list_changed`` on the session.

A stdio server is started through a tiny launcher that asks Linux to SIGKILL it when the host dies
(``PR_SET_PDEATHSIG``) and then ``exec``s the server, so the server is the child itself, leads its own
process group (the SDK starts it in a new session and kills the group on close) and never outlives a host
that is killed without closing its sessions.

The SDK is imported when the first client is built: a host whose bundles name no MCP server never loads it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol, TextIO

import berth
from berth.config.errors import ConfigError
from berth.tools.contributions import McpServer
from berth.tools.mcp.errors import McpToolError

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client import Client
    from mcp.client._transport import TransportStreams
    from mcp.client.session import MessageHandlerFnT
    from mcp.server.mcpserver import MCPServer

    from berth.config.secrets import Secret

SecretLookup = Callable[[str], "Secret"]
"""Resolves ``"NAME"`` (a platform secret) or ``"b:NAME"`` (the bundle's own secret), like ``ctx.secret``."""

MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
"""Largest single streamed result accepted over HTTP (the SDK's default of 1 MiB is too small for tools)."""

# Runs as ``python -I -S -c`` before the server: die with the host, refuse to start if the host is
# already gone, then become the server. Linux only; elsewhere the server is started directly.
LAUNCHER = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None,use_errno=True).prctl(1,signal.SIGKILL)\n"
    "os.getppid()==int(sys.argv[1]) or os._exit(70)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


class McpConnector(Protocol):
    """Builds the (not yet entered) SDK client for one server; the session's owner task enters and exits it."""

    def client_for(self, server: McpServer, message_handler: MessageHandlerFnT) -> Client:
        """A client for ``server`` that passes server notifications to ``message_handler``.

        Raises :class:`McpToolError` (``mcp_server_unavailable``) when the client cannot be built, for
        example because a secret the config names cannot be resolved.
        """
        ...


def resolve_secret_refs(values: Mapping[str, str], secret: SecretLookup, *, alias: str, what: str) -> dict[str, str]:
    """``values`` with each ``secret:NAME`` / ``b:NAME`` value replaced by the secret's value.

    A value that cannot be resolved raises :class:`McpToolError` naming the key and reference, never a value.
    """
    resolved: dict[str, str] = {}
    for key, value in values.items():
        reference = secret_reference(value)
        if reference is None:
            resolved[key] = value
            continue
        try:
            resolved[key] = secret(reference).reveal()
        except ConfigError as exc:
            raise McpToolError(
                "mcp_server_unavailable",
                f"MCP server '{alias}': {what} '{key}' names '{value}', which cannot be resolved ({exc.code}): {exc}",
            ) from None
    return resolved


def secret_reference(value: str) -> str | None:
    """What to pass to the secret lookup for a ``secret:NAME`` or ``b:NAME`` value; None for a plain value."""
    if value.startswith("secret:"):
        return value[len("secret:") :]
    if value.startswith("b:"):
        return value
    return None


class TransportConnector:
    """Connects over the transport each config names; secrets are resolved each time a session opens.

    ``stderr`` receives stdio servers' standard error (the host's own by default).
    """

    def __init__(self, secret: SecretLookup, *, stderr: TextIO | None = None) -> None:
        self._secret = secret
        self._stderr = stderr

    def client_for(self, server: McpServer, message_handler: MessageHandlerFnT) -> Client:
        """An SDK client over ``server.transport`` (see :class:`McpConnector`)."""
        from mcp.client import Client
        from mcp.client.sse import sse_client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if server.transport == "stdio":
            assert server.command is not None  # guaranteed by McpServer's validator
            env = resolve_secret_refs(server.env, self._secret, alias=server.alias, what="env")
            command, args = guarded_command(server.command, server.args)
            transport = stdio_client(
                StdioServerParameters(command=command, args=args, env=env or None),
                errlog=self._stderr or sys.stderr,
            )
        else:
            assert server.url is not None  # guaranteed by McpServer's validator
            headers = resolve_secret_refs(server.headers, self._secret, alias=server.alias, what="header")
            if server.transport == "sse":
                transport = sse_client(server.url, headers=headers, timeout=server.connect_timeout_s)
            else:
                transport = _streamable_http(server.url, headers, server.connect_timeout_s)
        return Client(
            transport, mode="legacy", cache=None, message_handler=message_handler, client_info=berth_client_info()
        )


class InProcessConnector:
    """Connects to :class:`~mcp.server.mcpserver.MCPServer` objects in this process, by alias (for tests)."""

    def __init__(self, servers: Mapping[str, MCPServer]) -> None:
        self._servers = dict(servers)

    def client_for(self, server: McpServer, message_handler: MessageHandlerFnT) -> Client:
        """An in-memory client for the server registered under ``server.alias``."""
        from mcp.client import Client

        target = self._servers.get(server.alias)
        if target is None:
            raise McpToolError("mcp_server_unavailable", f"MCP server '{server.alias}' is not registered in-process")
        return Client(
            target, mode="legacy", cache=None, message_handler=message_handler, client_info=berth_client_info()
        )


def berth_client_info() -> types.Implementation:
    """How Berth announces itself in ``initialize`` (``clientInfo``): ``berth`` and its version."""
    from mcp_types import Implementation

    return Implementation(name="berth", title="Berth", version=berth.__version__)


def guarded_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command line that starts ``command`` so that it dies with this process (Linux), else unchanged."""
    if not sys.platform.startswith("linux"):
        return command, list(args)
    return sys.executable, ["-I", "-S", "-c", LAUNCHER, str(os.getpid()), command, *args]


@asynccontextmanager
async def _streamable_http(
    url: str, headers: dict[str, str], connect_timeout_s: float
) -> AsyncIterator[TransportStreams]:
    # The SDK leaves a client it is given open, so this one is entered (and closed) here.
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT

    timeout = httpx2.Timeout(connect_timeout_s, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http, max_sse_event_size=MAX_SSE_EVENT_BYTES) as streams,
    ):
        yield streams
