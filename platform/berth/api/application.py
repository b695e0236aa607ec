"""The FastAPI application of a Berth host (SPEC §9): routes, middleware, the web UI's files and the MCP endpoint.

:func:`berth.api.app.create_app` builds it with :func:`build_app`; this module imports FastAPI and every route, which
``berth worker`` (it serves no API) never needs, and which ``berth run`` imports with its command (see
:data:`berth.cli.COMMANDS`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import berth
from berth.api.body_limit import BodyLimitMiddleware
from berth.api.errors import install_error_handlers
from berth.api.header_limit import HeaderLimitMiddleware
from berth.api.heap import HeapGovernor
from berth.api.mcp_server import McpEndpoint
from berth.api.routes import admin, bundles, conversations, ops, usage
from berth.api.safe_paths import SafeStaticFiles
from berth.api.security_headers import SecurityHeadersMiddleware
from berth.turns.services import HostServices

__all__ = ["LatencyMiddleware", "build_app"]


def build_app(host: HostServices, *, govern_heap: bool = False) -> FastAPI:
    """The API app over ``host`` (see :func:`berth.api.app.create_app` for ``govern_heap``)."""
    mcp_endpoint = McpEndpoint(host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await host.start()
        try:
            async with mcp_endpoint.run():
                if not govern_heap:
                    yield
                    return
                governor = HeapGovernor()
                governor.start()
                governing = asyncio.create_task(governor.run(), name="heap governor")
                try:
                    yield
                finally:
                    governing.cancel()
                    governor.stop()
        finally:
            await host.stop()

    app = FastAPI(title="Berth", version=berth.__version__, lifespan=lifespan)
    app.state.services = host
    install_error_handlers(app)
    for router in (ops.router, conversations.router, bundles.router, admin.router, usage.router):
        app.include_router(router)
    app.mount("/static", SafeStaticFiles(directory=ops.STATIC), name="static")
    app.router.routes.append(mcp_endpoint.route())

    app.add_middleware(BodyLimitMiddleware, gateway=host.current_gateway)
    app.add_middleware(LatencyMiddleware, services=host)  # outside the body limit: its 413s are counted too

    origins = _cors_origins(host)
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(HeaderLimitMiddleware)  # outermost: before anything walks the headers
    return app


class LatencyMiddleware:
    """Records every HTTP request's latency by method, route template and status (pure ASGI, so
    streaming responses and client disconnects pass through untouched)."""

    def __init__(self, app: ASGIApp, services: HostServices) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.services.metrics.http.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - started
            )


def _cors_origins(host: HostServices) -> list[str]:
    config = host.initial_config
    return list(config.descriptors.gateway.cors.allow_origins) if config is not None else []
