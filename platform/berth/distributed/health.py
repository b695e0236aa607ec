"""A worker's health port (``berth worker --health-port``): what an orchestrator probes and a scraper reads.

* ``GET /healthz`` — the worker's loops run (200), or it is stopping (503): a liveness probe;
* ``GET /readyz`` — as an API process's ``/readyz``: bundles loaded and PostgreSQL, Redis and the artifact store
  answering, plus the turns this worker runs;
* ``GET /metrics`` — the turn metrics this worker counts (turns, rounds, tokens, tool calls; the queued turns it
  took over, requeued, retried, how long they waited) and the shared queue's depth and oldest turn, with the same
  access rule as an API process's (``platform.metrics.access``; a tenant's admin key reads its tenant's series).

It is a small ASGI app served by uvicorn in the worker's own event loop, so a probe that answers proves that loop
is not blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from berth.turns.errors import ServiceError
from berth.turns.readiness import METRICS_MEDIA_TYPE, metrics_exposition, readiness

if TYPE_CHECKING:
    from berth.distributed.worker import TurnWorker

__all__ = ["WorkerHealthServer", "health_app"]

log = logging.getLogger(__name__)


def health_app(worker: TurnWorker) -> Starlette:
    """The health, readiness and metrics routes of ``worker``."""
    host = worker.services

    async def healthz(_request: Request) -> JSONResponse:
        alive = not worker.stopping
        body = {"status": "ok" if alive else "stopping", "worker": worker.name, "running": worker.running}
        return JSONResponse(body, status_code=200 if alive else 503)

    async def readyz(_request: Request) -> JSONResponse:
        ready, checks = await readiness(host)
        ready = ready and not worker.stopping
        checks["worker"] = {"name": worker.name, "running": worker.running, "turns_run": worker.turns_run}
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        try:
            await worker.observe_queue()
        except Exception:  # Redis away: the gauges keep their last values
            log.warning("could not read the turn queue for the metrics", exc_info=True)
        try:
            return Response(await metrics_exposition(request.headers, host), media_type=METRICS_MEDIA_TYPE)
        except ServiceError as error:
            return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status)

    routes = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
    return Starlette(routes=routes)


class WorkerHealthServer:
    """Serves :func:`health_app` on ``host:port`` in the running event loop until :meth:`aclose`."""

    def __init__(self, worker: TurnWorker, *, host: str, port: int) -> None:
        config = uvicorn.Config(health_app(worker), host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        # the worker's own signal handlers stop it (and this server after the turns): uvicorn must not take them
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen (returns once the socket is bound; raises if it cannot be)."""
        self._task = asyncio.create_task(self._server.serve(), name="worker health port")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise OSError("the worker's health port did not start")
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        """Stop listening."""
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
