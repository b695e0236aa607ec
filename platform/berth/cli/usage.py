"""``berth usage``: the model usage of a tenant/project in a period, as a table (or JSON).

It reads the embedded store under the descriptors' storage root (``platform.storage.root``, or ``--var``), or
asks a running host's usage route with an admin key (``--url``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx

from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.cli.descriptors import load_configuration
from berth.cli.table import print_table
from berth.config.environment import host_environment
from berth.config.models.assembly import EmbeddedStorage
from berth.default_plugins.storage.sqlite_meta import DATABASE_FILE, SqliteMetaStore
from berth.host.connections import distributed_backend
from berth.host.plugins import PlatformPlugins
from berth.runtime.blocks import format_utc
from berth.storage.meta import MetaStore
from berth.storage.usage import UsageGrouping
from berth.usage import UsageQueryError, usage_report
from berth.usage.report import current_month
from berth.usage.report_body import UsageReportOut, UsageRow, report_out


class IsoTime(click.ParamType[datetime, Any]):
    """An ISO 8601 date or time (``2025-07-01``, ``2025-07-01T12:00:00Z``); without an offset, UTC."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        """Parse ``value`` (a datetime passes through)."""
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 date or time (e.g. 2025-07-01 or 2025-07-01T00:00:00Z)")
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@click.command("usage")
@DESCRIPTORS_OPTION
@click.option("--tenant", default="default", show_default=True)
@click.option("--project", default="default", show_default=True)
@click.option("--from", "start", type=IsoTime(), help="period start, inclusive (default: this UTC month's start)")
@click.option("--to", "end", type=IsoTime(), help="period end, exclusive (default: this UTC month's end)")
@click.option(
    "--group-by",
    type=click.Choice(["user", "bundle", "day", "model"]),
    default="user",
    show_default=True,
    help="one row per user (API key), bundle, UTC day or model",
)
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--var", "var_root", type=click.Path(file_okay=False, path_type=Path), help="storage root override")
@click.option("--url", help="ask this running host's usage route instead of reading the store")
@click.option("--api-key", help="with --url: an admin API key (default: $BERTH_API_KEY)")
def usage_command(
    descriptors: Path | None,
    tenant: str,
    project: str,
    start: datetime | None,
    end: datetime | None,
    group_by: UsageGrouping,
    output_format: str,
    var_root: Path | None,
    url: str | None,
    api_key: str | None,
) -> None:
    """Print the model usage of a tenant/project: calls, turns, tokens and cost per user, bundle, day or model."""
    default_start, default_end = current_month(datetime.now(UTC))
    start, end = start or default_start, end or default_end
    if url is not None:
        report = _remote_report(url, api_key or host_environment().api_key, tenant, project, start, end, group_by)
    else:
        report = asyncio.run(_local_report(descriptors, var_root, tenant, project, start, end, group_by))
    if output_format == "json":
        click.echo(json.dumps(report.model_dump(mode="json", by_alias=True), indent=2))
        return
    click.echo(
        f"usage of {report.tenant}/{report.project} from {format_utc(report.from_)} to {format_utc(report.to)}, "
        f"by {report.group_by}"
    )
    rows = [[report.group_by.upper(), *COLUMNS]]
    rows += [[group.key, *_cells(group)] for group in report.groups]
    rows.append(["TOTAL", *_cells(report.total)])
    print_table(rows)
    if report.total.unpriced_calls:
        click.echo(
            f"{report.total.unpriced_calls} call(s) used a model without a price in platform.models.prices: "
            "their cost is unknown and not in COST_USD"
        )


COLUMNS = ["CALLS", "TURNS", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE", "TOTAL", "COST_USD", "UNPRICED"]


def _cells(row: UsageRow) -> list[str]:
    cost = "-" if row.cost_usd is None else f"{row.cost_usd:.6f}"
    counts = (
        row.calls,
        row.turns,
        row.input_tokens,
        row.output_tokens,
        row.cache_read_input_tokens,
        row.cache_creation_input_tokens,
        row.total_tokens,
    )
    return [*(f"{count:,}" for count in counts), cost, str(row.unpriced_calls)]


async def _local_report(
    descriptors: Path | None,
    var_root: Path | None,
    tenant: str,
    project: str,
    start: datetime,
    end: datetime,
    group_by: UsageGrouping,
) -> UsageReportOut:
    """The report from the embedded store the descriptors (or ``--var``) name."""
    config = load_configuration(descriptors)
    storage = config.settings_for(tenant, project).storage  # an undeclared scope is an error (exit 2)
    if var_root is None and not isinstance(storage, EmbeddedStorage):  # distributed: the PostgreSQL meta store
        backend = distributed_backend(config, PlatformPlugins.discover())
        await backend.open()
        try:
            return await _report(backend.meta, tenant, project, start, end, group_by)
        finally:
            await backend.aclose()
    if var_root is not None:
        root = var_root
    else:
        assert isinstance(storage, EmbeddedStorage)
        root = (config.descriptors.base_dir / storage.root).resolve()
    if not (root / DATABASE_FILE).is_file():
        raise click.ClickException(f"no usage is stored under {root} (no {DATABASE_FILE}); give --var or --descriptors")
    store = SqliteMetaStore(root)
    await store.open()
    try:
        return await _report(store, tenant, project, start, end, group_by)
    finally:
        await store.aclose()


async def _report(
    store: MetaStore, tenant: str, project: str, start: datetime, end: datetime, group_by: UsageGrouping
) -> UsageReportOut:
    try:
        report = await usage_report(store, tenant, project, start, end, group_by)
    except UsageQueryError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{exc.field}") from None
    return report_out(report)


def _remote_report(
    url: str,
    api_key: str | None,
    tenant: str,
    project: str,
    start: datetime,
    end: datetime,
    group_by: UsageGrouping,
) -> UsageReportOut:
    """The report from a running host's ``GET /v1/{tenant}/{project}/usage`` (an admin key)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    params = {"from": start.isoformat(), "to": end.isoformat(), "group_by": group_by}
    try:
        response = httpx.get(f"{url.rstrip('/')}/v1/{tenant}/{project}/usage", params=params, headers=headers)
    except httpx.TransportError:
        raise click.ClickException(f"no Berth host answers at {url}") from None
    if response.status_code != 200:
        try:
            error = response.json()["error"]
            reason = f"{error['message']} ({error['code']})"
        except (ValueError, KeyError, TypeError):
            reason = f"HTTP {response.status_code}"
        raise click.ClickException(f"the host refused the usage report: {reason}")
    return UsageReportOut.model_validate(response.json())
