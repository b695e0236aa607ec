"""``create_app``: the FastAPI application of a Berth host (SPEC §9)."""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from berth import __version__
from berth.api.body_limit import BodyLimitMiddleware
from berth.api.errors import install_error_handlers
from berth.api.mcp_server import McpEndpoint
from berth.api.routes import admin, bundles, conversations, ops
from berth.api.services import HostServices
from berth.config import Configuration, find_descriptors_dir
from berth.host.plugins import PlatformPlugins
from berth.host.runtime import HostRuntime

STATIC = Path(__file__).resolve().parent / "static"


def build_services(
    descriptors: Path | None = None,
    *,
    var_root: Path | None = None,
    watch: bool = False,
    platform_overrides: dict[str, Any] | None = None,
) -> HostServices:
    """Host services over a descriptors folder (default location when None) with the installed plugins."""
    plugins = PlatformPlugins.discover()
    root = find_descriptors_dir(descriptors)

    def load() -> Configuration:
        return Configuration.load(
            root, secret_providers=plugins.secret_providers(), platform_overrides=platform_overrides
        )

    services = HostServices(HostRuntime(load, plugins, watch=watch), plugins, var_root=var_root)
    services.initial_config = load()  # descriptor errors surface before the server starts
    return services


def create_app(
    descriptors: Path | None = None,
    *,
    services: HostServices | None = None,
    freeze_startup_heap: bool = False,
    **options: Any,
) -> FastAPI:
    """The API app; ``services`` default to :func:`build_services` over ``descriptors``.

    :param freeze_startup_heap: once the host has started, move every object alive then (modules,
        models, bundles: most of the heap) out of the garbage collector's sight (``gc.freeze``), so a
        full collection walks only what serving made; a server process does this, a test's app not.
        Measured on ``bench/api_load.py --turns 12``: the longest full collection went from ≈0.5 s to
        ≈0.23 s. The price is bounded: a cycle among the frozen objects is never collected, so the
        generations loaded at startup stay in memory after a hot reload replaces them (once; later
        generations are collected as usual).
    """
    host = services or build_services(descriptors, **options)
    mcp_endpoint = McpEndpoint(host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await host.start()
        try:
            async with mcp_endpoint.run():
                if freeze_startup_heap:
                    gc.collect()
                    gc.freeze()
                yield
        finally:
            await host.stop()

    app = FastAPI(title="Berth", version=__version__, lifespan=lifespan)
    app.state.services = host
    install_error_handlers(app)
    for router in (ops.router, conversations.router, bundles.router, admin.router):
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.router.routes.append(mcp_endpoint.route())

    app.add_middleware(BodyLimitMiddleware, gateway=host.current_gateway)
    app.add_middleware(LatencyMiddleware, services=host)  # outside the body limit: its 413s are counted too

    origins = _cors_origins(host)
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["*"], allow_headers=["*"])
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
