"""Admission counters, in this process and in a real Redis: the same decisions, leases shared by workers."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.config.models.gateway import GatewayDescriptor
from berth.gateway.counters import AdmissionCounters, CountersUnavailableError, MemoryCounters
from berth.gateway.rate import MICROS_PER_SECOND, RateLimit, admit
from berth.gateway.redis_counters import RedisCounters
from berth.testing.redis import test_redis_url
from berth.turns.admission import Admission
from berth.turns.metrics import Metrics

KINDS = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


class Clock:
    """A clock the test moves (microseconds)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000 * MICROS_PER_SECOND

    def __call__(self) -> int:
        return self.now


@asynccontextmanager
async def counters_of(kind: str, clock: Callable[[], int], *, lease_s: float = 60) -> AsyncIterator[AdmissionCounters]:
    """Fresh counters of ``kind`` (Redis ones under a prefix of their own), closed afterwards."""
    if kind == "memory":
        yield MemoryCounters(clock)
        return
    client = aioredis.from_url(test_redis_url())
    counters = RedisCounters(client, prefix=f"test:{secrets.token_hex(6)}:", lease_s=lease_s, clock=clock)
    try:
        yield counters
    finally:
        await counters.aclose()
        await client.aclose()


@asynccontextmanager
async def two_workers(clock: Clock, lease_s: float = 60) -> AsyncIterator[tuple[RedisCounters, RedisCounters]]:
    """Two workers' counters on one Redis, under one prefix."""
    prefix = f"test:{secrets.token_hex(6)}:"
    clients = [aioredis.from_url(test_redis_url()) for _ in range(2)]
    workers = [RedisCounters(c, prefix=prefix, lease_s=lease_s, clock=clock) for c in clients]
    try:
        yield workers[0], workers[1]
    finally:
        for worker, client in zip(workers, clients, strict=True):
            await worker.aclose()
            await client.aclose()


limits = st.builds(RateLimit, per_minute=st.integers(1, 600), burst=st.integers(0, 10))
gaps = st.lists(st.integers(0, 20 * MICROS_PER_SECOND), min_size=1, max_size=40)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=limits, gap_list=gaps)
def test_counters_decide_as_the_algorithm_does(kind: str, limit: RateLimit, gap_list: list[int]) -> None:
    async def check() -> None:
        clock = Clock()
        tat: int | None = None
        async with counters_of(kind, clock) as counters:
            for gap in gap_list:
                clock.now += gap
                expected, new_tat = admit(tat, clock.now, limit)
                tat = new_tat if new_tat is not None else tat
                assert await counters.take("rate:acme", limit) == expected

    asyncio.run(check())


@pytest.mark.parametrize("kind", KINDS)
async def test_each_key_has_its_own_rate(kind: str) -> None:
    limit = RateLimit(per_minute=60, burst=1)
    async with counters_of(kind, Clock()) as counters:
        assert [(await counters.take("rate:acme", limit)).allowed for _ in range(3)] == [True, True, False]
        assert (await counters.take("rate:globex", limit)).allowed


@pytest.mark.parametrize("kind", KINDS)
async def test_leases_up_to_capacity_once_per_holder(kind: str) -> None:
    async with counters_of(kind, Clock()) as counters:
        assert await counters.acquire("turns:acme", "t1", 2)
        assert await counters.acquire("turns:acme", "t1", 2), "a holder asking again still holds one lease"
        assert await counters.acquire("turns:acme", "t2", 2)
        assert not await counters.acquire("turns:acme", "t3", 2)
        assert await counters.acquire("turns:globex", "t3", 2)
        assert await counters.held("turns:acme") == 2
        await counters.release("turns:acme", "t1")
        await counters.release("turns:acme", "never-held")
        assert await counters.acquire("turns:acme", "t3", 2)
        assert await counters.held("turns:acme") == 2


@pytest.mark.redis
async def test_workers_sharing_redis_share_the_limits() -> None:
    clock = Clock()
    limit = RateLimit(per_minute=60, burst=3)
    async with two_workers(clock) as (first, second):
        taken = [await worker.take("rate:acme", limit) for worker in (first, second, first, second, first)]
        assert [d.allowed for d in taken] == [True, True, True, True, False]
        assert await first.acquire("turns:acme", "turn-a", 1)
        assert not await second.acquire("turns:acme", "turn-b", 1)
        await first.release("turns:acme", "turn-a")
        assert await second.acquire("turns:acme", "turn-b", 1)


@pytest.mark.redis
async def test_a_dead_workers_leases_expire_and_a_live_ones_are_renewed() -> None:
    clock = Clock()
    async with two_workers(clock, lease_s=60) as (dying, living):
        assert await dying.acquire("turns:acme", "orphan", 2)
        assert await living.acquire("turns:acme", "kept", 2)
        assert not await living.acquire("turns:acme", "third", 2)

        clock.now += 50 * MICROS_PER_SECOND
        await living.renew()  # the dying worker renews nothing: it is gone
        clock.now += 11 * MICROS_PER_SECOND
        assert await living.held("turns:acme") == 1, "the orphan's lease ran out; the renewed one did not"
        assert await living.acquire("turns:acme", "third", 2)


@pytest.mark.redis
async def test_redis_time_is_the_clock_when_none_is_given() -> None:
    client = aioredis.from_url(test_redis_url())
    counters = RedisCounters(client, prefix=f"test:{secrets.token_hex(6)}:")
    try:
        limit = RateLimit(per_minute=1, burst=1)
        decisions = [await counters.take("rate:acme", limit) for _ in range(3)]
        assert [d.allowed for d in decisions] == [True, True, False]
        assert 50 * MICROS_PER_SECOND < decisions[-1].retry_after_us <= 60 * MICROS_PER_SECOND
    finally:
        await counters.aclose()
        await client.aclose()


async def test_unreachable_redis_is_reported_and_admission_lets_requests_in() -> None:
    client = aioredis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=1)  # port 9: nobody listens
    counters = RedisCounters(client)
    try:
        with pytest.raises(CountersUnavailableError, match="Redis could not count a request: ConnectionError"):
            await counters.take("rate:acme", RateLimit(per_minute=1, burst=0))
        with pytest.raises(CountersUnavailableError, match="grant a lease"):
            await counters.acquire("turns:acme", "t", 1)

        gateway = GatewayDescriptor.model_validate({"limits": {"default": {"requests_per_minute": 1, "burst": 0}}})
        admission = Admission(lambda: gateway, counters, Metrics())
        for _ in range(3):
            await admission.check_request("acme")
        admitted = await admission.admit_turn("acme", "turn-1")
        await admitted.release()
    finally:
        await client.aclose()
