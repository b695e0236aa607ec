"""``berth migrate``: bring the storage's database schema up to date (PostgreSQL in distributed mode).

The storage kind comes from ``platform.storage`` in ``assembly.yaml``; its DSN from ``platform.storage.postgres.dsn``
(a ``secret:NAME`` reference is resolved) unless ``--dsn`` gives one. The migrations themselves belong to the storage
plugin, found through the ``berth_storage_migrations`` hook, so the core never imports a database driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Final, cast

import click

from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.config import Configuration, find_descriptors_dir
from berth.config.errors import ConfigError
from berth.config.models.assembly import DistributedStorage
from berth.config.redaction import redact, register_secret_value
from berth.host.plugins import PlatformPlugins
from berth.storage.backend import StorageMigrator

__all__ = ["migrate_command"]

DSN_KIND: Final = "distributed"
"""The storage kind ``--dsn`` names a database of (the only kind with a database server)."""


@click.command("migrate")
@DESCRIPTORS_OPTION
@click.option("--dsn", help="the PostgreSQL DSN to migrate (default: platform.storage.postgres.dsn)")
def migrate_command(descriptors: Path | None, dsn: str | None) -> None:
    """Apply the storage's pending schema migrations, printing each step (nothing to do is not an error)."""
    plugins = PlatformPlugins.discover()
    if dsn is not None:
        kind = DSN_KIND
    else:
        config = Configuration.load(find_descriptors_dir(descriptors), secret_providers=plugins.secret_providers())
        storage = config.settings_for().storage
        kind = storage.kind
        if not isinstance(storage, DistributedStorage):
            click.echo(f"storage is {kind}: nothing to migrate")
            return
        dsn = config.secret_resolver.resolve_setting(storage.postgres.dsn, "platform.storage.postgres.dsn").reveal()
    register_secret_value(dsn)  # an error echoing the DSN is masked
    migrator = plugins.storage_migrators().get(kind)
    if migrator is None:
        raise ConfigError(
            "storage_plugin_missing",
            f"no installed plugin migrates {kind} storage; install berth-postgres (pip install berth-postgres)",
        )
    try:
        applied = asyncio.run(_migrate(cast(StorageMigrator, migrator), dsn))
    except ConnectionError as exc:
        click.echo(f"error: {redact(str(exc))}", err=True)
        raise click.exceptions.Exit(1) from None
    if applied:
        noun = "migration" if len(applied) == 1 else "migrations"
        click.echo(f"ok: applied {len(applied)} {noun}")
    else:
        click.echo("schema is up to date: nothing to migrate")


def _print_step(version: str, status: str) -> None:
    click.echo(f"  {version}: {status}")


async def _migrate(migrator: StorageMigrator, dsn: str) -> Sequence[str]:
    return await migrator(dsn, _print_step)
