"""Admission counters: request rates and turn leases per key, shared by whoever must agree on them.

Two things are counted per tenant (SPEC §2.4): the request rate (:mod:`berth.gateway.rate`) and the turns
admitted and not yet finished (leases, at most ``capacity`` per key). Embedded mode keeps both in this
process (:class:`MemoryCounters`); distributed mode keeps them in Redis
(:class:`berth.gateway.redis_counters.RedisCounters`) so the limits hold across workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from berth.gateway.rate import RateDecision, RateLimit, admit

__all__ = ["AdmissionCounters", "Clock", "CountersUnavailableError", "MemoryCounters", "monotonic_us"]

Clock = Callable[[], int]
"""Returns the current time in integer microseconds."""


def monotonic_us() -> int:
    """This process's monotonic clock in microseconds."""
    return time.monotonic_ns() // 1000


class CountersUnavailableError(Exception):
    """The counters could not be reached (their server is down or slow); the message says which and why."""


class AdmissionCounters(Protocol):
    """Where request rates and turn leases are counted; every method raises :class:`CountersUnavailableError`
    when the counters cannot be reached."""

    async def take(self, key: str, limit: RateLimit) -> RateDecision:
        """Count one request under ``key``; say whether ``limit`` admits it."""
        ...

    async def acquire(self, key: str, holder: str, capacity: int) -> bool:
        """Give ``holder`` a lease under ``key`` if fewer than ``capacity`` are held (True if it holds one)."""
        ...

    async def release(self, key: str, holder: str) -> None:
        """Return ``holder``'s lease under ``key`` (nothing when it holds none)."""
        ...

    async def held(self, key: str) -> int:
        """How many leases are held under ``key``."""
        ...

    def hand_over(self, key: str, holder: str) -> None:
        """Stop keeping ``holder``'s lease alive here: another process (the worker running the turn) adopts it."""
        ...

    async def adopt(self, key: str, holder: str) -> None:
        """Keep alive, from this process, a lease another process granted."""
        ...

    async def aclose(self) -> None:
        """Release connections and background work."""
        ...


class MemoryCounters:
    """The embedded counters: plain dictionaries, exact within this process.

    The event loop runs one coroutine at a time and nothing here awaits, so every operation is atomic.
    """

    def __init__(self, clock: Clock = monotonic_us) -> None:
        self._clock = clock
        self._tats: dict[str, int] = {}
        self._leases: dict[str, set[str]] = {}

    async def take(self, key: str, limit: RateLimit) -> RateDecision:
        """Count one request under ``key``; say whether ``limit`` admits it."""
        now = self._clock()
        decision, tat = admit(self._tats.get(key), now, limit)
        if tat is not None:
            self._tats[key] = tat
            if len(self._tats) > 4096:
                self._forget_idle(now)
        return decision

    def _forget_idle(self, now: int) -> None:
        """Drop keys whose bucket is full again (their TAT has passed): they decide as if never seen."""
        for key in [k for k, tat in self._tats.items() if tat <= now]:
            del self._tats[key]

    async def acquire(self, key: str, holder: str, capacity: int) -> bool:
        """Give ``holder`` a lease under ``key`` if fewer than ``capacity`` are held (True if it holds one)."""
        holders = self._leases.setdefault(key, set())
        if holder in holders:
            return True
        if len(holders) >= capacity:
            return False
        holders.add(holder)
        return True

    async def release(self, key: str, holder: str) -> None:
        """Return ``holder``'s lease under ``key``."""
        holders = self._leases.get(key)
        if holders is not None:
            holders.discard(holder)
            if not holders:
                del self._leases[key]

    async def held(self, key: str) -> int:
        """How many leases are held under ``key``."""
        return len(self._leases.get(key, ()))

    def hand_over(self, key: str, holder: str) -> None:
        """Nothing to do: a lease here never expires, and no other process shares these counters."""

    async def adopt(self, key: str, holder: str) -> None:
        """Nothing to do (see :meth:`hand_over`)."""

    async def aclose(self) -> None:
        """Nothing to release."""
