"""The reload bus over a real Redis: every request with an id is acknowledged, a reload that fails in a process
is acknowledged as failed (the bus goes on), and the sender learns who answered and who did not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from berth.host.broadcast import RELOAD_CHANNEL, RedisReloadBus
from berth.host.reload_acks import ReloadAck, broadcast_reload
from berth.host.supervised import BackgroundTasks
from berth.storage.redis_client import connect_redis
from berth.testing.redis import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    redis = RedisServer()
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture
async def bus_process(server: RedisServer) -> AsyncIterator[list[str]]:
    """A process's bus, as the host runs it: reloads ``alpha``, knows no other bundle. Yields the reloads it did."""
    client = connect_redis(server.url, retries=3)
    reloaded: list[str] = []
    subscribed = asyncio.Event()

    async def handler(bundle_id: str) -> ReloadAck:
        if bundle_id != "alpha":
            raise LookupError(f"bundle '{bundle_id}' is not in bundles.yaml")
        reloaded.append(bundle_id)
        return ReloadAck("p1", bundle_id, True, len(reloaded) + 1, "loaded")

    async def on_subscribed() -> None:
        subscribed.set()

    bus = RedisReloadBus(client, "p1", on_subscribed=on_subscribed)
    tasks = BackgroundTasks()
    tasks.spawn("reload bus", lambda: bus.run(handler))
    await asyncio.wait_for(subscribed.wait(), 10)
    yield reloaded
    tasks.request_stop()
    await bus.close()
    await tasks.stop()
    await client.aclose()


async def test_each_process_acknowledges_and_a_failed_reload_is_an_answer_not_a_dead_bus(
    server: RedisServer, bus_process: list[str]
) -> None:
    sender = connect_redis(server.url, retries=0)
    try:
        await sender.publish(RELOAD_CHANNEL, "not json")  # ignored, and the bus goes on
        failed = await broadcast_reload(sender, "ghost", origin="test", expected=["p1"], timeout_s=10)
        assert (failed.receivers, failed.silent, failed.unnamed, failed.ok) == (1, [], 0, False)
        [ack] = failed.acks
        assert (ack.worker_id, ack.ok, ack.state) == ("p1", False, "error")
        assert ack.line() == "p1: reload FAILED (nothing serving): LookupError: bundle 'ghost' is not in bundles.yaml"

        done = await broadcast_reload(sender, "alpha", origin="test", expected=["p1"], timeout_s=10)
        assert done.ok
        assert [ack.line() for ack in done.acks] == ["p1: generation 2 loaded"]
        assert bus_process == ["alpha"]
        assert await sender.keys("berth:bundles:reload:acks:*") == []  # the sender cleans up after itself
    finally:
        await sender.aclose()


async def test_a_reported_process_that_does_not_answer_is_named(server: RedisServer, bus_process: list[str]) -> None:
    sender = connect_redis(server.url, retries=0)
    try:
        result = await broadcast_reload(sender, "alpha", origin="test", expected=["p1", "gone"], timeout_s=1)
    finally:
        await sender.aclose()
    assert ([ack.worker_id for ack in result.acks], result.silent, result.unnamed, result.ok) == (
        ["p1"],
        ["gone"],
        0,
        False,
    )


async def test_a_reload_nobody_subscribes_to_returns_at_once(server: RedisServer) -> None:
    sender = connect_redis(server.url, retries=0)
    try:
        result = await asyncio.wait_for(
            broadcast_reload(sender, "alpha", origin="test", expected=[], timeout_s=60), timeout=10
        )
    finally:
        await sender.aclose()
    assert (result.receivers, result.acks, result.reached_none, result.ok) == (0, [], True, False)
