"""``GET /v1/{tenant}/{project}/usage``: what a tenant/project spent on models, for operators (admin keys)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from berth.api.auth import Caller, require_admin
from berth.api.deps import scoped_caller, services
from berth.api.errors import ApiError, error_responses
from berth.api.schemas import UsageGroup, UsageReportOut, UsageRow
from berth.api.services import HostServices
from berth.storage.usage import UsageTotals
from berth.usage import UsageQueryError, UsageReport, usage_report
from berth.usage.report import current_month

router = APIRouter(
    prefix="/v1/{tenant}/{project}", tags=["usage"], responses=error_responses(401, 403, 404, 413, 422, 429, 503)
)
Services = Annotated[HostServices, Depends(services)]
ScopedCaller = Annotated[Caller, Depends(scoped_caller)]


def _row(totals: UsageTotals) -> dict[str, object]:
    return {
        "calls": totals.calls,
        "turns": totals.turns,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cache_read_input_tokens": totals.cache_read_input_tokens,
        "cache_creation_input_tokens": totals.cache_creation_input_tokens,
        "total_tokens": totals.total_tokens,
        "cost_usd": totals.cost_usd,
        "unpriced_calls": totals.unpriced_calls,
    }


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
        raise ApiError(422, "invalid_request", f"query.{exc.field}: {exc}", {"problems": [problem]}) from None
    return report_out(report)


def report_out(report: UsageReport) -> UsageReportOut:
    """The response body of a usage report (``berth usage --format json`` prints the same)."""
    return UsageReportOut(
        tenant=report.tenant,
        project=report.project,
        from_=report.start,
        to=report.end,
        group_by=report.group_by,
        groups=[UsageGroup.model_validate({"key": group.key or "", **_row(group)}) for group in report.groups],
        total=UsageRow.model_validate(_row(report.total)),
    )
