"""The turn queue on a real Redis: one consumer per entry, take-over of a dead consumer's entries (first, and no more
than asked), the queued mark, per-tenant fairness, wait times and the oldest turn, and a group that is gone (Redis
restarted) created again; the control channel's request and reply."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from berth.storage.scope import ConversationScope
from berth.testing.redis import test_redis_url
from berth.turns.control import TurnControl, decode_attachments, encode_attachments
from berth.turns.queue import GROUP, TurnQueue

pytestmark = pytest.mark.redis
SCOPE = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="c1")


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    connection = aioredis.from_url(test_redis_url())
    yield connection
    await connection.aclose()


@pytest.fixture
async def queue(client: aioredis.Redis) -> TurnQueue:
    created = TurnQueue(client, prefix=f"test:{secrets.token_hex(4)}")
    await created.ensure_group()
    await created.ensure_group()  # a second process creating it again is fine
    return created


LEASE_MS = 500


async def _until_idle(client: aioredis.Redis, queue: TurnQueue, consumer: str, idle_ms: int) -> None:
    """Wait until every pending entry of ``consumer`` has been idle ``idle_ms`` (as a dead worker's become)."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        pending = await client.xpending_range(queue._stream, GROUP, "-", "+", 100, consumername=consumer)
        if pending and all(int(entry["time_since_delivered"]) >= idle_ms for entry in pending):
            return
        assert asyncio.get_running_loop().time() < deadline, pending
        await asyncio.sleep(0.02)


async def test_each_entry_goes_to_one_consumer_and_is_gone_once_done(queue: TurnQueue) -> None:
    for n in range(3):
        assert await queue.enqueue(SCOPE, f"turn_{n}")
    first = await queue.read("w1", 2, block_ms=100)
    second = await queue.read("w2", 5, block_ms=100)
    assert [e.turn_id for e in first] == ["turn_0", "turn_1"]
    assert [e.turn_id for e in second] == ["turn_2"]
    assert len({e.entry_id for e in first + second}) == 3
    assert first[0].scope == SCOPE
    assert await queue.is_queued("turn_0")
    await queue.done(first[0])
    assert not await queue.is_queued("turn_0")
    assert await queue.depth() == 2
    assert await queue.read("w3", 5, block_ms=50) == []


async def test_a_dead_consumers_entries_are_taken_over_after_the_lease_unless_kept_alive(
    queue: TurnQueue, client: aioredis.Redis
) -> None:
    await queue.enqueue(SCOPE, "turn_a")
    await queue.enqueue(SCOPE, "turn_b")
    taken = await queue.read("dead", 1, block_ms=100)
    kept = await queue.read("alive", 1, block_ms=100)
    await _until_idle(client, queue, "dead", 200)  # both entries idle past the lease; the live consumer renews its own
    await queue.keep_alive("alive", [kept[0].entry_id])
    reclaimed = await queue.reclaim("rescuer", min_idle_ms=200)
    assert [e.turn_id for e in reclaimed] == [taken[0].turn_id] == ["turn_a"]


async def test_a_newer_entry_for_the_turn_keeps_its_queued_mark(queue: TurnQueue) -> None:
    await queue.enqueue(SCOPE, "turn_x")
    (old,) = await queue.read("w1", 1, block_ms=100)
    await queue.enqueue(SCOPE, "turn_x")  # queued again by a reconciler
    await queue.done(old)
    assert await queue.is_queued("turn_x")
    (new,) = await queue.read("w1", 1, block_ms=100)
    assert new.turn_id == "turn_x" and new.entry_id != old.entry_id
    await queue.done(new)
    assert not await queue.is_queued("turn_x")


async def test_a_turn_waiting_already_is_not_queued_twice(queue: TurnQueue) -> None:
    assert await queue.enqueue(SCOPE, "turn_1")
    assert not await queue.enqueue(SCOPE, "turn_1")  # a retried enqueue, or a reconciler's
    assert await queue.depth() == 1
    assert [e.turn_id for e in await queue.read("w1", 5, block_ms=50)] == ["turn_1"]


async def test_a_group_lost_with_a_restarted_redis_is_created_again(queue: TurnQueue, client: aioredis.Redis) -> None:
    await queue.enqueue(SCOPE, "turn_1")
    await client.delete(*(await client.keys(f"{queue._stream.rpartition(':')[0]}:*")))  # a restart keeps nothing
    assert await queue.read("w1", 1, block_ms=50) == []
    assert await queue.reclaim("w1", min_idle_ms=0) == []
    await client.delete(queue._stream)  # the stream and its group gone between two commands
    await queue.enqueue(SCOPE, "turn_2")
    assert [e.turn_id for e in await queue.read("w1", 1, block_ms=100)] == ["turn_2"]


def _scope(tenant: str, n: int) -> ConversationScope:
    return ConversationScope(tenant=tenant, project="p", user_id="u", conversation_id=f"c{n}")


async def test_a_tenant_with_a_backlog_does_not_starve_one_that_queues_after_it(queue: TurnQueue) -> None:
    for n in range(50):
        await queue.enqueue(_scope("a", n), f"a{n}")
    started = [e.turn_id for e in await queue.read("w1", 3, block_ms=0)]  # a worker is running three of them
    await queue.enqueue(_scope("b", 0), "b0")
    await queue.enqueue(_scope("b", 1), "b1")
    order = [*started]
    while entries := await queue.read("w1", 1, block_ms=0):  # one free slot at a time, as a busy worker has
        order.extend(e.turn_id for e in entries)
    assert order[:3] == ["a0", "a1", "a2"]
    assert order.index("b0") <= 4 and order.index("b1") <= 6, order[:10]
    assert [t for t in order if t.startswith("a")] == [f"a{n}" for n in range(50)]  # a tenant's turns keep their order
    assert len(order) == 52


async def test_take_hands_over_stalled_entries_first_and_never_more_than_asked(
    queue: TurnQueue, client: aioredis.Redis
) -> None:
    for n in range(3):
        await queue.enqueue(SCOPE, f"old_{n}")
    await queue.read("dead", 3, block_ms=0)
    for n in range(5):
        await queue.enqueue(SCOPE, f"new_{n}")
    await _until_idle(client, queue, "dead", LEASE_MS)
    reclaimed, fresh = await queue.take("rescuer", 2, min_idle_ms=LEASE_MS)
    assert ([e.turn_id for e in reclaimed], fresh) == (["old_0", "old_1"], [])
    reclaimed, fresh = await queue.take("rescuer", 4, min_idle_ms=LEASE_MS)  # its own are not idle: not again
    assert [e.turn_id for e in reclaimed] == ["old_2"]
    assert [e.turn_id for e in fresh] == ["new_0", "new_1", "new_2"]
    reclaimed, fresh = await queue.take("other", 1, min_idle_ms=None)  # None: take no stalled entry
    assert (reclaimed, [e.turn_id for e in fresh]) == ([], ["new_3"])


async def test_the_queue_tells_how_long_turns_waited_and_its_oldest_turn(queue: TurnQueue) -> None:
    assert await queue.oldest_age_s() is None
    await queue.enqueue(SCOPE, "turn_1")
    await queue.enqueue(SCOPE, "turn_2")
    (entry,) = await queue.read("w1", 1, block_ms=0)
    assert entry.queued_at_ms is not None and entry.waited_s is not None
    assert 0 <= entry.waited_s < 5
    assert entry.taken_at_ms >= entry.queued_at_ms
    age = await queue.oldest_age_s()
    assert age is not None and 0 <= age < 5
    await queue.enqueue(SCOPE, "turn_1")  # queued again while it runs: it keeps its first time
    await queue.done(entry)
    assert await queue.depth() == 2
    (again,) = await queue.read("w1", 1, block_ms=0)
    assert again.turn_id == "turn_2"


async def test_an_idle_consumer_wakes_when_a_turn_is_queued(queue: TurnQueue) -> None:
    assert await queue.wait(0.05) is False  # nothing queued: the wait ends at its timeout
    waiting = asyncio.create_task(queue.wait(30))
    await queue.enqueue(SCOPE, "turn_1")
    assert await asyncio.wait_for(waiting, 5) is True
    assert [e.turn_id for e in await queue.read("w1", 1, block_ms=0)] == ["turn_1"]


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
