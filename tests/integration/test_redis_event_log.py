"""A turn's events in a Redis stream: written by one worker, streamed and resumed by any other."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from berth.runtime.events import TurnEvent
from berth.testing.redis import test_redis_url
from berth.turns.event_log import HEARTBEAT, TurnEventLog
from berth.turns.redis_events import RedisTurnEventLog

pytestmark = pytest.mark.redis


@pytest.fixture
async def clients() -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """Two connections, as two workers would have."""
    writer, reader = aioredis.from_url(test_redis_url()), aioredis.from_url(test_redis_url())
    yield writer, reader
    await writer.aclose()
    await reader.aclose()


def events(count: int) -> list[TurnEvent]:
    kinds = ["turn.started"] + ["channel.delta"] * (count - 2) + ["turn.completed"]
    return [TurnEvent(kind, {"n": n, "text": f"délta {n}"}) for n, kind in enumerate(kinds[:count])]  # type: ignore[arg-type]


async def collect(log: RedisTurnEventLog | TurnEventLog, after: int = 0) -> bytes:
    return b"".join([piece async for piece in log.frames(after, heartbeat_s=5)])


async def test_another_worker_streams_exactly_what_the_local_log_would(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    writer_client, reader_client = clients
    turn_id = f"turn_{secrets.token_hex(6)}"
    written, local = RedisTurnEventLog(writer_client, turn_id), TurnEventLog(turn_id)
    for event in events(12):
        await written.append(event)
        await local.append(event)
    await written.close()
    await local.close()

    elsewhere = RedisTurnEventLog(reader_client, turn_id)
    assert await collect(elsewhere) == await collect(local)
    for after in (1, 5, 11, 12):
        assert await collect(elsewhere, after) == await collect(local, after), f"resumed after {after}"
    assert (written.count, written.closed) == (12, True)
    assert 0 < await reader_client.ttl(f"berth:events:{turn_id}") <= 3600


async def test_a_reader_waiting_on_another_worker_gets_events_as_they_come_and_ends_with_the_turn(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    writer_client, reader_client = clients
    turn_id = f"turn_{secrets.token_hex(6)}"
    written = RedisTurnEventLog(writer_client, turn_id)
    batch = events(6)
    await written.append(batch[0])
    await written.append(batch[1])

    reader = RedisTurnEventLog(reader_client, turn_id).frames(after=1, heartbeat_s=5)
    first = await anext(reader)
    assert first.startswith(f"id: {turn_id}:2\n".encode())
    pending = asyncio.ensure_future(anext(reader))
    await written.append(batch[2])
    assert (await pending).startswith(f"id: {turn_id}:3\n".encode())
    for event in batch[3:]:
        await written.append(event)
    await written.close()
    rest = b"".join([piece async for piece in reader])
    assert [line for line in rest.split(b"\n") if line.startswith(b"id: ")] == [
        f"id: {turn_id}:{n}".encode() for n in (4, 5, 6)
    ]


async def test_an_idle_stream_sends_heartbeats_and_a_closed_empty_one_ends(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    writer_client, reader_client = clients
    turn_id = f"turn_{secrets.token_hex(6)}"
    idle = RedisTurnEventLog(reader_client, turn_id).frames(heartbeat_s=0.05)
    assert await anext(idle) == HEARTBEAT
    await idle.aclose()

    written = RedisTurnEventLog(writer_client, turn_id)
    await written.close()
    assert await collect(RedisTurnEventLog(reader_client, turn_id)) == b""
    with pytest.raises(RuntimeError, match="closed"):
        await written.append(events(2)[0])
