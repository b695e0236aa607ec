"""``berth plugins list``: every platform plugin with its distribution, state and error."""

from __future__ import annotations

import json

import click

from berth.cli.table import print_table
from berth.host.plugins import PlatformPlugins, PluginRecord


@click.group("plugins")
def plugins_group() -> None:
    """Inspect the platform plugins (entry-point group berth.plugins)."""


def _row(record: PluginRecord) -> list[str]:
    return [
        record.name,
        record.package,
        record.version or "-",
        record.state,
        ",".join(record.hooks) or "-",
        str(record.error) if record.error else "",
    ]


def _as_json(record: PluginRecord) -> dict[str, object]:
    error = record.error
    return {
        "name": record.name,
        "package": record.package,
        "version": record.version,
        "state": record.state,
        "hooks": list(record.hooks),
        "error": None
        if error is None
        else {"code": error.code, "message": error.message, "file": error.file, "line": error.line},
    }


@plugins_group.command("list")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_plugins(output_format: str) -> None:
    """Show every platform plugin: loaded, failed (with the error's file:line) or disabled by BERTH_*PLUGINS.

    Every hook is called as a host would call it, so a plugin whose hook fails is listed as failed (a host leaves
    it out); two plugins registering one name are reported on stderr (a host refuses to start with them).
    """
    plugins = PlatformPlugins.discover()
    for conflict in plugins.call_every_hook():
        click.echo(f"error [{conflict.code}]: {conflict}", err=True)
    records = plugins.records
    if output_format == "json":
        click.echo(json.dumps([_as_json(record) for record in records], indent=2))
        return
    print_table([["NAME", "PACKAGE", "VERSION", "STATE", "HOOKS", "ERROR"], *map(_row, records)])
