"""Bundle surfaces: the caller's bundles, bundle ops routes, widget files."""

from __future__ import annotations

import asyncio
import mimetypes
from collections.abc import MutableMapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from berth.api.deps import caller, scoped_caller, services
from berth.api.errors import SCOPED_ERRORS
from berth.api.safe_paths import file_under
from berth.api.schemas import BundleLoadErrorOut, BundleOut, ToolThreadsOut, WidgetOut
from berth.host.generation import BundleGeneration
from berth.host.registry import BundleStatus
from berth.turns.callers import Caller
from berth.turns.errors import not_found
from berth.turns.services import HostServices

router = APIRouter(tags=["bundles"], responses=SCOPED_ERRORS)
Services = Annotated[HostServices, Depends(services)]
ScopedCaller = Annotated[Caller, Depends(scoped_caller)]


@router.get("/v1/me")
async def who_am_i(request: Request, host: Services) -> dict[str, Any]:
    """What the caller's key covers: tenant (``*`` = any), projects (None = all), roles, and the scopes it can use."""
    who = caller(request)
    scopes = [f"{t}/{p}" for t, p in host.config.descriptors.assembly.scopes() if who.may_use(t, p)]
    return {
        "key_id": who.key_id,
        "tenant": who.tenant,
        "projects": sorted(who.projects) if who.projects else None,
        "roles": sorted(who.roles),
        "scopes": scopes,
    }


@router.get("/v1/{tenant}/{project}/bundles", response_model=list[BundleOut])
async def list_bundles(tenant: str, project: str, who: ScopedCaller, host: Services) -> list[BundleOut]:
    """The bundles this caller may use here, with their widgets and their tool threads for this tenant (``state``
    ``degraded`` while they are stuck)."""
    scope = host.config.descriptors.scope_bundles(tenant, project)
    statuses = {status.id: status for status in host.registry.statuses()}
    out = []
    for bundle_id in scope.bundles:
        status = statuses.get(bundle_id)
        try:
            generation: BundleGeneration | None = host.registry.current(bundle_id)
        except Exception:
            generation = None
        widgets = [
            WidgetOut(
                alias=w.alias,
                title=w.title,
                icon=w.icon,
                url=f"/v1/{tenant}/{project}/bundles/{bundle_id}/widgets/{w.alias}/"
                f"{host.widget_tickets.issue(who, tenant, project, bundle_id, w.alias)}/",
            )
            for w in (generation.widgets.values() if generation else [])
        ]
        threads = host.registry.tool_threads.status(bundle_id, tenant)
        state = status.state if status else "not_loaded"
        load_error = _load_error(status, who) if status is not None else None
        out.append(
            BundleOut(
                id=bundle_id,
                title=(generation.info.title if generation else "") or bundle_id,
                description=generation.info.description if generation else "",
                version=generation.info.version if generation else None,
                default=bundle_id == (scope.default_bundle or scope.bundles[0]),
                state="degraded" if state == "loaded" and threads.degraded else state,
                widgets=widgets,
                tool_threads=ToolThreadsOut(**threads.to_json()),
                load_error=load_error,
            )
        )
    return out


def _load_error(status: BundleStatus, who: Caller) -> BundleLoadErrorOut | None:
    """What the caller may see of the bundle's last failed load: file and line for admins; for other callers only
    a failure that leaves them without the bundle, and without the host's file paths."""
    error = status.error
    if error is None or (status.state != "failed" and not who.is_admin):
        return None
    return BundleLoadErrorOut(
        generation=status.failed_generation,
        serving_generation=status.generation,
        code=error.code,
        message=error.message if who.is_admin else error.public_message(),
        file=error.file if who.is_admin else None,
        line=error.line if who.is_admin else None,
    )


@router.get("/v1/{tenant}/{project}/bundles/{bundle_id}/widgets/{alias}/{ticket}/{path:path}")
async def widget_file(
    tenant: str, project: str, bundle_id: str, alias: str, ticket: str, path: str, host: Services
) -> Response:
    """A widget's file, for the holder of the ticket its URL in the bundle listing carries (an iframe cannot send
    the API key): 404 unless the ticket is valid for this key, scope, bundle and widget, the key still covers the
    scope and the scope enables the bundle. Paths never leave the widget's folder."""
    host.widget_tickets.check(ticket, tenant, project, bundle_id, alias)
    await host.admission.check_request(tenant)
    try:
        generation = host.registry.current(bundle_id)
    except Exception:
        raise not_found(f"bundle {bundle_id}") from None
    return await asyncio.to_thread(_widget_response, generation, alias, path)


def _widget_response(generation: BundleGeneration, alias: str, path: str) -> Response:
    """The response of one of ``generation``'s widget files (read off the event loop)."""
    widget = generation.widgets.get(alias)
    if widget is None:
        raise not_found(f"widget {alias}")
    if widget.html is not None:
        if path not in ("", "index.html"):
            raise not_found(f"widget file {path}")
        return HTMLResponse(widget.html)
    assert widget.static_dir is not None
    target = file_under(Path(widget.static_dir), path)
    if target is None:
        raise not_found(f"widget file {path[:200]!r}")
    mime = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return Response(target.read_bytes(), media_type=mime)  # hardening headers: berth.api.security_headers


_OPS_APPS: dict[tuple[str, int, str, str], FastAPI | None] = {}
_OPS_APPS_KEPT = 256


def _ops_app(generation: BundleGeneration, host: HostServices, tenant: str, project: str) -> FastAPI | None:
    """The bundle's ops routes as an app, built once per generation and scope (None: it has none)."""
    key = (generation.bundle_id, generation.number, tenant, project)
    if key not in _OPS_APPS:
        routes = generation.hooks.routes(host.registry.context_for(generation, tenant, project))
        app = None
        if routes is not None:
            app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
            app.include_router(routes)
        if len(_OPS_APPS) >= _OPS_APPS_KEPT:
            _OPS_APPS.pop(next(iter(_OPS_APPS)))
        _OPS_APPS[key] = app
    return _OPS_APPS[key]


@router.api_route(
    "/v1/{tenant}/{project}/bundles/{bundle_id}/ops/{path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
async def bundle_ops(
    tenant: str, project: str, bundle_id: str, path: str, request: Request, who: ScopedCaller, host: Services
) -> Response:
    """Dispatch to the bundle's own ``berth_routes`` (its current generation), authenticated and scoped."""
    if bundle_id not in host.config.descriptors.visible_bundles(tenant, project):
        raise not_found(f"bundle {bundle_id}")
    generation = host.registry.current(bundle_id)
    app = _ops_app(generation, host, tenant, project)
    if app is None:
        raise not_found(f"bundle {bundle_id} has no ops routes")
    scope: dict[str, Any] = dict(request.scope)
    scope["path"] = "/" + path
    scope["raw_path"] = scope["path"].encode()
    scope["root_path"] = ""
    body = await request.body()
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {k.decode(): v.decode() for k, v in start.get("headers", []) if k.lower() != b"content-length"}
    return Response(content, status_code=start["status"], headers=headers)
