"""Admission counters in Redis: the limits hold across every worker that shares the server.

Each operation is one Lua script, so it is atomic however many workers call it at once, and reads the time
from the Redis server (``TIME``), so workers whose clocks differ still agree. A rate key holds its TAT
(:mod:`berth.gateway.rate`); a lease key is a sorted set of holders scored by when their lease expires.
Leases are renewed while their holder lives (every third of :data:`LEASE_S`), so the turns of a worker that
dies stop counting within a minute without anyone having to clean up after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from berth.gateway.counters import Clock, CountersUnavailableError
from berth.gateway.rate import MICROS_PER_SECOND, RateDecision, RateLimit

__all__ = ["LEASE_S", "RedisCounters"]

log = logging.getLogger(__name__)

LEASE_S = 60
"""How long a lease lasts unless renewed (its holder's worker renews it every third of this)."""

_NOW = """
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""
# Every script takes ARGV[1] = the time in microseconds, or '' for the server's clock. A key outlives what it
# must remember by a minute: an expired key decides as an unseen one, so that costs nothing, and a caller's
# clock (tests) never races the server's expiry.

_TAKE = (
    _NOW
    + """
local interval = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then tat = now end
local ahead = tat - now
if ahead > tolerance then return {0, ahead - tolerance} end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 60000)
return {1, 0}
"""
)

_ACQUIRE = (
    _NOW
    + """
local holder = ARGV[2]
local capacity = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], holder) and redis.call('ZCARD', KEYS[1]) >= capacity then return 0 end
redis.call('ZADD', KEYS[1], now + lease, holder)
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + 60000)
return 1
"""
)

_RENEW = (
    _NOW
    + """
local lease = tonumber(ARGV[2])
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + 60000)
return 0
"""
)

_HELD = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""
)


class RedisCounters:
    """:class:`~berth.gateway.counters.AdmissionCounters` kept in Redis under ``prefix``.

    :param clock: for tests only, a clock every script uses instead of the server's ``TIME``.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = "berth:admission:",
        lease_s: float = LEASE_S,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._lease_us = int(lease_s * MICROS_PER_SECOND)
        self._clock = clock
        self._take = client.register_script(_TAKE)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._held = client.register_script(_HELD)
        self._mine: dict[str, set[str]] = {}
        self._renewer: asyncio.Task[None] | None = None

    def _now(self) -> str:
        return "" if self._clock is None else str(self._clock())

    @contextlib.asynccontextmanager
    async def _reaching(self, what: str) -> AsyncIterator[None]:
        """Turn Redis's connection and command errors into :class:`CountersUnavailableError`."""
        try:
            yield
        except (aioredis.RedisError, OSError) as exc:
            raise CountersUnavailableError(f"Redis could not {what}: {type(exc).__name__}: {exc}") from exc

    async def take(self, key: str, limit: RateLimit) -> RateDecision:
        """Count one request under ``key``; say whether ``limit`` admits it."""
        async with self._reaching("count a request"):
            allowed, retry_after = await self._take(
                keys=[self._prefix + key], args=[self._now(), limit.interval_us, limit.tolerance_us]
            )
        return RateDecision(bool(allowed), int(retry_after))

    async def acquire(self, key: str, holder: str, capacity: int) -> bool:
        """Give ``holder`` a lease under ``key`` if fewer than ``capacity`` are held (True if it holds one)."""
        async with self._reaching("grant a lease"):
            granted = await self._acquire(
                keys=[self._prefix + key], args=[self._now(), holder, capacity, self._lease_us]
            )
        if granted:
            self._mine.setdefault(key, set()).add(holder)
            if self._renewer is None or self._renewer.done():
                self._renewer = asyncio.create_task(self._renew_forever(), name="admission lease renewal")
        return bool(granted)

    async def release(self, key: str, holder: str) -> None:
        """Return ``holder``'s lease under ``key``."""
        holders = self._mine.get(key)
        if holders is not None:
            holders.discard(holder)
            if not holders:
                del self._mine[key]
        async with self._reaching("release a lease"):
            await self._client.zrem(self._prefix + key, holder)

    def hand_over(self, key: str, holder: str) -> None:
        """Stop renewing ``holder``'s lease here: another process (the worker that runs the turn) takes it over
        with :meth:`adopt`; until then it lasts its full lease."""
        holders = self._mine.get(key)
        if holders is not None:
            holders.discard(holder)
            if not holders:
                del self._mine[key]

    async def adopt(self, key: str, holder: str) -> None:
        """Renew ``holder``'s lease from this process from now on (it was granted elsewhere)."""
        self._mine.setdefault(key, set()).add(holder)
        await self.renew()
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_forever(), name="admission lease renewal")

    async def held(self, key: str) -> int:
        """How many unexpired leases are held under ``key``, by any worker."""
        async with self._reaching("count leases"):
            count: Any = await self._held(keys=[self._prefix + key], args=[self._now()])
        return int(count)

    async def renew(self) -> None:
        """Extend every lease this process holds by a full :data:`LEASE_S` from now."""
        for key, holders in list(self._mine.items()):
            if holders:
                async with self._reaching("renew leases"):
                    await self._renew(keys=[self._prefix + key], args=[self._now(), self._lease_us, *sorted(holders)])

    async def _renew_forever(self) -> None:
        interval = self._lease_us / MICROS_PER_SECOND / 3
        while self._mine:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except CountersUnavailableError as exc:  # the next round tries again; a lease outlives two misses
                log.warning("could not renew admission leases: %s", exc)

    async def aclose(self) -> None:
        """Stop renewing (the leases then expire by themselves); the client belongs to the caller."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
