"""The turn queue on a real Redis: one consumer per entry, take-over of a dead consumer's entries, the queued
mark, and a group that is gone (Redis restarted) created again; the control channel's request and reply."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from berth.distributed.control import TurnControl, decode_attachments, encode_attachments
from berth.distributed.queue import TurnQueue
from berth.storage.scope import ConversationScope

pytestmark = pytest.mark.redis
REDIS_URL = "redis://127.0.0.1:6379/12"
SCOPE = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="c1")


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    connection = aioredis.from_url(REDIS_URL)
    yield connection
    await connection.aclose()


@pytest.fixture
async def queue(client: aioredis.Redis) -> TurnQueue:
    created = TurnQueue(client, prefix=f"test:{secrets.token_hex(4)}")
    await created.ensure_group()
    await created.ensure_group()  # a second process creating it again is fine
    return created


async def test_each_entry_goes_to_one_consumer_and_is_gone_once_done(queue: TurnQueue) -> None:
    ids = [await queue.enqueue(SCOPE, f"turn_{n}") for n in range(3)]
    first = await queue.read("w1", 2, block_ms=100)
    second = await queue.read("w2", 5, block_ms=100)
    assert [e.turn_id for e in first] == ["turn_0", "turn_1"]
    assert [e.turn_id for e in second] == ["turn_2"]
    assert [e.entry_id for e in first + second] == ids
    assert first[0].scope == SCOPE
    assert await queue.is_queued("turn_0")
    await queue.done(first[0])
    assert not await queue.is_queued("turn_0")
    assert await queue.depth() == 2
    assert await queue.read("w3", 5, block_ms=50) == []


async def test_a_dead_consumers_entries_are_taken_over_after_the_lease_unless_kept_alive(queue: TurnQueue) -> None:
    await queue.enqueue(SCOPE, "turn_a")
    await queue.enqueue(SCOPE, "turn_b")
    taken = await queue.read("dead", 1, block_ms=100)
    kept = await queue.read("alive", 1, block_ms=100)
    await asyncio.sleep(0.3)  # both entries idle for 300 ms; the live consumer renews its own
    await queue.keep_alive("alive", [kept[0].entry_id])
    reclaimed = await queue.reclaim("rescuer", min_idle_ms=200)
    assert [e.turn_id for e in reclaimed] == [taken[0].turn_id] == ["turn_a"]


async def test_a_newer_entry_for_the_turn_keeps_its_queued_mark(queue: TurnQueue) -> None:
    await queue.enqueue(SCOPE, "turn_x")
    (old,) = await queue.read("w1", 1, block_ms=100)
    await queue.enqueue(SCOPE, "turn_x")  # queued again by a reconciler
    await queue.done(old)
    assert await queue.is_queued("turn_x")


async def test_a_group_lost_with_a_restarted_redis_is_created_again(queue: TurnQueue, client: aioredis.Redis) -> None:
    await queue.enqueue(SCOPE, "turn_1")
    await client.delete(queue._stream)  # what a restart without persistence leaves
    assert await queue.read("w1", 1, block_ms=50) == []
    assert await queue.reclaim("w1", min_idle_ms=0) == []
    await queue.enqueue(SCOPE, "turn_2")
    assert [e.turn_id for e in await queue.read("w1", 1, block_ms=100)] == ["turn_2"]


async def test_a_control_message_is_answered_by_the_turns_worker_once(client: aioredis.Redis) -> None:
    control = TurnControl(client, prefix=f"test:{secrets.token_hex(4)}:")
    handled: list[dict[str, Any]] = []

    async def handle(message: dict[str, Any]) -> dict[str, Any]:
        handled.append(message)
        return {"path": f"ar:turn_1.user.followup.{len(handled)}"}

    files = encode_attachments((("notes.txt", "text/plain", b"hello"),))
    early = asyncio.create_task(control.send("turn_1", {"kind": "followup", "message": "first", "files": files}))
    await asyncio.sleep(0.05)  # sent before the worker serves the turn: it is handled when it does
    async with control.serving("turn_1", handle):
        second = await control.send("turn_1", {"kind": "steer", "message": "second"})
        first = await early
    assert (first, second) == ({"path": "ar:turn_1.user.followup.1"}, {"path": "ar:turn_1.user.followup.2"})
    assert [m["message"] for m in handled] == ["first", "second"]
    assert decode_attachments(handled[0]["files"]) == (("notes.txt", "text/plain", b"hello"),)
    async with control.serving("turn_1", handle):  # a worker resuming the turn finds nothing left to handle
        assert await control.send("turn_1", {"kind": "cancel"}, wait_s=0.5) == {"path": "ar:turn_1.user.followup.3"}
    assert len(handled) == 3
    assert await control.send("turn_2", {"kind": "cancel"}, wait_s=0.2) is None  # nobody serves it
