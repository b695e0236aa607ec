"""``/v1/admin/*``: bundles, workers and unfinished turns (admin role).

A global admin key (``tenant: "*"``, every project) sees and acts on everything. A tenant's admin key sees only
the bundles its scopes enable (in ``/bundles`` and in each worker's report), reloads only those (another bundle
is not found, as an unknown one) and reaches only the unfinished turns of the projects it covers."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query

from berth.api.deps import admin_caller, services
from berth.api.errors import ADMIN_ERRORS, error_responses
from berth.host.broadcast import read_worker_reports, report_of
from berth.turns.callers import Caller, covered_bundles
from berth.turns.errors import ServiceError, not_found
from berth.turns.services import HostServices

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ADMIN_ERRORS)
Services = Annotated[HostServices, Depends(services)]
Admin = Annotated[Caller, Depends(admin_caller)]


def _status_rows(host: HostServices, who: Caller) -> list[dict[str, Any]]:
    covered = covered_bundles(who, host.config.descriptors)
    rows = []
    for status in host.registry.statuses():
        if covered is not None and status.id not in covered:
            continue
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
        row["tool_threads"] = {  # the tenants whose calls made a pool, and its state
            pool.tenant: pool.to_json()
            for pool in host.registry.tool_threads.statuses(status.id)
            if who.tenant in ("*", pool.tenant)
        }
        rows.append(row)
    return rows


@router.get("/bundles")
async def admin_bundles(who: Admin, host: Services) -> dict[str, Any]:
    """Every bundle (the key's scopes enable) with this process's generation, state and last error (file, line,
    traceback), and its sync tool threads by tenant (the key's tenants; ``degraded`` while stuck ones refuse its
    calls)."""
    return {"worker": host.runtime.worker_id, "bundles": _status_rows(host, who)}


@router.post("/bundles/{bundle_id}/reload")
async def admin_reload(bundle_id: str, who: Admin, host: Services) -> dict[str, Any]:
    """Reload a bundle in every process (this one answers with its outcome); 404 for a bundle the key's scopes do not
    enable."""
    covered = covered_bundles(who, host.config.descriptors)
    if bundle_id not in host.config.descriptors.bundles.bundles or (covered is not None and bundle_id not in covered):
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
    """Every host process and its generations (this one only, in embedded mode), of the bundles the key's scopes
    enable."""
    if host.distributed is None:
        reports = [report_of(host.runtime.worker_id, host.registry)]
    else:
        reports = await read_worker_reports(host.distributed.redis)
    covered = covered_bundles(who, host.config.descriptors)
    rows = []
    for report in reports:
        row = asdict(report)
        if covered is not None:
            row["bundles"] = {name: value for name, value in row["bundles"].items() if name in covered}
        rows.append(row)
    return {"workers": rows}


def _turn_admin(host: HostServices) -> Any:
    """The turn operations of a distributed deployment (409 ``not_distributed`` in embedded mode)."""
    from berth.turns.admin import TurnAdmin

    parts = host.distributed
    if parts is None:
        raise ServiceError(
            409, "not_distributed", "turns are run and ended by the process that accepts them in embedded mode"
        )
    return TurnAdmin(parts.claims, parts.queue, parts.redis)


@router.get("/turns", responses=error_responses(409))
async def admin_turns(
    who: Admin,
    host: Services,
    stuck_after_s: Annotated[float | None, Query(ge=0, description="only turns no live process owns, this old")] = None,
) -> dict[str, Any]:
    """The unfinished turns (of the key's tenant and projects), oldest first: state, age, attempts, whether a live
    worker owns each, its last error; ``stuck_after_s`` keeps those nobody runs that waited longer than that."""
    from berth.turns.admin import turn_row

    turns = await _turn_admin(host).unfinished(stuck_after_s=stuck_after_s, covers=who.may_use)
    now = datetime.now(UTC)
    return {"turns": [turn_row(turn, now) for turn in turns]}


@router.post("/turns/{turn_id}/end", responses=error_responses(400, 409))
async def admin_end_turn(
    turn_id: str,
    who: Admin,
    host: Services,
    reason: Annotated[str, Body(embed=True, min_length=1, max_length=500)] = "ended by an operator",
) -> dict[str, Any]:
    """Store an unfinished turn ``failed`` (code ``ended_by_operator``) whoever runs it, and end its stream so."""
    from berth.turns.admin import TurnNotUnfinishedError

    try:
        turn = await _turn_admin(host).end(turn_id, reason=reason, covers=who.may_use)
    except TurnNotUnfinishedError as error:
        raise not_found(f"unfinished turn {turn_id}") from error
    return {"turn_id": turn.turn_id, "ended": True, "code": "ended_by_operator"}


@router.post("/turns/{turn_id}/retry", responses=error_responses(409))
async def admin_retry_turn(turn_id: str, who: Admin, host: Services) -> dict[str, Any]:
    """Queue an unfinished turn no live worker runs again, its attempts reset (409 ``turn_running`` when one
    does)."""
    from berth.turns.admin import TurnNotUnfinishedError, TurnRunningError

    try:
        turn = await _turn_admin(host).retry(turn_id, covers=who.may_use)
    except TurnNotUnfinishedError as error:
        raise not_found(f"unfinished turn {turn_id}") from error
    except TurnRunningError as error:
        raise ServiceError(409, "turn_running", str(error)) from error
    return {"turn_id": turn.turn_id, "queued": True}
