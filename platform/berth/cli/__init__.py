"""The ``berth`` command line (SPEC §10). Exit codes: 0 ok, 1 runtime error, 2 usage or config error.

Each subcommand is imported only when it runs (:class:`~berth.cli.lazy.LazyGroup`): ``berth --version`` and
``berth --help`` import click and nothing of the host, and ``berth descriptors check`` never imports the API.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Sequence

import click

from berth.cli.errors import run_guarded
from berth.cli.lazy import LazyCommand, LazyGroup

COMMANDS: dict[str, LazyCommand] = {
    "descriptors": LazyCommand(
        "berth.cli.descriptors:descriptors_group", "Validate, show and export the operator's YAML descriptors."
    ),
    "bundles": LazyCommand("berth.cli.bundles:bundles_group", "List, reload and create bundles."),
    "plugins": LazyCommand(
        "berth.cli.plugins:plugins_group", "Inspect the platform plugins (entry-point group berth.plugins)."
    ),
    "exec": LazyCommand(
        "berth.cli.execution:exec_group",
        "Run programs in the isolated executor; check what isolation this machine gives.",
    ),
    "worker": LazyCommand(
        "berth.cli.worker:worker",
        "Run a host process: load bundles and follow reloads; with distributed storage, run queued turns.",
    ),
    "run": LazyCommand(
        "berth.cli.serve:run",
        "Serve the HTTP API and the web UI (with distributed storage: the API only; `berth worker` runs turns).",
        preload=("berth.api.application", "uvicorn"),
    ),
    "chat": LazyCommand(
        "berth.cli.serve:chat",
        "Chat in the terminal with a bundle, streaming the answer: against a running host, or in-process.",
    ),
    "usage": LazyCommand(
        "berth.cli.usage:usage_command",
        "Print the model usage of a tenant/project: calls, turns, tokens and cost per user, bundle, day or model.",
    ),
    "knowledge": LazyCommand(
        "berth.cli.knowledge:knowledge_group", "Show, rebuild and search the bundles' knowledge spaces."
    ),
    "migrate": LazyCommand(
        "berth.cli.migrate:migrate_command",
        "Apply the storage's pending schema migrations, printing each step (nothing to do is not an error).",
    ),
    "turns": LazyCommand(
        "berth.cli.turns:turns_group", "List, end and retry the unfinished turns of a distributed deployment."
    ),
}
"""Every subcommand: where it lives and the first paragraph of its help (``--help`` lists it without importing
it; ``tests/unit/cli/test_lazy_cli.py`` checks that each matches its command)."""


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="berth-platform", prog_name="berth")
def cli() -> None:
    """Berth: a host for AI agent bundles."""


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI and exit with its code (the ``berth`` console script).

    The command to run is imported first (the group's options are flags, so it is the first argument that is not
    one), then what the import made is frozen (``gc.freeze``): modules, classes and models live as long as the
    process, and the collector's passes, a serving host's first full one included, then skip them.
    """
    args = list(argv) if argv is not None else sys.argv[1:]
    name = next((arg for arg in args if not arg.startswith("-")), None)
    with contextlib.suppress(Exception):  # a failing import: run_guarded imports it again and reports it
        if name is not None and cli.load_command(name) is not None:
            gc.freeze()
    sys.exit(run_guarded(cli, args))


__all__ = ["COMMANDS", "cli", "main"]
