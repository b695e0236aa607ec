"""The ``berth`` group imports a subcommand only when it runs; ``--help`` lists them all without importing any."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from berth.cli import COMMANDS, cli
from berth.cli.errors import run_guarded
from berth.cli.lazy import LazyCommand, LazyGroup

HEAVY = ("berth.config", "berth.host", "berth.api", "pydantic", "fastapi", "mcp", "numpy")
"""What neither ``berth --help`` nor ``berth --version`` may import."""


def imported_after(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``berth <argv>`` in a fresh interpreter; its exit code and which of :data:`HEAVY` it imported."""
    probe = (
        "import json, sys\n"
        "from berth.cli import cli\n"
        "from berth.cli.errors import run_guarded\n"
        f"code = run_guarded(cli, {argv!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith({HEAVY!r}))\n"
        "print(json.dumps([code, heavy]), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    code, heavy = json.loads(done.stderr.strip().splitlines()[-1])
    return code, heavy


@pytest.mark.parametrize(("argv", "exit_code"), [(["--help"], 0), (["--version"], 0), ([], 2)])
def test_help_and_version_import_no_command(argv: list[str], exit_code: int) -> None:
    code, heavy = imported_after(argv)
    assert code == exit_code  # with no command, click prints the help and exits 2 (as it always did)
    assert heavy == []


def test_help_lists_every_command_with_the_help_of_its_command_object() -> None:
    for limit in (20, 45, 80, 200):
        for name, lazy in COMMANDS.items():
            command = lazy.load()
            assert command.name == name
            assert lazy.short_help(limit) == command.get_short_help_str(limit), name


def test_help_is_the_same_before_and_after_the_commands_are_imported() -> None:
    fresh = LazyGroup(name="berth", lazy_commands=COMMANDS)
    before = fresh.get_help(click.Context(fresh, info_name="berth"))
    for name in COMMANDS:
        assert fresh.load_command(name) is not None
    after = fresh.get_help(click.Context(fresh, info_name="berth"))
    assert before == after
    assert all(f"  {name} " in before for name in COMMANDS)


def test_a_command_is_imported_once_and_then_kept() -> None:
    group = LazyGroup(name="berth", lazy_commands={"plugins": COMMANDS["plugins"]})
    first = group.load_command("plugins")
    assert first is not None
    assert group.commands["plugins"] is first
    assert group.load_command("plugins") is first
    assert group.load_command("nope") is None


def test_a_target_that_is_not_a_command_is_refused() -> None:
    with pytest.raises(TypeError, match="not a click command"):
        LazyCommand("berth.cli.lazy:LazyCommand", "not one").load()


def test_an_unknown_command_is_a_usage_error() -> None:
    assert run_guarded(cli, ["no-such-command"]) == 2


def test_descriptors_check_imports_neither_the_api_nor_the_plugins_backends(repo_root: Path) -> None:
    probe = (
        "import sys\n"
        "from berth.cli import cli\n"
        "from berth.cli.errors import run_guarded\n"
        f"code = run_guarded(cli, ['descriptors', 'check', {str(repo_root)!r} + '/descriptors'])\n"
        "backends = ('fastapi', 'mcp', 'mcp_types', 'numpy', 'boto3', 'docker', 'asyncpg', 'httpx', 'trafilatura',\n"
        "            'anthropic', 'redis', 'berth.api', 'berth.runtime.render')\n"
        "print('LOADED', code, sorted(m for m in backends if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert "LOADED 0 []" in done.stderr, done.stderr
