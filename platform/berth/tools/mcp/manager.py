"""The MCP tools of one bundle generation: listing them, calling them, and the sessions behind the calls.

A :class:`McpToolManager` is built from the generation's ``McpServer`` configs and a secret lookup. It
lists every server's tools concurrently (each bounded by its own connect timeout) and offers them as
``mcp.<alias>.<tool>`` with the server's description and input schema, filtered by the config's allow-list;
a server that sends ``notifications/tools/list_changed`` is listed again. A server that does not answer is
marked unavailable with the reason and the time it went down: its tools are reported inactive and calls to it
fail at once with ``mcp_server_unavailable``, while a background task retries it (first after the server's
``retry_after_s``, then doubling up to ``retry_max_s``) without blocking any turn. A session that is lost outside a
call (the server process died, the HTTP peer went away) is re-listed at once on a new session; if that fails the
server is unavailable and retried the same way. When a server answers again its tools are listed again and
``on_change`` fires, so the runtime offers them from its next round.

Sessions follow each server's ``session`` mode: ``shared`` (one session for the generation),
``per_conversation`` (one per conversation id; the session opened to list the tools is handed to the first
conversation) or ``per_call`` (opened and closed around each call). A call whose session dies is retried once
on a new session; a second loss is ``mcp_session_lost``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from berth.tools.contributions import McpServer
from berth.tools.mcp.errors import McpToolError, SessionLostError
from berth.tools.mcp.results import tool_output_from_result
from berth.tools.mcp.sessions import OwnedSession
from berth.tools.mcp.transports import McpConnector, SecretLookup, TransportConnector

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.shared.dispatcher import ProgressFnT

    from berth.tools.results import ToolOutput

logger = logging.getLogger(__name__)

TOOL_ID_PREFIX = "mcp."

ServerState = Literal["pending", "available", "unavailable"]


@dataclass(frozen=True)
class McpTool:
    """One tool a server offers, as the catalog shows it.

    ``active`` is False while the server is unavailable; ``input_schema`` is the server's own (an empty object
    schema for an allow-listed tool of a server that was never reached).
    """

    tool_id: str
    alias: str
    name: str
    description: str
    input_schema: dict[str, Any] = field(repr=False)
    active: bool = True
    read_only: bool = False


@dataclass(frozen=True)
class McpServerStatus:
    """A server's state for ANNOUNCE: ``pending`` (not listed yet), ``available`` or ``unavailable``.

    ``reason`` says why a server is unavailable, ``since`` when it went down (UTC) and ``next_retry_in_s`` when
    the background retry tries it next; ``missing_tools`` names allow-listed tools it does not offer.
    """

    alias: str
    state: ServerState
    reason: str | None
    tools: tuple[McpTool, ...]
    missing_tools: tuple[str, ...] = ()
    since: datetime | None = None
    next_retry_in_s: float | None = None

    def describe_unavailable(self) -> str:
        """The reason with when the server went down and when it is retried (for ANNOUNCE's inactive tools)."""
        reason = self.reason or f"MCP server {self.alias} is {self.state}"
        if self.since is None:
            return reason
        retry = f"; retried in the background, next in {self.next_retry_in_s:.0f} s" if self.next_retry_in_s else ""
        return f"{reason} (down since {self.since:%Y-%m-%d %H:%M:%S} UTC{retry})"


@dataclass(eq=False)
class _Server:
    """What the manager knows about one server, and the sessions open to it."""

    config: McpServer
    state: ServerState = "pending"
    reason: str | None = None
    retry_at: float = 0.0
    retry_delay_s: float = 0.0
    since: datetime | None = None
    listing: tuple[types.Tool, ...] | None = None
    shared: OwnedSession | None = None
    spare: OwnedSession | None = None
    conversations: dict[str, OwnedSession] = field(default_factory=dict)
    load: asyncio.Task[None] | None = None
    refetch: asyncio.Task[None] | None = None
    refetch_again: bool = False
    recovery: asyncio.Task[None] | None = None

    @property
    def alias(self) -> str:
        return self.config.alias

    def allows(self, name: str) -> bool:
        return "*" in self.config.tools or name in self.config.tools


class McpToolManager:
    """Lists and calls the MCP tools of one bundle generation (see the module docstring).

    :param servers: the generation's ``McpServer`` configs (aliases must be unique, as the catalog ensures).
    :param secret: resolves ``secret:NAME`` / ``b:NAME`` values in env and headers, at connect time.
    :param connector: how sessions reach servers; :class:`TransportConnector` over ``secret`` by default.
    :param on_change: called with a server's alias whenever its tools or its availability change.
    :param clock: the wall clock for ``since`` (UTC).
    """

    def __init__(
        self,
        servers: Iterable[McpServer],
        secret: SecretLookup,
        *,
        connector: McpConnector | None = None,
        on_change: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._servers: dict[str, _Server] = {}
        for config in servers:
            if config.alias in self._servers:
                raise ValueError(f"MCP server alias '{config.alias}' is configured twice")
            self._servers[config.alias] = _Server(config)
        self._connector = connector or TransportConnector(secret)
        self._on_change = on_change
        self._clock = clock
        self._sessions: set[OwnedSession] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def __aenter__(self) -> McpToolManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def aliases(self) -> list[str]:
        """The configured servers' aliases, sorted."""
        return sorted(self._servers)

    def start_loading(self) -> None:
        """Start listing every server's tools in the background (what :meth:`load` waits for)."""
        for server in self._servers.values():
            self._ensure_load(server)

    async def load(self) -> list[McpServerStatus]:
        """List every server's tools concurrently, each within its connect timeout; never raises for a server.

        Servers already listed are not listed again (``list_changed`` keeps them current). Returns
        :meth:`statuses` afterwards.
        """
        self._check_open()
        tasks = [self._ensure_load(server) for server in self._servers.values()]
        if tasks:
            await asyncio.wait(tasks)
        return self.statuses()

    def statuses(self) -> list[McpServerStatus]:
        """Every server's current state and tools, by alias (does not wait for anything)."""
        return [self._status(self._servers[alias]) for alias in self.aliases]

    def tools(self) -> list[McpTool]:
        """Every tool of every server, active or not, sorted by id (does not wait for anything)."""
        return sorted((tool for status in self.statuses() for tool in status.tools), key=lambda tool: tool.tool_id)

    async def call(
        self,
        tool_id: str,
        params: Mapping[str, Any],
        scope_key: str | None = None,
        *,
        on_progress: ProgressFnT | None = None,
    ) -> ToolOutput:
        """Call ``mcp.<alias>.<tool>`` with ``params`` and map the result (``isError`` → ``is_error``).

        ``scope_key`` is the conversation id; ``per_conversation`` servers need it. Raises
        :class:`McpToolError` with a stable code for every failure the model or the runtime should see.
        """
        self._check_open()
        server, name = self._resolve(tool_id)
        self._check_available(server)
        arguments = dict(params)
        for attempt in (1, 2):
            session = self._session_for(server, scope_key)
            try:
                result = await session.call_tool(
                    name, arguments, timeout_s=server.config.call_timeout_s, on_progress=on_progress
                )
            except SessionLostError as lost:
                self._forget(server, session)
                if attempt == 2:
                    logger.warning(
                        "MCP server %s lost its session again during '%s' after a reconnect; giving up on this call",
                        server.alias,
                        name,
                    )
                    raise McpToolError(
                        "mcp_session_lost",
                        f"{lost}; it was reconnected and the call retried once, and the connection was lost again. "
                        f"The server may be crashing on this call; check its logs before calling '{tool_id}' again.",
                    ) from None
                logger.info("MCP server %s lost its session during '%s'; reconnecting once", server.alias, name)
                continue
            except McpToolError as error:
                if error.code == "mcp_server_unavailable":
                    self._forget(server, session)
                    self._mark_unavailable(server, error.message)
                raise
            finally:
                if server.config.session == "per_call":
                    self._forget(server, session)
            self._mark_available(server)
            return tool_output_from_result(result)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def close_scope(self, scope_key: str) -> None:
        """Close the ``per_conversation`` sessions of conversation ``scope_key`` (the conversation ended)."""
        sessions = [
            session for server in self._servers.values() if (session := server.conversations.pop(scope_key, None))
        ]
        await self._close_sessions(sessions)

    async def aclose(self) -> None:
        """Close every session and stop every background listing (the bundle generation was unloaded)."""
        self._closed = True
        tasks = [
            task
            for server in self._servers.values()
            for task in (server.load, server.refetch, server.recovery)
            if task is not None
        ]
        for task in tasks:
            task.cancel()
        for server in self._servers.values():
            server.shared = server.spare = None
            server.conversations.clear()
        await self._close_sessions(list(self._sessions))
        if tasks:
            await asyncio.wait(tasks)
        if self._closing:
            await asyncio.wait(set(self._closing))

    # -- listing ---------------------------------------------------------------------------------------

    def _ensure_load(self, server: _Server) -> asyncio.Task[None]:
        if server.load is None:
            server.load = asyncio.create_task(self._load(server), name=f"mcp list tools {server.alias}")
        return server.load

    async def _load(self, server: _Server) -> None:
        try:
            tools = await self._list_tools(server)
        except (McpToolError, SessionLostError) as error:
            self._mark_unavailable(server, str(error))
            return
        self._set_listing(server, tools)
        self._mark_available(server)

    async def _list_tools(self, server: _Server) -> list[types.Tool]:
        """List the server's tools on its listing session (a failed session is dropped)."""
        session = self._listing_session(server)
        try:
            return await session.list_tools(timeout_s=server.config.connect_timeout_s)
        except (McpToolError, SessionLostError):
            self._forget(server, session)
            raise
        finally:
            if server.config.session == "per_call":
                self._forget(server, session)

    async def _probe_tools(self, server: _Server) -> list[types.Tool]:
        """List the server's tools on a session of its own, closed afterwards (background re-listing never
        touches the sessions calls use)."""
        session = self._new_session(server, "probe")
        try:
            return await session.list_tools(timeout_s=server.config.connect_timeout_s)
        finally:
            self._forget(server, session)

    async def _relist(self, server: _Server) -> None:
        """Re-list a server whose session was lost while idle: still there (a new process), or down."""
        try:
            tools = await self._probe_tools(server)
        except (McpToolError, SessionLostError) as error:
            self._mark_unavailable(server, str(error))
            return
        self._set_listing(server, tools)
        self._notify(server)

    def _listing_session(self, server: _Server) -> OwnedSession:
        if server.config.session == "shared":
            return self._session_for(server, None)
        session = self._new_session(server, "listing" if server.config.session == "per_call" else "spare")
        if server.config.session == "per_conversation":
            server.spare = session
        return session

    def _tools_changed(self, session: OwnedSession) -> None:
        server = self._servers.get(session.alias)
        if server is None or self._closed:
            return
        if server.refetch is not None and not server.refetch.done():
            server.refetch_again = True
            return
        server.refetch = asyncio.create_task(self._refetch(server, session), name=f"mcp relist tools {server.alias}")

    async def _refetch(self, server: _Server, session: OwnedSession) -> None:
        while True:
            server.refetch_again = False
            if not session.usable:
                return
            try:
                tools = await session.list_tools(timeout_s=server.config.connect_timeout_s)
            except (McpToolError, SessionLostError) as error:
                logger.warning("MCP server %s: listing tools after list_changed failed: %s", server.alias, error)
                return
            self._set_listing(server, tools)
            self._notify(server)
            if not server.refetch_again:
                return

    def _set_listing(self, server: _Server, tools: Sequence[types.Tool]) -> None:
        server.listing = tuple(tool for tool in tools if server.allows(tool.name))

    # -- sessions --------------------------------------------------------------------------------------

    def _session_for(self, server: _Server, scope_key: str | None) -> OwnedSession:
        mode = server.config.session
        if mode == "shared":
            if server.shared is None or not server.shared.usable:
                server.shared = self._new_session(server, "shared")
            return server.shared
        if mode == "per_call":
            return self._new_session(server, "call")
        if scope_key is None:
            raise McpToolError(
                "mcp_scope_required",
                f"MCP server '{server.alias}' keeps one session per conversation; pass the conversation id",
            )
        session = server.conversations.get(scope_key)
        if session is None or not session.usable:
            spare, server.spare = server.spare, None
            if spare is not None and spare.usable:
                spare.scope = f"conversation {scope_key}"
                session = spare
            else:
                session = self._new_session(server, f"conversation {scope_key}")
            server.conversations[scope_key] = session
        return session

    def _new_session(self, server: _Server, scope: str) -> OwnedSession:
        session = OwnedSession(
            server.config,
            self._connector,
            scope=scope,
            on_tools_changed=self._tools_changed,
            on_lost=self._session_lost,
        )
        self._sessions.add(session)
        return session

    def _forget(self, server: _Server, session: OwnedSession) -> None:
        """Drop ``session`` from wherever it is kept and close it in the background."""
        if server.shared is session:
            server.shared = None
        if server.spare is session:
            server.spare = None
        for key, kept in list(server.conversations.items()):
            if kept is session:
                del server.conversations[key]
        if session in self._sessions:
            task = asyncio.create_task(self._close_sessions([session]), name=f"mcp close {session.alias}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close_sessions(self, sessions: Sequence[OwnedSession]) -> None:
        for session in sessions:
            self._sessions.discard(session)
        if sessions:
            await asyncio.gather(*(session.aclose() for session in sessions))

    # -- state -----------------------------------------------------------------------------------------

    def _resolve(self, tool_id: str) -> tuple[_Server, str]:
        alias, _, name = tool_id.removeprefix(TOOL_ID_PREFIX).partition(".")
        server = self._servers.get(alias) if tool_id.startswith(TOOL_ID_PREFIX) else None
        if server is None or not name:
            known = ", ".join(f"mcp.{alias}" for alias in self.aliases) or "none"
            raise McpToolError("mcp_unknown_tool", f"'{tool_id}' is no MCP tool of this bundle (servers: {known})")
        if not server.allows(name):
            raise McpToolError(
                "mcp_unknown_tool",
                f"tool '{name}' of MCP server '{server.alias}' is not in its allow-list "
                f"({', '.join(server.config.tools)})",
            )
        return server, name

    def _check_open(self) -> None:
        if self._closed:
            raise McpToolError("mcp_closed", "the MCP tools of this bundle generation were closed (it was unloaded)")

    def _check_available(self, server: _Server) -> None:
        if server.state == "unavailable" and asyncio.get_running_loop().time() < server.retry_at:
            raise McpToolError("mcp_server_unavailable", server.reason or f"MCP server '{server.alias}' is unavailable")

    def _mark_unavailable(self, server: _Server, reason: str) -> None:
        newly = server.state != "unavailable"
        if newly:
            server.since = self._clock()
            server.retry_delay_s = server.config.retry_after_s
            logger.warning(
                "MCP server %s is unavailable: %s; retrying in the background, first in %g s",
                server.alias,
                reason,
                server.retry_delay_s,
            )
        server.retry_at = asyncio.get_running_loop().time() + server.retry_delay_s
        changed = newly or server.reason != reason
        server.state, server.reason = "unavailable", reason
        if changed:
            self._notify(server)
        self._ensure_recovery(server)

    def _ensure_recovery(self, server: _Server) -> None:
        if self._closed or (server.recovery is not None and not server.recovery.done()):
            return
        server.recovery = asyncio.create_task(self._recover(server), name=f"mcp recover {server.alias}")

    async def _recover(self, server: _Server) -> None:
        """Retry an unavailable server until it answers: list its tools on a new session, backing off."""
        loop = asyncio.get_running_loop()
        while self._still_down(server):
            await asyncio.sleep(max(0.0, server.retry_at - loop.time()))
            if not self._still_down(server):  # a call reached it meanwhile, or the manager closed
                return
            try:
                tools = await self._probe_tools(server)
            except (McpToolError, SessionLostError) as error:
                server.retry_delay_s = min(server.retry_delay_s * 2, server.config.retry_max_s)
                server.retry_at = loop.time() + server.retry_delay_s
                server.reason = str(error)
                logger.info(
                    "MCP server %s is still unavailable (%s); next retry in %g s",
                    server.alias,
                    error,
                    server.retry_delay_s,
                )
                continue
            self._set_listing(server, tools)
            logger.warning(
                "MCP server %s is available again (down since %s); %d tool(s) listed",
                server.alias,
                f"{server.since:%H:%M:%S} UTC" if server.since else "?",
                len(server.listing or ()),
            )
            self._mark_available(server)

    def _still_down(self, server: _Server) -> bool:
        return not self._closed and server.state == "unavailable"

    def _session_lost(self, session: OwnedSession) -> None:
        """A session ended without being closed: re-list the server at once on a new session."""
        server = self._servers.get(session.alias)
        if server is None or self._closed:
            return
        self._forget(server, session)
        if server.state == "unavailable" or (server.refetch is not None and not server.refetch.done()):
            return  # the background retry (or a re-listing) is already on it
        server.refetch = asyncio.create_task(self._relist(server), name=f"mcp relist tools {server.alias}")

    def _mark_available(self, server: _Server) -> None:
        was = server.state
        server.state, server.reason = "available", None
        server.since, server.retry_delay_s = None, 0.0
        if was != "available":
            self._notify(server)
            if server.listing is None and not self._closed:
                server.load = None  # listed never: list now that the server answers
                self._ensure_load(server)

    def _notify(self, server: _Server) -> None:
        if self._on_change is not None:
            try:
                self._on_change(server.alias)
            except Exception:
                logger.exception("on_change callback failed for MCP server %s", server.alias)

    def _status(self, server: _Server) -> McpServerStatus:
        active = server.state != "unavailable"
        tools: list[McpTool] = []
        missing: tuple[str, ...] = ()
        if server.listing is not None:
            tools = [_catalog_tool(server.alias, tool, active) for tool in server.listing]
            if "*" not in server.config.tools:
                offered = {tool.name for tool in server.listing}
                missing = tuple(name for name in server.config.tools if name not in offered)
        elif "*" not in server.config.tools:
            tools = [
                McpTool(f"{TOOL_ID_PREFIX}{server.alias}.{name}", server.alias, name, "", {"type": "object"}, False)
                for name in server.config.tools
            ]
        next_retry = None
        if server.state == "unavailable":
            next_retry = max(0.0, server.retry_at - asyncio.get_running_loop().time())
        return McpServerStatus(
            server.alias, server.state, server.reason, tuple(tools), missing, server.since, next_retry
        )


def _catalog_tool(alias: str, tool: types.Tool, active: bool) -> McpTool:
    annotations = tool.annotations
    return McpTool(
        tool_id=f"{TOOL_ID_PREFIX}{alias}.{tool.name}",
        alias=alias,
        name=tool.name,
        description=tool.description or tool.title or "",
        input_schema=dict(tool.input_schema),
        active=active,
        read_only=bool(annotations is not None and annotations.read_only_hint),
    )
