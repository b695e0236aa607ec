"""``/v1/admin/*``: bundles and workers (admin role)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from berth.api.auth import Caller
from berth.api.deps import admin_caller, services
from berth.api.errors import ADMIN_ERRORS, not_found
from berth.api.services import HostServices
from berth.host.broadcast import read_worker_reports, report_of

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ADMIN_ERRORS)
Services = Annotated[HostServices, Depends(services)]
Admin = Annotated[Caller, Depends(admin_caller)]


def _status_rows(host: HostServices) -> list[dict[str, Any]]:
    rows = []
    for status in host.registry.statuses():
        row = asdict(status)
        row["error"] = (
            {
                "code": status.error.code,
                "message": status.error.message,
                "file": status.error.file,
                "line": status.error.line,
                "traceback": status.error.traceback,
            }
            if status.error
            else None
        )
        rows.append(row)
    return rows


@router.get("/bundles")
async def admin_bundles(who: Admin, host: Services) -> dict[str, Any]:
    """Every bundle with this process's generation, state and last error (file, line, traceback)."""
    return {"worker": host.runtime.worker_id, "bundles": _status_rows(host)}


@router.post("/bundles/{bundle_id}/reload")
async def admin_reload(bundle_id: str, who: Admin, host: Services) -> dict[str, Any]:
    """Reload a bundle in every process (this one answers with its outcome)."""
    if bundle_id not in host.config.descriptors.bundles.bundles:
        raise not_found(f"bundle {bundle_id}")
    if host.distributed is not None:
        await host.runtime.request_reload(bundle_id)
        return {"bundle": bundle_id, "broadcast": True}
    outcome = await host.registry.reload(bundle_id, reason="admin")
    error = None
    if outcome.error:
        error = {
            "code": outcome.error.code,
            "message": outcome.error.message,
            "file": outcome.error.file,
            "line": outcome.error.line,
        }
    return {
        "bundle": bundle_id,
        "ok": outcome.ok,
        "generation": outcome.generation,
        "error": error,
        "duration_ms": round(outcome.duration_s * 1000, 1),
    }


@router.get("/workers")
async def admin_workers(who: Admin, host: Services) -> dict[str, Any]:
    """Every host process and its generations (this one only, in embedded mode)."""
    if host.distributed is None:
        return {"workers": [asdict(report_of(host.runtime.worker_id, host.registry))]}
    return {"workers": [asdict(report) for report in await read_worker_reports(host.distributed.redis)]}
