"""``create_app``: the FastAPI application of a Berth host (SPEC §9).

:func:`build_services` is what ``berth worker`` needs too, and a worker serves no API: FastAPI, the routes and the
middleware are imported by :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import berth
from berth.api.services import HostServices
from berth.config import Configuration, find_descriptors_dir
from berth.host.plugins import PlatformPlugins
from berth.host.runtime import HostRuntime

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"


def build_services(
    descriptors: Path | None = None,
    *,
    var_root: Path | None = None,
    watch: bool = False,
    platform_overrides: dict[str, Any] | None = None,
    worker_id: str | None = None,
    plugins: PlatformPlugins | None = None,
) -> HostServices:
    """Host services over a descriptors folder (default location when None) with the installed plugins.

    :param worker_id: this process's name in reload reports (default: host-pid).
    :param plugins: the platform plugins when the caller discovered them already (``berth run --demo`` builds the
        services twice: the second time with overrides read from the first's configuration).
    """
    plugins = plugins or PlatformPlugins.discover()
    root = find_descriptors_dir(descriptors)

    def load() -> Configuration:
        return Configuration.load(
            root, secret_providers=plugins.secret_providers(), platform_overrides=platform_overrides
        )

    runtime = HostRuntime(load, plugins, watch=watch, worker_id=worker_id, var_root=var_root)
    services = HostServices(runtime, plugins, var_root=var_root)
    services.initial_config = load()  # descriptor errors surface before the server starts
    return services


def create_app(
    descriptors: Path | None = None,
    *,
    services: HostServices | None = None,
    govern_heap: bool = False,
    **options: Any,
) -> FastAPI:
    """The API app; ``services`` default to :func:`build_services` over ``descriptors``.

    :param govern_heap: keep the garbage collector's full passes short while serving
        (:class:`~berth.api.heap.HeapGovernor`: the startup heap and what survives full collections are
        frozen, everything is swept once an hour); a server process does this, a test's app not.
        Measured on ``bench/api_load.py --turns 12``: full-collection pauses of 60 to 190 ms every few seconds
        became rare sweeps, and the long run's added p99 first delta went from 76-126 ms to 4.5 ms.
    """
    from fastapi import FastAPI
    from fastapi.middleware.cors import CORSMiddleware

    from berth.api.body_limit import BodyLimitMiddleware
    from berth.api.errors import install_error_handlers
    from berth.api.header_limit import HeaderLimitMiddleware
    from berth.api.heap import HeapGovernor
    from berth.api.mcp_server import McpEndpoint
    from berth.api.routes import admin, bundles, conversations, ops, usage
    from berth.api.safe_paths import SafeStaticFiles
    from berth.api.security_headers import SecurityHeadersMiddleware

    host = services or build_services(descriptors, **options)
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
    app.mount("/static", SafeStaticFiles(directory=STATIC), name="static")
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
