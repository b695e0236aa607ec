"""Bundles served as MCP servers: ``/mcp/{tenant}/{project}/{bundle}`` over streamable HTTP (SPEC §6).

Each bundle's own ``@tool`` functions and its tool packs' tools are offered under their catalog ids
(``hello.greet``, ``web.search``), with the params' JSON Schema as input schema. The platform's ``react.*``
tools and the MCP tools a bundle itself consumes (``mcp.<alias>.<tool>``) are not re-exported.

One low-level SDK :class:`~mcp.server.lowlevel.Server` serves every path: its handlers read the target
(tenant, project, bundle, caller) that :class:`McpEndpoint` put into the request's ASGI scope after
authenticating it with the REST API's keys, and resolve the bundle's *current* generation on every request,
so ``tools/list`` after a reload shows the new tool set and ``tools/call`` runs the new code. A call pins the
generation it runs on (``registry.use``), like a turn does. Sessions that listed a bundle's tools get
``notifications/tools/list_changed`` when that bundle is reloaded.

The SDK is imported, and its session manager started, by the first MCP request (:mod:`berth.api.mcp_sdk`): a host
that is never asked over MCP does not load it, and starts that much sooner.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import berth
from berth.api.errors import error_body
from berth.bundle.context import BundleContext
from berth.config import ConfigError
from berth.host.generation import BundleGeneration
from berth.host.registry import ReloadOutcome
from berth.runtime.toolbox import ToolNotice
from berth.tools.packs import ToolPackFactory
from berth.tools.results import ToolOutput
from berth.tools.spec import ToolSpec
from berth.turns.callers import Caller, authenticate
from berth.turns.errors import ServiceError, not_found
from berth.turns.services import HostServices

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = logging.getLogger(__name__)

MCP_PATH = "/mcp/{tenant}/{project}/{bundle}"
"""The route an :class:`McpEndpoint` is registered under."""

MAX_LISTENERS = 10_000
"""Sessions remembered for ``tools/list_changed`` (the SDK's default session limit)."""

MCP_SESSION_ID_HEADER = "mcp-session-id"
"""The streamable HTTP transport's session header (the SDK's ``MCP_SESSION_ID_HEADER``)."""

_TARGET_KEY = "berth.mcp_target"


@dataclass(frozen=True)
class McpTarget:
    """Whose request this is and which bundle's tools it addresses (checked before the SDK sees it)."""

    tenant: str
    project: str
    bundle_id: str
    caller: Caller


@dataclass(frozen=True)
class ExposedTool:
    """A tool a bundle offers over MCP: its catalog id and the spec that runs it."""

    tool_id: str
    spec: ToolSpec

    def describe(self) -> types.Tool:
        """The ``tools/list`` entry: id, description, params schema, read-only hint."""
        import mcp_types as types

        return types.Tool(
            name=self.tool_id,
            description=self.spec.description,
            input_schema=self.spec.input_schema,
            annotations=types.ToolAnnotations(read_only_hint=True) if self.spec.read_only else None,
        )


def exposed_tools(
    generation: BundleGeneration, context: BundleContext, tool_packs: Mapping[str, ToolPackFactory]
) -> dict[str, ExposedTool]:
    """The tools ``generation`` offers in ``context``'s scope, by id: its functions and its packs' tools
    (a pack not installed on this host offers nothing; MCP servers the bundle consumes are not re-exported)."""
    scoped = generation.tools_in(context, tool_packs)
    return {tool_id: ExposedTool(tool_id, spec) for tool_id, spec in scoped.specs.items()}


async def call_exposed_tool(tool: ExposedTool, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """Validate ``arguments`` and run the tool with its timeout, as the runtime does; every failure the caller
    can fix or should know about is an ``isError`` result whose text starts with the runtime's code."""
    try:
        validated = tool.spec.validate_params(arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
        return error_result("tool_params_invalid", f"params of {tool.tool_id} do not match its schema: {problems}")
    try:
        value = await tool.spec.invoke({name: getattr(validated, name) for name in type(validated).model_fields})
    except ToolNotice as notice:
        return error_result(notice.code, notice.message)
    except TimeoutError:
        return error_result("tool_timeout", f"{tool.tool_id} did not finish within {tool.spec.timeout_s:g} s")
    except Exception as exc:
        log.warning("tool %s failed (called over MCP)", tool.tool_id, exc_info=True)
        return error_result("tool_failed", f"{tool.tool_id} raised {type(exc).__name__}: {exc}")
    return tool_result(value)


def tool_result(value: Any) -> types.CallToolResult:
    """Map a tool's return value (or :class:`ToolOutput`) to an MCP result: the value as text (JSON for data,
    which is also ``structuredContent`` when it is an object), images, sources as resources, ``isError``."""
    import mcp_types as types

    output = value if isinstance(value, ToolOutput) else ToolOutput(value=value)
    data = output.value.model_dump(mode="json") if isinstance(output.value, BaseModel) else output.value
    content: list[types.ContentBlock] = []
    structured: dict[str, Any] | None = None
    if isinstance(data, str):
        content.append(types.TextContent(text=data))
    elif data is not None:
        text = json.dumps(data, ensure_ascii=False, default=str)
        content.append(types.TextContent(text=text))
        if isinstance(data, dict):
            structured = json.loads(text)  # the JSON-safe form (dates and the like as strings)
    content.extend(types.ImageContent(data=image.data_base64, mime_type=image.mime) for image in output.images)
    for source in output.sources:
        if source.text:
            resource = types.TextResourceContents(uri=source.url, mime_type=source.mime, text=source.text)
            content.append(types.EmbeddedResource(resource=resource))
        else:
            content.append(types.ResourceLink(uri=source.url, name=source.title or source.url, mime_type=source.mime))
    return types.CallToolResult(content=content, structured_content=structured, is_error=output.is_error)


def error_result(code: str, message: str) -> types.CallToolResult:
    """An ``isError`` result saying ``code: message``."""
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(text=f"{code}: {message}")], is_error=True)


@dataclass
class _Listener:
    """A session that listed a bundle's tools, and so wants to hear when they change."""

    bundle_id: str
    session: Any  # the SDK's ServerSession of the session's last tools/list


@dataclass
class McpEndpoint:
    """The ASGI app behind :data:`MCP_PATH`: authenticates like the REST API, scopes to the tenant/project,
    then hands the request to the SDK's streamable HTTP session manager. Enter :meth:`run` for the app's life
    (after the host started)."""

    services: HostServices
    _manager: StreamableHTTPSessionManager | None = field(default=None, init=False)
    _listeners: dict[str, _Listener] = field(default_factory=dict, init=False)
    _notifying: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _stopping: asyncio.Event | None = field(default=None, init=False)
    """An event while :meth:`run` is entered (None outside it), set when the block ends."""
    _loopback_only: bool = field(default=False, init=False)
    _sessions: asyncio.Task[None] | None = field(default=None, init=False)
    """The task that owns the SDK's session manager (enters and leaves its task group), once a request started it."""
    _started: asyncio.Future[StreamableHTTPSessionManager] | None = field(default=None, init=False)

    def route(self) -> Route:
        """The app route at :data:`MCP_PATH` (every method: POST, the GET stream, DELETE)."""
        return Route(MCP_PATH, endpoint=self, include_in_schema=False)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve MCP sessions until the block ends (then every open session is closed).

        The SDK's session manager starts with the first MCP request (:meth:`_session_manager`), in a task of its
        own that this block's end stops.
        """
        descriptors = self.services.config.descriptors
        # With auth: none every caller is the local admin, so only loopback Host/Origin headers are accepted
        # (a web page must not reach the tools through DNS rebinding).
        self._loopback_only = descriptors.gateway.auth.mode == "none"
        self._stopping = asyncio.Event()
        self.services.registry.add_listener(self._generation_changed)
        try:
            yield
        finally:
            self._stopping.set()
            sessions, self._sessions, self._started = self._sessions, None, None
            try:
                if sessions is not None:
                    await sessions
            finally:
                self._stopping = None
                self._manager = None
                self._listeners.clear()
                for task in list(self._notifying):
                    task.cancel()

    async def _session_manager(self) -> StreamableHTTPSessionManager:
        """The SDK's running session manager; the first call imports the SDK and starts it."""
        if self._manager is not None:
            return self._manager
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._started.add_done_callback(_retrieve_exception)
            self._sessions = asyncio.create_task(self._serve_sessions(self._started), name="mcp sessions")
        return await asyncio.shield(self._started)

    async def _serve_sessions(self, started: asyncio.Future[StreamableHTTPSessionManager]) -> None:
        """Own the session manager: run it until :meth:`run` ends (a failure to start fails the waiting requests)."""
        from berth.api.mcp_sdk import LOOPBACK, BerthMcpServer, StreamableHTTPSessionManager

        stopping = self._stopping
        assert stopping is not None
        try:
            server = BerthMcpServer(
                "berth",
                version=berth.__version__,
                instructions="The tools of one Berth bundle, as the bundle's agent sees them.",
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
            )
            manager = StreamableHTTPSessionManager(server, security_settings=LOOPBACK if self._loopback_only else None)
            async with manager.run():
                self._manager = manager
                started.set_result(manager)
                await stopping.wait()
        except asyncio.CancelledError:
            started.cancel()
            raise
        except Exception as exc:
            if started.done():  # it failed while serving: the app's run ends with the error, as it always did
                raise
            started.set_exception(exc)  # it failed to start: the requests waiting for it fail with the error
        finally:
            self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request of an MCP session (POST, GET stream, DELETE)."""
        request = Request(scope, receive)
        try:
            target = self._target(request)
            await self.services.admission.check_request(target.tenant)
        except ServiceError as exc:
            response = JSONResponse(error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)
            await response(scope, receive, send)
            return
        if self._stopping is None or self._stopping.is_set():
            response = JSONResponse(error_body("starting", "the host is still starting"), status_code=503)
            await response(scope, receive, send)
            return
        manager = await self._session_manager()
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if request.method == "DELETE" and session_id:
            self._listeners.pop(session_id, None)
        scope[_TARGET_KEY] = target
        # The SDK binds a session to the credential that opened it; the path is part of that identity, so a
        # session id of one bundle (or scope) is "not found" on another.
        path = f"{target.tenant}/{target.project}/{target.bundle_id}"
        token = AccessToken(token="", client_id=f"{target.caller.key_id}@{path}", scopes=[])
        scope["user"] = AuthenticatedUser(token)
        await manager.handle_request(scope, receive, send)

    def _target(self, request: Request) -> McpTarget:
        params = request.path_params
        tenant, project, bundle_id = str(params["tenant"]), str(params["project"]), str(params["bundle"])
        descriptors = self.services.config.descriptors
        caller = authenticate(request.headers, descriptors)
        if not descriptors.assembly.has_scope(tenant, project) or not caller.may_use(tenant, project):
            raise not_found(f"project {tenant}/{project}")
        if bundle_id not in descriptors.visible_bundles(tenant, project):
            raise not_found(f"bundle {bundle_id}")
        return McpTarget(tenant, project, bundle_id, caller)

    # -- the SDK server's handlers ---------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        import mcp_types as types

        target = _target_of(ctx)
        async with self._pinned(target) as (generation, context):
            tools = exposed_tools(generation, context, self.services.plugins.tool_packs())
        session_id = _session_id(ctx)
        if session_id is not None:
            self._listeners.pop(session_id, None)
            self._listeners[session_id] = _Listener(target.bundle_id, ctx.session)
            while len(self._listeners) > MAX_LISTENERS:  # sessions that expired without a DELETE: oldest first
                self._listeners.pop(next(iter(self._listeners)))
        return types.ListToolsResult(tools=[tools[tool_id].describe() for tool_id in sorted(tools)])

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        target = _target_of(ctx)
        async with self._pinned(target) as (generation, context):
            tools = exposed_tools(generation, context, self.services.plugins.tool_packs())
            tool = tools.get(params.name)
            if tool is None:
                known = ", ".join(sorted(tools)) or "none"
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"unknown_tool: bundle {target.bundle_id} has no tool {params.name!r} (it has: {known})",
                )
            return await call_exposed_tool(tool, params.arguments or {})

    @asynccontextmanager
    async def _pinned(self, target: McpTarget) -> AsyncIterator[tuple[BundleGeneration, BundleContext]]:
        """The bundle's current generation, pinned for the block, and its context in the target's scope."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        registry = self.services.registry
        try:
            async with registry.use(target.bundle_id) as generation:
                context = registry.context_for(generation, target.tenant, target.project)
                yield generation, context
        except ConfigError as exc:
            if exc.code in ("bundle_unavailable", "bundle_not_visible"):
                raise MCPError(types.INTERNAL_ERROR, f"{exc.code}: {exc}") from None
            raise

    # -- tools/list_changed ----------------------------------------------------------------------

    def _generation_changed(self, outcome: ReloadOutcome) -> None:
        if not outcome.ok or self._manager is None:
            return
        for session_id, listener in list(self._listeners.items()):
            if listener.bundle_id == outcome.bundle_id:
                task = asyncio.create_task(self._notify(session_id, listener), name=f"mcp list_changed {session_id}")
                self._notifying.add(task)
                task.add_done_callback(self._notifying.discard)

    async def _notify(self, session_id: str, listener: _Listener) -> None:
        try:
            await listener.session.send_tool_list_changed()
        except Exception:
            # The session is gone (closed, timed out): forget it.
            log.debug("could not send tools/list_changed to MCP session %s", session_id[:12], exc_info=True)
            self._listeners.pop(session_id, None)


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    # A failure to start reaches every request that awaits it; this keeps asyncio from also logging it.
    if not future.cancelled():
        future.exception()


def _target_of(ctx: ServerRequestContext[Any]) -> McpTarget:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    request = ctx.request
    target = request.scope.get(_TARGET_KEY) if isinstance(request, Request) else None
    if not isinstance(target, McpTarget):  # every request reaches the SDK through McpEndpoint
        raise MCPError(types.INTERNAL_ERROR, "the request did not come through Berth's MCP endpoint")
    return target


def _session_id(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    return request.headers.get(MCP_SESSION_ID_HEADER) if isinstance(request, Request) else None
