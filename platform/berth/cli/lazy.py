"""A click group whose subcommands are imported when they run, not when the group is built.

``berth --version`` and ``berth --help`` then cost a bare interpreter plus click: each command's module (and the
host, the API or the MCP SDK it needs) is imported only by the command that runs. ``--help`` lists the commands
with the short help kept next to their import path, so listing them imports none.

A command's import runs with the cyclic garbage collector paused: importing creates long-lived objects (modules,
classes, pydantic models) and next to no garbage, and the collector's passes over the growing heap were a quarter
of ``berth run``'s import time.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module

import click

__all__ = ["LazyCommand", "LazyGroup"]


@dataclass(frozen=True)
class LazyCommand:
    """Where a subcommand lives (``"module:attribute"``) and the first paragraph of its help, for listings.

    ``preload`` names modules the command imports when it runs (inside its function, to keep them from the other
    commands that share its module): they are imported with it, the collector paused for them too.
    """

    target: str
    help: str
    preload: tuple[str, ...] = ()

    def short_help(self, limit: int) -> str:
        """The help line ``--help`` lists, shortened to ``limit`` characters as click shortens a command's."""
        return click.Command(None, help=self.help).get_short_help_str(limit)

    def load(self) -> click.Command:
        """Import the command object (the garbage collector paused meanwhile, see the module's text)."""
        module_name, _, attribute = self.target.partition(":")
        collecting = gc.isenabled()
        gc.disable()
        try:
            command = getattr(import_module(module_name), attribute)
            for module in self.preload:
                import_module(module)
        finally:
            if collecting:
                gc.enable()
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command: {command!r}")
        return command


class LazyGroup(click.Group):
    """A :class:`click.Group` that also knows subcommands by import path and imports each on first use."""

    def __init__(self, *args: object, lazy_commands: Mapping[str, LazyCommand] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands: dict[str, LazyCommand] = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand's name, imported or not, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand ``cmd_name``, imported now if it was not yet (then kept as a plain subcommand)."""
        return self.load_command(cmd_name)

    def load_command(self, name: str) -> click.Command | None:
        """The subcommand ``name`` (None for an unknown name), importing it on first use."""
        command = self.commands.get(name)
        if command is not None or name not in self.lazy_commands:
            return command
        command = self.lazy_commands[name].load()
        self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The ``Commands:`` section of ``--help``, as click writes it, without importing the lazy commands."""
        shown = [
            (name, self.commands.get(name))
            for name in self.list_commands(ctx)
            if name not in self.commands or not self.commands[name].hidden
        ]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [
            (name, self.lazy_commands[name].short_help(limit))
            if command is None
            else (name, command.get_short_help_str(limit))
            for name, command in shown
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
