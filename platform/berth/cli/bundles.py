"""``berth bundles list|reload|new`` and ``berth worker``."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from pathlib import Path

import click

from berth.cli.table import print_table
from berth.config.errors import ConfigError
from berth.host.broadcast import read_worker_reports
from berth.host.registry import BundleStatus
from berth.host.runtime import HostRuntime, redis_client_for
from berth.host.scaffold import scaffold_bundle

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
@click.option("--wait", "wait_s", type=float, default=10.0, show_default=True, help="seconds to wait for workers")
def reload_bundle(bundle_id: str, descriptors: Path | None, wait_s: float) -> None:
    """Reload BUNDLE_ID: in distributed mode on every worker (over Redis); otherwise validate a fresh load here."""

    async def run() -> int:
        runtime = HostRuntime.for_descriptors(descriptors, watch=False)
        await runtime.start()
        assert runtime.registry is not None
        registry = runtime.registry
        if bundle_id not in registry.config.descriptors.bundles.bundles:
            await runtime.stop()
            raise ConfigError("bundle_unknown", f"bundle '{bundle_id}' is not in bundles.yaml")
        client = redis_client_for(registry.config)
        if client is None:
            outcome = await registry.reload(bundle_id, reason="cli")
            await runtime.stop()
            if not outcome.ok:
                click.echo(f"{bundle_id}: reload failed: {outcome.error}", err=True)
                return 1
            click.echo(
                f"{bundle_id}: generation {outcome.generation} loads cleanly ({outcome.duration_s * 1000:.0f} ms)"
            )
            click.echo("embedded mode: a running `berth run` reloads through POST /v1/admin/bundles/{id}/reload")
            return 0
        before = {r.worker_id: r.bundles.get(bundle_id) for r in await read_worker_reports(client)}
        await runtime.request_reload(bundle_id)
        deadline = time.monotonic() + wait_s
        pending = {w for w in before if w != runtime.worker_id}
        while pending and time.monotonic() < deadline:
            for report in await read_worker_reports(client):
                old, new = before.get(report.worker_id), report.bundles.get(bundle_id)
                if report.worker_id in pending and new is not None and (old is None or new != old):
                    click.echo(
                        f"{report.worker_id}: generation {new.generation} {new.state} {new.error or ''}".rstrip()
                    )
                    pending.discard(report.worker_id)
            await asyncio.sleep(0.1)
        await runtime.stop()
        await client.aclose()
        for worker_id in sorted(pending):
            click.echo(f"{worker_id}: no report within {wait_s:g} s", err=True)
        return 1 if pending else 0

    code = asyncio.run(run())
    if code:
        raise click.exceptions.Exit(code)


@bundles_group.command("new")
@click.argument("name")
@click.option("--dir", "parent", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
def new_bundle(name: str, parent: Path) -> None:
    """Create a bundle project NAME (pip-installable, with an entry point and a test)."""
    target = scaffold_bundle(name, parent)
    click.echo(f"created {target}")
    click.echo(f"next: pip install -e {target} && add '{name}: {{source: {{entry_point: {name}}}}}' to bundles.yaml")
