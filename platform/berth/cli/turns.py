"""``berth turns list|end|retry``: an operator's hold on the unfinished turns of a distributed deployment.

Reads and writes the deployment's PostgreSQL and Redis (from ``platform.storage`` of the descriptors) directly, as
``berth migrate`` does; ``/v1/admin/turns`` offers the same over HTTP. In embedded mode a turn belongs to the one
process that runs it, so there is nothing to do here (exit 2).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.cli.table import print_table

__all__ = ["turns_group"]

_T = TypeVar("_T")


@click.group("turns")
def turns_group() -> None:
    """List, end and retry the unfinished turns of a distributed deployment."""


@asynccontextmanager
async def _turn_admin(descriptors: Path | None) -> AsyncIterator[Any]:
    """A :class:`~berth.turns.admin.TurnAdmin` over the descriptors' distributed storage."""
    from berth.cli.descriptors import load_configuration
    from berth.config.errors import ConfigError
    from berth.config.models.assembly import DistributedStorage
    from berth.host.connections import distributed_backend
    from berth.host.plugins import PlatformPlugins
    from berth.storage.redis_client import connect_redis
    from berth.turns.admin import TurnAdmin
    from berth.turns.queue import TurnQueue

    config = load_configuration(descriptors)
    if not isinstance(config.settings_for().storage, DistributedStorage):
        raise ConfigError(
            "not_distributed",
            "platform.storage.kind is embedded: its turns are run and ended by the one process that accepts them",
        )
    backend = distributed_backend(config, PlatformPlugins.discover())
    await backend.open()
    client = connect_redis(backend.connections.redis_url)
    try:
        yield TurnAdmin(backend.conversations, TurnQueue(client), client)
    finally:
        await client.aclose()
        await backend.aclose()


def _run(descriptors: Path | None, work: Callable[[Any], Awaitable[_T]]) -> _T:
    async def main() -> _T:
        async with _turn_admin(descriptors) as admin:
            return await work(admin)

    return asyncio.run(main())


@turns_group.command("list")
@DESCRIPTORS_OPTION
@click.option("--stuck", is_flag=True, help="only turns no live worker owns that waited longer than --stuck-after")
@click.option("--stuck-after", "stuck_after_s", type=click.FloatRange(min=0), default=60.0, show_default=True)
@click.option("--tenant", help="only this tenant's turns")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_turns(
    descriptors: Path | None, stuck: bool, stuck_after_s: float, tenant: str | None, output_format: str
) -> None:
    """The unfinished turns, oldest first: state, age, attempts, whether a live worker owns it, its last error."""
    from berth.turns.admin import turn_row

    turns = _run(
        descriptors, lambda admin: admin.unfinished(stuck_after_s=stuck_after_s if stuck else None, tenant=tenant)
    )
    now = datetime.now(UTC)
    rows = [turn_row(turn, now) for turn in turns]
    if output_format == "json":
        click.echo(json.dumps({"turns": rows}, indent=2))
        return
    if not rows:
        click.echo("no stuck turns" if stuck else "no unfinished turns")
        return
    table = [["TURN", "TENANT/PROJECT", "CONVERSATION", "STATE", "AGE_S", "ATTEMPTS", "OWNER", "LAST_ERROR"]]
    for row in rows:
        table.append(
            [
                row["turn_id"],
                f"{row['tenant']}/{row['project']}",
                row["conversation_id"],
                row["state"],
                "-" if row["age_s"] is None else f"{row['age_s']:.0f}",
                str(row["attempts"]),
                "live" if row["owner_alive"] else "none",
                row["last_error"] or "",
            ]
        )
    print_table(table)


@turns_group.command("end")
@DESCRIPTORS_OPTION
@click.argument("turn_id")
@click.option("--reason", default="ended by an operator", show_default=True, help="told to the turn's clients")
def end_turn(descriptors: Path | None, turn_id: str, reason: str) -> None:
    """Store an unfinished turn failed (code ended_by_operator), whoever runs it; its stream ends so."""
    from berth.turns.admin import TurnNotUnfinishedError

    try:
        turn = _run(descriptors, lambda admin: admin.end(turn_id, reason=reason))
    except TurnNotUnfinishedError as error:
        click.echo(f"error: {error}", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"ended turn {turn.turn_id} of {turn.scope.tenant}/{turn.scope.project} ({reason})")


@turns_group.command("retry")
@DESCRIPTORS_OPTION
@click.argument("turn_id")
def retry_turn(descriptors: Path | None, turn_id: str) -> None:
    """Queue an unfinished turn that no live worker runs again, its attempts reset."""
    from berth.turns.admin import TurnNotUnfinishedError, TurnRunningError

    try:
        turn = _run(descriptors, lambda admin: admin.retry(turn_id))
    except (TurnNotUnfinishedError, TurnRunningError) as error:
        click.echo(f"error: {error}", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"queued turn {turn.turn_id} of {turn.scope.tenant}/{turn.scope.project} again")
