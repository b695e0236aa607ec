"""The FastAPI application of a Berth host (SPEC §9): routes, middleware, the web UI's files and the MCP endpoint.

:func:`berth.api.app.create_app` builds it with :func:`build_app`; this module imports FastAPI and every route, which
``berth worker`` (it serves no API) never needs, and which ``berth run`` imports with its command (see
:data:`berth.cli.COMMANDS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import berth
from berth.api.edge import EdgeMiddleware
from berth.api.errors import install_error_handlers
from berth.api.heap import HeapGovernor
from berth.api.mcp_server import McpEndpoint
from berth.api.routes import admin, bundles, conversations, ops, usage
from berth.api.safe_paths import SafeStaticFiles
from berth.turns.services import HostServices

__all__ = ["build_app"]


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
    # The hot route first: every turn starts there (see StartTurnRoute).
    app.router.routes.insert(0, conversations.StartTurnRoute())

    # One layer for header limits, hardening headers, CORS, latency and body limits (berth.api.edge: it does
    # what five separate layers did, in their order, at one call per request and one comparison per streamed frame).
    app.add_middleware(EdgeMiddleware, services=host, cors_origins=_cors_origins(host))
    return app


def _cors_origins(host: HostServices) -> list[str]:
    config = host.initial_config
    return list(config.descriptors.gateway.cors.allow_origins) if config is not None else []
