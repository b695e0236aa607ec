"""The JSON body of a usage report: what ``GET /v1/{tenant}/{project}/usage`` answers and
``berth usage --format json`` prints (the CLI reads the API's answer back into the same model)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from berth.storage.usage import UsageTotals
from berth.usage.report import UsageReport

__all__ = ["UsageGroup", "UsageReportOut", "UsageRow", "report_out"]


class UsageRow(BaseModel):
    """Usage summed over a group of model calls (or over the whole period: the report's ``total``).

    ``cost_usd`` sums the calls whose model has a price in ``platform.models.prices``; it is null when none
    has, and ``unpriced_calls`` counts the calls left out of it (their cost is unknown, not zero).
    """

    calls: int
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    total_tokens: int = Field(description="input + output + cache read + cache write: what token budgets count")
    cost_usd: float | None
    unpriced_calls: int


class UsageGroup(UsageRow):
    """One group of a usage report: a user id, a bundle id, a UTC day (``YYYY-MM-DD``) or a model label."""

    key: str


class UsageReportOut(BaseModel):
    """``GET /v1/{tenant}/{project}/usage``: the period's usage per group, and the total."""

    model_config = ConfigDict(populate_by_name=True)

    tenant: str
    project: str
    from_: datetime = Field(alias="from", serialization_alias="from")
    to: datetime
    group_by: Literal["user", "bundle", "day", "model"]
    groups: list[UsageGroup]
    total: UsageRow


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
