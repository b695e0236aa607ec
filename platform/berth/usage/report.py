"""The usage report of a tenant/project for a period: what the usage route answers and ``berth usage`` prints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from berth.storage.meta import MetaStore
from berth.storage.usage import UsageGrouping, UsageTotals
from berth.usage.periods import window_of

__all__ = ["UsageQueryError", "UsageReport", "current_month", "usage_report"]


class UsageQueryError(ValueError):
    """A report asked for an empty or reversed period; ``field`` names the bound at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class UsageReport:
    """The usage of ``tenant``/``project`` in ``[start, end)``: one row per group, and the total."""

    tenant: str
    project: str
    start: datetime
    end: datetime
    group_by: UsageGrouping
    groups: list[UsageTotals]
    total: UsageTotals


def current_month(now: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar month ``now`` falls in: the report's period when none is given."""
    window = window_of("month", now)
    return window.start, window.end


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


async def usage_report(
    store: MetaStore, tenant: str, project: str, start: datetime, end: datetime, group_by: UsageGrouping
) -> UsageReport:
    """Read the report from ``store`` (a naive bound is taken as UTC).

    The total is read on its own, not summed from the groups: a turn whose calls fall on two days is one turn.

    :raises UsageQueryError: when ``start`` is not before ``end``.
    """
    start, end = _utc(start), _utc(end)
    if start >= end:
        raise UsageQueryError("to", f"'to' ({end.isoformat()}) must be after 'from' ({start.isoformat()})")
    groups = await store.usage_totals(tenant, project, start, end, group_by)
    (total,) = await store.usage_totals(tenant, project, start, end, None)
    return UsageReport(tenant, project, start, end, group_by, groups, total)
