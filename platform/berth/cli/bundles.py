"""``berth bundles list|reload|new``, and the ``--descriptors`` option of every command that loads descriptors.

Every command of the CLI imports this module for :data:`DESCRIPTORS_OPTION`, so each subcommand imports the host
(or the scaffolder) itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from berth.cli.table import print_table

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from berth.host.registry import BundleStatus

DESCRIPTORS_OPTION = click.option(
    "--descriptors",
    "descriptors",
    type=click.Path(file_okay=False, path_type=Path),
    help="descriptors folder (default: $BERTH_DESCRIPTORS, then ./descriptors, then embedded defaults)",
)


STATE_LABELS = {"not_enabled": "installed (not enabled)"}
"""How ``bundles list`` shows a state whose name alone would not say enough."""


@click.group("bundles")
def bundles_group() -> None:
    """List, reload and create bundles."""


def _status_rows(statuses: list[BundleStatus]) -> list[list[str]]:
    rows = [["ID", "VERSION", "SOURCE", "GEN", "STATE", "TENANTS", "ERROR"]]
    for status in statuses:
        rows.append(
            [
                status.id,
                status.version or "-",
                status.source,
                str(status.generation) if status.generation is not None else "-",
                STATE_LABELS.get(status.state, status.state),
                ",".join(status.tenants) or "-",
                str(status.error) if status.error else "",
            ]
        )
    return rows


@bundles_group.command("list")
@DESCRIPTORS_OPTION
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_bundles(descriptors: Path | None, output_format: str) -> None:
    """Load every bundle in this process and show id, version, source, generation, state, tenants, error."""

    from berth.host.broadcast import read_worker_reports
    from berth.host.runtime import HostRuntime, redis_client_for

    async def run() -> tuple[list[BundleStatus], list[dict[str, object]]]:
        runtime = HostRuntime.for_descriptors(descriptors, watch=False)
        await runtime.start()
        assert runtime.registry is not None
        statuses = runtime.registry.statuses()
        workers: list[dict[str, object]] = []
        client = redis_client_for(runtime.registry.config)
        await runtime.stop()
        if client is not None:
            workers = [
                asdict(report) for report in await read_worker_reports(client) if report.worker_id != runtime.worker_id
            ]
            await client.aclose()
        return statuses, workers

    statuses, workers = asyncio.run(run())
    if output_format == "json":
        click.echo(json.dumps({"bundles": [asdict(s) for s in statuses], "workers": workers}, indent=2, default=str))
        return
    print_table(_status_rows(statuses))
    not_enabled = [status.id for status in statuses if status.state == "not_enabled"]
    if not_enabled:
        click.echo(
            f"\ninstalled but not enabled: {', '.join(not_enabled)} "
            "(name them in bundles.yaml with source: {entry_point: <id>} and enable them for a tenant)"
        )
    for status in statuses:
        if status.error and status.error.traceback:
            click.echo(f"\n{status.id}: {status.error}\n{status.error.traceback.rstrip()}", err=True)
    for worker in workers:
        click.echo(f"\nworker {worker['worker_id']}:")
        for name, row in dict(worker["bundles"]).items():  # type: ignore[call-overload]
            click.echo(f"  {name}: generation {row['generation']} {row['state']} {row['error'] or ''}".rstrip())


@bundles_group.command("reload")
@click.argument("bundle_id")
@DESCRIPTORS_OPTION
@click.option(
    "--wait", "wait_s", type=float, default=10.0, show_default=True, help="seconds to wait for every process's answer"
)
def reload_bundle(bundle_id: str, descriptors: Path | None, wait_s: float) -> None:
    """Reload BUNDLE_ID: in distributed mode in every host process (over Redis), printing each process's answer
    (exit 1 when one did not answer, a reload failed, or no process received it); otherwise validate a fresh
    load here."""
    from berth.config import Configuration, find_descriptors_dir
    from berth.config.errors import ConfigError
    from berth.host.plugins import PlatformPlugins
    from berth.host.runtime import redis_client_for

    plugins = PlatformPlugins.discover()
    config = Configuration.load(find_descriptors_dir(descriptors), secret_providers=plugins.secret_providers())
    if bundle_id not in config.descriptors.bundles.bundles:
        raise ConfigError("bundle_unknown", f"bundle '{bundle_id}' is not in bundles.yaml")
    client = redis_client_for(config)
    if client is None:
        code = asyncio.run(_validate_reload(bundle_id, descriptors))
    else:
        code = asyncio.run(_broadcast_reload(client, bundle_id, wait_s))
    if code:
        raise click.exceptions.Exit(code)


async def _validate_reload(bundle_id: str, descriptors: Path | None) -> int:
    """Embedded mode: load a fresh generation in this process and say whether it loads."""
    from berth.host.runtime import HostRuntime

    runtime = HostRuntime.for_descriptors(descriptors, watch=False)
    await runtime.start()
    assert runtime.registry is not None
    outcome = await runtime.registry.reload(bundle_id, reason="cli")
    await runtime.stop()
    if not outcome.ok:
        click.echo(f"{bundle_id}: reload failed: {outcome.error}", err=True)
        return 1
    click.echo(f"{bundle_id}: generation {outcome.generation} loads cleanly ({outcome.duration_s * 1000:.0f} ms)")
    click.echo("embedded mode: a running `berth run` reloads through POST /v1/admin/bundles/{id}/reload")
    return 0


async def _broadcast_reload(client: aioredis.Redis, bundle_id: str, wait_s: float) -> int:
    """Distributed mode: ask every host process to reload, print what each answered and who did not."""
    from berth.host.broadcast import read_worker_reports
    from berth.host.reload_acks import broadcast_reload
    from berth.host.runtime import default_worker_id

    try:
        reports = await read_worker_reports(client)
        result = await broadcast_reload(
            client,
            bundle_id,
            origin=f"cli-{default_worker_id()}",
            expected=[r.worker_id for r in reports],
            timeout_s=wait_s,
        )
    finally:
        await client.aclose()
    for ack in result.acks:
        click.echo(ack.line())
    reported_at = {report.worker_id: report.reported_at for report in reports}
    for worker_id in result.silent:
        age = f"its last report is {max(time.time() - reported_at[worker_id], 0):.0f} s old"
        if result.receivers == 0:
            click.echo(f"{worker_id}: did not receive the request (not subscribed; {age})", err=True)
        else:
            click.echo(f"{worker_id}: no answer within {wait_s:g} s ({age})", err=True)
    if result.unnamed:
        click.echo(
            f"{result.unnamed} more process(es) received the request but did not answer within {wait_s:g} s", err=True
        )
    if result.reached_none:
        click.echo(
            f"{bundle_id}: the reload reached no process (no `berth run` or `berth worker` answered on this Redis)",
            err=True,
        )
    return 0 if result.ok else 1


@bundles_group.command("new")
@click.argument("name")
@click.option("--dir", "parent", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
def new_bundle(name: str, parent: Path) -> None:
    """Create a bundle project NAME (pip-installable, with an entry point and a test)."""
    from berth.host.scaffold import scaffold_bundle

    target = scaffold_bundle(name, parent)
    click.echo(f"created {target}")
    click.echo(f"next: pip install -e {target} && add '{name}: {{source: {{entry_point: {name}}}}}' to bundles.yaml")
