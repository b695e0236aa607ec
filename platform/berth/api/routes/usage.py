"""``GET /v1/{tenant}/{project}/usage``: what a tenant/project spent on models, for operators (admin keys)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from berth.api.deps import scoped_caller, services
from berth.api.errors import error_responses
from berth.turns.callers import Caller, require_admin
from berth.turns.errors import ServiceError
from berth.turns.services import HostServices
from berth.usage import UsageQueryError, usage_report
from berth.usage.report import current_month
from berth.usage.report_body import UsageReportOut, report_out

router = APIRouter(
    prefix="/v1/{tenant}/{project}", tags=["usage"], responses=error_responses(401, 403, 404, 413, 422, 429, 503)
)
Services = Annotated[HostServices, Depends(services)]
ScopedCaller = Annotated[Caller, Depends(scoped_caller)]


@router.get("/usage", response_model=UsageReportOut)
async def usage(
    tenant: str,
    project: str,
    who: ScopedCaller,
    host: Services,
    start: Annotated[datetime | None, Query(alias="from", description="default: the current UTC month's start")] = None,
    end: Annotated[datetime | None, Query(alias="to", description="default: the current UTC month's end")] = None,
    group_by: Literal["user", "bundle", "day", "model"] = "user",
) -> UsageReportOut:
    """Model usage of the tenant/project in ``[from, to)`` per user, bundle, UTC day or model, and the total:
    calls, turns, the four token counts, their sum and the cost by the price table (admin keys only)."""
    require_admin(who)
    default_start, default_end = current_month(datetime.now(UTC))
    assert host.meta is not None
    try:
        report = await usage_report(host.meta, tenant, project, start or default_start, end or default_end, group_by)
    except UsageQueryError as exc:
        problem = {"field": f"query.{exc.field}", "message": str(exc)}  # named as FastAPI names query problems
        raise ServiceError(422, "invalid_request", f"query.{exc.field}: {exc}", {"problems": [problem]}) from None
    return report_out(report)
