"""The ``berth`` command line (SPEC §10). Exit codes: 0 ok, 1 runtime error, 2 usage or config error."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from berth.cli.bundles import bundles_group
from berth.cli.descriptors import descriptors_group
from berth.cli.errors import run_guarded
from berth.cli.execution import exec_group
from berth.cli.knowledge import knowledge_group
from berth.cli.migrate import migrate_command
from berth.cli.plugins import plugins_group
from berth.cli.serve import chat, run
from berth.cli.turns import turns_group
from berth.cli.usage import usage_command
from berth.cli.worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="berth-platform", prog_name="berth")
def cli() -> None:
    """Berth: a host for AI agent bundles."""


cli.add_command(descriptors_group)
cli.add_command(bundles_group)
cli.add_command(plugins_group)
cli.add_command(exec_group)
cli.add_command(worker)
cli.add_command(run)
cli.add_command(chat)
cli.add_command(usage_command)
cli.add_command(knowledge_group)
cli.add_command(migrate_command)
cli.add_command(turns_group)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI and exit with its code (the ``berth`` console script)."""
    sys.exit(run_guarded(cli, list(argv) if argv is not None else None))


__all__ = ["cli", "main"]
