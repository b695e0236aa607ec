"""Running a click command so that every failure is one clear message and a documented exit code.

The configuration's error types are imported only when something failed: ``berth --version`` does not load
:mod:`berth.config` (pydantic and the descriptor models) to say the version.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from berth.config.errors import DescriptorError

EXIT_OK = 0
EXIT_RUNTIME_ERROR = 1
EXIT_CONFIG_ERROR = 2


def report_descriptor_error(exc: DescriptorError) -> None:
    """Print every problem of ``exc`` to stderr, then a one-line summary."""
    for problem in exc.problems:
        click.echo(str(problem), err=True)
    files = {problem.file for problem in exc.problems}
    noun = "problem" if len(exc.problems) == 1 else "problems"
    click.echo(f"{len(exc.problems)} {noun} in {len(files)} file(s)", err=True)


def run_guarded(command: click.Command, argv: list[str] | None) -> int:
    """Run ``command``; map descriptor/config errors to exit 2 and anything unexpected to exit 1.

    No traceback is printed for errors a user can fix; an unexpected error prints its type and
    (redacted) message only.
    """
    try:
        # without standalone mode, click answers a raised Exit(code) by returning its code
        returned = command.main(args=argv, standalone_mode=False)
        if isinstance(returned, int) and returned != EXIT_OK:
            sys.stdout.flush()
            return returned
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_CONFIG_ERROR if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_RUNTIME_ERROR
    except Exception as exc:
        return report_error(exc)
    sys.stdout.flush()
    return EXIT_OK


def report_error(exc: Exception) -> int:
    """Print an error a command raised and return its exit code: 2 for a descriptor or configuration error
    (every problem, no traceback), 1 for anything else (its type and redacted message only)."""
    from berth.config.errors import ConfigError, DescriptorError
    from berth.config.redaction import redact

    if isinstance(exc, DescriptorError):
        report_descriptor_error(exc)
        return EXIT_CONFIG_ERROR
    if isinstance(exc, ConfigError):
        click.echo(f"error [{exc.code}]: {redact(str(exc))}", err=True)
        return EXIT_CONFIG_ERROR
    click.echo(f"error: {type(exc).__name__}: {redact(str(exc))}", err=True)
    return EXIT_RUNTIME_ERROR
