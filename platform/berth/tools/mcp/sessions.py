"""One MCP session, owned by one task: requests reach it through a queue.

The SDK's client is a stack of anyio context managers (transport, session, task groups). Entering one in a
task and leaving it in another raises cancel-scope errors, so every :class:`OwnedSession` has a single owner
task that opens the client, serves requests (each in a child task of its own task group, so calls on one
session run concurrently) and closes the client. Callers only put requests on the queue and await futures.

Lifecycle: the session opens lazily, on the first request. If the server does not answer within its
``connect_timeout_s`` the waiting requests fail at once with ``mcp_server_unavailable`` while the owner tears
the half-open connection down in the background. A request that finds the connection gone raises
:class:`~berth.tools.mcp.errors.SessionLostError` and ends the session; the manager decides whether to
reconnect. A caller that is cancelled cancels its request (the SDK tells the server).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import anyio

from berth.tools.contributions import McpServer
from berth.tools.mcp.errors import McpToolError, SessionLostError

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client import Client
    from mcp.client.session import IncomingMessage
    from mcp.shared.dispatcher import ProgressFnT

    from berth.tools.mcp.transports import McpConnector

logger = logging.getLogger(__name__)

MAX_TOOL_PAGES = 100
"""A ``tools/list`` walk stops after this many pages (a server whose cursor never ends cannot hang a load)."""

Result = TypeVar("Result")


class McpSession(Protocol):
    """The seam between the tool manager and one MCP session: open lazily, list, call, close."""

    @property
    def alias(self) -> str:
        """The alias of the server this session talks to."""
        ...

    @property
    def usable(self) -> bool:
        """False once the session failed to open, lost its connection or was closed."""
        ...

    async def list_tools(self, *, timeout_s: float) -> list[types.Tool]:
        """Every tool the server lists (all pages), opening the session first if needed."""
        ...

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float, on_progress: ProgressFnT | None = None
    ) -> types.CallToolResult:
        """Call tool ``name``; raises :class:`McpToolError` or :class:`SessionLostError`."""
        ...

    async def aclose(self) -> None:
        """Close the session and wait until its connection (and stdio process) is gone."""
        ...


@dataclass(eq=False)
class _Request:
    """One queued request: the operation to run against the client, and the future its caller awaits."""

    run: Callable[[Client], Awaitable[Any]]
    timeout_s: float
    what: str
    future: asyncio.Future[Any] = field(repr=False)


class OwnedSession:
    """An :class:`McpSession` over the SDK client, owned by one task (see the module docstring).

    ``scope`` names what the session serves (``shared``, ``conversation <id>``, ``call``) in messages and task
    names. ``on_tools_changed`` is called (synchronously, from the owner task) when the server sends
    ``notifications/tools/list_changed``; ``on_lost`` when an open session ends, idle, without being closed (a loss
    under a request is that request's caller's to handle: it gets :class:`SessionLostError`).
    """

    def __init__(
        self,
        server: McpServer,
        connector: McpConnector,
        *,
        scope: str = "shared",
        on_tools_changed: Callable[[OwnedSession], None] | None = None,
        on_lost: Callable[[OwnedSession], None] | None = None,
    ) -> None:
        self.server = server
        self.scope = scope
        self.failure: McpToolError | None = None
        self._connector = connector
        self._on_tools_changed = on_tools_changed
        self._on_lost = on_lost
        self._queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._inflight: set[_Request] = set()
        self._opened: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._life: anyio.CancelScope | None = None
        self._open = False
        self._lost = False
        self._lost_under_request = False
        self._closing = False

    def __repr__(self) -> str:
        return f"OwnedSession({self.alias!r}, {self.scope!r}, {self.state})"

    @property
    def alias(self) -> str:
        """The server's alias."""
        return self.server.alias

    @property
    def state(self) -> str:
        """``new``, ``opening``, ``open``, ``failed``, ``lost`` or ``closed``."""
        if self.failure is not None:
            return "failed"
        if self._lost:
            return "lost"
        if self._closing:
            return "closed"
        if self._open:
            return "open"
        return "new" if self._task is None else "opening"

    @property
    def usable(self) -> bool:
        """True while the session is new, opening or open."""
        return self.failure is None and not self._lost and not self._closing

    async def open(self) -> None:
        """Open the session if it is not open yet and wait until it is (or raise why it cannot be)."""
        if self._task is None:
            if not self.usable:
                raise self._unusable_error()
            self._opened = asyncio.get_running_loop().create_future()
            self._opened.add_done_callback(_consume_exception)
            self._task = asyncio.create_task(self._own(), name=f"mcp session {self.alias} ({self.scope})")
        assert self._opened is not None
        await asyncio.shield(self._opened)

    async def list_tools(self, *, timeout_s: float) -> list[types.Tool]:
        """Every tool the server lists, walking all pages."""

        async def run(client: Client) -> list[types.Tool]:
            tools: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(MAX_TOOL_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        return await self._submit(run, timeout_s, "tools/list")

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float, on_progress: ProgressFnT | None = None
    ) -> types.CallToolResult:
        """Call tool ``name`` with ``arguments``; ``on_progress`` receives the server's progress notifications."""

        async def run(client: Client) -> types.CallToolResult:
            return await client.call_tool(name, arguments, progress_callback=on_progress)

        return await self._submit(run, timeout_s, f"tools/call '{name}'")

    async def aclose(self) -> None:
        """Close the session: queued and running requests fail with ``mcp_closed``; waits for the owner task."""
        if not self._closing:
            self._closing = True
            if self._open:
                self._queue.put_nowait(None)  # a graceful exit lets an HTTP session send its DELETE
            elif self._life is not None:
                self._life.cancel()
            self._settle_opened(self._unusable_error())
        if self._task is not None:
            await asyncio.wait({self._task})

    async def _submit(self, run: Callable[[Client], Awaitable[Result]], timeout_s: float, what: str) -> Result:
        await self.open()
        if not self.usable:
            raise self._unusable_error()
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_exception)
        self._queue.put_nowait(_Request(run, timeout_s, what, future))
        # A cancelled caller cancels the future; the owner sees that and cancels the request.
        return await future

    async def _own(self) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.server.connect_timeout_s, self._connect_timed_out)
        try:
            with anyio.CancelScope() as life:
                self._life = life
                if self._closing:
                    life.cancel()
                client = self._connector.client_for(self.server, self._on_message)
                async with client:
                    timer.cancel()
                    self._open = True
                    self._settle_opened(None)
                    async with anyio.create_task_group() as requests:
                        while (request := await self._queue.get()) is not None:
                            requests.start_soon(self._serve, client, request)
                        requests.cancel_scope.cancel()
        except McpToolError as exc:
            self._fail_open(exc)
        except Exception as exc:
            if self._open:
                logger.warning("MCP session %s (%s) ended: %s", self.alias, self.scope, _describe(exc))
                self._lost = True
            else:
                self._fail_open(
                    McpToolError(
                        "mcp_server_unavailable",
                        f"MCP server '{self.alias}' could not be started or connected to: {_describe(exc)}. "
                        f"Its tools are inactive; check its {_where(self.server)}.",
                    )
                )
        finally:
            timer.cancel()
            if not self._closing and self.failure is None:
                self._lost = True
            self._settle_opened(self._unusable_error())
            self._fail_pending()
            idle_loss = self._open and self._lost and not self._lost_under_request and not self._closing
            if idle_loss and self._on_lost is not None:
                self._on_lost(self)

    async def _serve(self, client: Client, request: _Request) -> None:
        if request.future.done():  # the caller gave up while the request was queued
            return
        self._inflight.add(request)
        try:
            with anyio.CancelScope() as scope:
                request.future.add_done_callback(lambda done: scope.cancel() if done.cancelled() else None)
                with anyio.move_on_after(request.timeout_s) as deadline:
                    try:
                        result = await request.run(client)
                    except Exception as exc:
                        self._settle(request, error=self._classify(exc, request))
                        return
                if deadline.cancelled_caught:
                    self._settle(
                        request,
                        error=McpToolError(
                            "mcp_call_timeout",
                            f"MCP server '{self.alias}' did not answer {request.what} within {request.timeout_s:g} s "
                            "(call_timeout_s); the request was cancelled",
                        ),
                    )
                    return
                self._settle(request, result=result)
        finally:
            self._inflight.discard(request)
            if not request.future.done():  # cancelled by the session's own teardown
                self._settle(request, error=self._unusable_error(request.what))

    def _classify(self, exc: Exception, request: _Request) -> Exception:
        from mcp.shared.exceptions import MCPError  # the SDK is imported once a session opens, not before

        if _connection_lost(exc):
            self._lost = self._lost_under_request = True
            if self._life is not None:
                self._life.cancel()
            return SessionLostError(f"MCP server '{self.alias}' closed the connection during {request.what}")
        if isinstance(exc, MCPError):
            return McpToolError(
                "mcp_call_failed",
                f"MCP server '{self.alias}' refused {request.what}: {exc.error.message} (code {exc.error.code})",
            )
        return McpToolError("mcp_call_failed", f"MCP server '{self.alias}' failed {request.what}: {_describe(exc)}")

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification) and self._on_tools_changed is not None:
            self._on_tools_changed(self)
        elif isinstance(message, Exception):
            logger.debug("MCP server %s (%s) transport fault: %s", self.alias, self.scope, _describe(message))

    def _connect_timed_out(self) -> None:
        if self._open or self.failure is not None or self._closing:
            return
        self._fail_open(
            McpToolError(
                "mcp_server_unavailable",
                f"MCP server '{self.alias}' did not answer within its connect timeout "
                f"({self.server.connect_timeout_s:g} s); its tools are inactive. "
                f"Check its {_where(self.server)}, or raise connect_timeout_s.",
            )
        )
        if self._life is not None:
            self._life.cancel()

    def _fail_open(self, error: McpToolError) -> None:
        if self.failure is None and not self._open:
            self.failure = error
        self._settle_opened(self._unusable_error())
        self._fail_pending()

    def _settle_opened(self, error: Exception | None) -> None:
        if self._opened is None or self._opened.done():
            return
        if error is None:
            self._opened.set_result(None)
        else:
            self._opened.set_exception(error)

    def _fail_pending(self) -> None:
        pending = list(self._inflight)
        while not self._queue.empty():
            request = self._queue.get_nowait()
            if request is not None:
                pending.append(request)
        for request in pending:
            self._settle(request, error=self._unusable_error(request.what))

    def _settle(self, request: _Request, *, result: Any = None, error: Exception | None = None) -> None:
        if request.future.done():
            return
        if error is None:
            request.future.set_result(result)
        else:
            request.future.set_exception(error)

    def _unusable_error(self, what: str = "the request") -> Exception:
        if self.failure is not None:
            return self.failure
        if self._lost or not self._closing:  # a teardown this session did not start is a lost connection
            return SessionLostError(f"MCP server '{self.alias}' closed the connection during {what}")
        return McpToolError("mcp_closed", f"the MCP session to '{self.alias}' ({self.scope}) was closed")


def _consume_exception(future: asyncio.Future[Any]) -> None:
    # Failures reach every caller that awaits; this keeps asyncio from also logging unawaited ones.
    if not future.cancelled():
        future.exception()


def _connection_lost(exc: BaseException) -> bool:
    import httpx2
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, BaseExceptionGroup):
        return any(_connection_lost(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(
        exc,
        anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream
        | ConnectionError
        | httpx2.TransportError,
    )


def _describe(exc: BaseException) -> str:
    from mcp.shared.exceptions import MCPError

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = cast(BaseException, exc.exceptions[0])
    if isinstance(exc, MCPError):
        return f"{exc.error.message} (code {exc.error.code})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _where(server: McpServer) -> str:
    if server.transport == "stdio":
        return f"command ('{server.command}')"
    parts = urlsplit(server.url or "")
    # Only scheme, host and path: a query or userinfo may carry a credential.
    return f"url ({parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path})"
