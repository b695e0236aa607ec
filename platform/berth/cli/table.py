"""Plain-text tables for the CLI: columns padded to their widest cell, the last column left free."""

from __future__ import annotations

import click


def print_table(rows: list[list[str]]) -> None:
    """Echo ``rows`` (the first is the header) as aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]).rstrip())
