"""``/healthz``, ``/readyz``, ``/metrics`` and the web UI's static files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from berth.api.deps import services
from berth.api.errors import error_responses
from berth.api.schemas import Readiness
from berth.turns.readiness import METRICS_MEDIA_TYPE, metrics_exposition, readiness
from berth.turns.services import HostServices

router = APIRouter(tags=["ops"])
Services = Annotated[HostServices, Depends(services)]
STATIC = Path(__file__).resolve().parent.parent / "static"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "not ready yet (or no longer)"}},
)
async def readyz(host: Services) -> JSONResponse:
    """Storage open, bus running and at least one bundle loaded; in distributed mode, PostgreSQL, Redis and the
    artifact store answering (``checks.services`` says which does not)."""
    ready, checks = await readiness(host)
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get(
    "/metrics",
    responses={
        200: {"content": {"text/plain": {}}, "description": "the Prometheus text exposition"},
        **error_responses(401, 403),
    },
)
async def metrics(request: Request, host: Services) -> Response:
    """Prometheus text format. It names every tenant, so by default only an admin key reads it
    (``platform.metrics.access`` of ``assembly.yaml``: ``admin`` or ``open``); a tenant's admin key reads only its
    tenant's series."""
    return Response(await metrics_exposition(request.headers, host), media_type=METRICS_MEDIA_TYPE)


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    """The web UI."""
    return FileResponse(STATIC / "index.html", media_type="text/html")
