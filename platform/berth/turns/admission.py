"""Admission in the API (SPEC §2.4): what ``gateway.yaml`` lets a tenant ask of this host, and when to say no.

* every request a tenant's key makes under ``/v1/{tenant}/…`` (and ``/mcp/{tenant}/…``) is counted against
  its ``requests_per_minute`` and ``burst``; over it → **429** with ``Retry-After`` (the exact wait);
* a turn takes one of the tenant's ``concurrent_turns`` until it finishes; none left → **429**
  (a tenant without these limits in ``gateway.yaml`` is not limited by them);
* a turn takes one of this worker's ``max_inflight_turns_per_worker`` slots when it runs; with all taken it
  waits in a queue of ``queue_max``; with that full too → **503** with ``Retry-After: retry_after_s``.

Limits are read from the configuration in force on every decision. The descriptor watcher loads the
configuration again when ``bundles.yaml`` or ``bundles.secrets.yaml`` change (SPEC §3.3), so an edit of
``gateway.yaml`` alone applies at the next restart.
When the counters cannot be reached (Redis down), admission lets the request in and logs it: limits
protect the host, and refusing everything because their bookkeeping is away would be the larger outage.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

from berth.config.models.gateway import GatewayDescriptor
from berth.gateway.counters import AdmissionCounters, CountersUnavailableError
from berth.gateway.rate import RateLimit
from berth.gateway.slots import SlotReservation, TurnSlots
from berth.turns.errors import ServiceError
from berth.turns.metrics import Metrics

__all__ = ["Admission", "TurnAdmission"]

log = logging.getLogger(__name__)


def _retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(math.ceil(seconds), 1))


class TurnAdmission:
    """What one admitted turn holds: a slot reservation on this worker and a lease of its tenant."""

    def __init__(
        self, admission: Admission, tenant: str, turn_id: str, reservation: SlotReservation, *, lease: bool = True
    ) -> None:
        self._admission = admission
        self._tenant = tenant
        self._turn_id = turn_id
        self._reservation = reservation
        self._lease = lease
        self._released = False

    def turns_ahead(self) -> int | None:
        """How many turns this one would wait behind for a slot (None: one is free)."""
        return self._reservation.turns_ahead()

    async def wait_for_slot(self) -> None:
        """Wait until this worker has a free slot for the turn, and take it."""
        await self._reservation.run()

    async def release(self) -> None:
        """Give back the slot and the tenant's lease; later calls do nothing."""
        if self._released:
            return
        self._released = True
        self._reservation.release()
        if self._lease:
            await self._admission._release_lease(self._tenant, self._turn_id)

    def release_soon(self) -> None:
        """:meth:`release` from synchronous code (a task's done callback)."""
        if not self._released:
            self._admission._spawn(self.release())


class Admission:
    """Applies a gateway descriptor's limits with ``counters`` (shared by workers, or this process's)."""

    def __init__(self, gateway: Callable[[], GatewayDescriptor], counters: AdmissionCounters, metrics: Metrics) -> None:
        self._gateway = gateway
        self.counters = counters
        self._metrics = metrics
        self.slots: TurnSlots | None = None
        self._pending: set[asyncio.Task[None]] = set()
        metrics.turns_running.set_function(lambda: self.slots.running if self.slots else 0)
        metrics.turns_queued.set_function(lambda: self.slots.queued if self.slots else 0)

    async def check_request(self, tenant: str) -> None:
        """Count one request of ``tenant``; 429 when it is over its rate."""
        limits = self._gateway().limits.for_tenant(tenant)
        if limits.requests_per_minute is None:
            return
        try:
            decision = await self.counters.take(f"rate:{tenant}", RateLimit(limits.requests_per_minute, limits.burst))
        except CountersUnavailableError as exc:
            log.warning("admission counters unavailable, request let in: %s", exc)
            return
        if not decision.allowed:
            wait = decision.retry_after_s
            raise self._refusal(
                tenant,
                "rate",
                429,
                "rate_limited",
                f"tenant {tenant} is over its limit of {limits.requests_per_minute} requests per minute "
                f"(burst {limits.burst}); retry in {wait:.1f} s",
                wait,
                requests_per_minute=limits.requests_per_minute,
                burst=limits.burst,
            )

    async def admit_turn(self, tenant: str, turn_id: str) -> TurnAdmission:
        """Admit one turn of ``tenant``: 503 when this worker is full, 429 when the tenant is."""
        gateway = self._gateway()
        backpressure = gateway.backpressure
        slots = self._slots(backpressure.max_inflight_turns_per_worker, backpressure.queue_max)
        reservation = slots.reserve()
        if reservation is None:
            raise self._refusal(
                tenant,
                "backpressure",
                503,
                "overloaded",
                f"this worker runs {slots.running} turns and has {slots.queued} waiting, its limit; "
                f"retry in {backpressure.retry_after_s:g} s",
                backpressure.retry_after_s,
                running=slots.running,
                queued=slots.queued,
            )
        capacity = gateway.limits.for_tenant(tenant).concurrent_turns
        if capacity is None:
            return TurnAdmission(self, tenant, turn_id, reservation, lease=False)
        try:
            granted = await self.counters.acquire(f"turns:{tenant}", turn_id, capacity)
        except CountersUnavailableError as exc:
            log.warning("admission counters unavailable, turn let in: %s", exc)
            granted = True
        except BaseException:
            reservation.release()
            raise
        if not granted:
            reservation.release()
            raise self._tenant_full(tenant, capacity, backpressure.retry_after_s)
        return TurnAdmission(self, tenant, turn_id, reservation)

    def _tenant_full(self, tenant: str, capacity: int, retry_after_s: float) -> ServiceError:
        """The 429 refusing a turn of ``tenant``, which runs ``capacity`` turns already."""
        return self._refusal(
            tenant,
            "concurrent_turns",
            429,
            "too_many_turns",
            f"tenant {tenant} already runs {capacity} turns, its limit of concurrent turns; "
            f"retry in {retry_after_s:g} s",
            retry_after_s,
            concurrent_turns=capacity,
        )

    async def admit_queued(self, tenant: str, turn_id: str, *, queued: int) -> bool:
        """Admit one turn of ``tenant`` to the turn queue (distributed mode); return whether it took a lease of
        the tenant's concurrent turns (the worker that runs the turn takes the lease over and returns it).

        503 when the queue already holds ``backpressure.queue_max`` turns; 429 when the tenant is full.
        """
        gateway = self._gateway()
        backpressure = gateway.backpressure
        if queued >= backpressure.queue_max:
            raise self._refusal(
                tenant,
                "backpressure",
                503,
                "overloaded",
                f"the turn queue holds {queued} turns, its limit; retry in {backpressure.retry_after_s:g} s",
                backpressure.retry_after_s,
                queued=queued,
            )
        capacity = gateway.limits.for_tenant(tenant).concurrent_turns
        if capacity is None:
            return False
        try:
            granted = await self.counters.acquire(f"turns:{tenant}", turn_id, capacity)
        except CountersUnavailableError as exc:
            log.warning("admission counters unavailable, turn let in: %s", exc)
            return False
        if not granted:
            raise self._tenant_full(tenant, capacity, backpressure.retry_after_s)
        self.counters.hand_over(f"turns:{tenant}", turn_id)
        return True

    async def adopt_lease(self, tenant: str, turn_id: str) -> None:
        """Hold the lease another process took for ``turn_id`` (the worker running a queued turn)."""
        try:
            await self.counters.adopt(f"turns:{tenant}", turn_id)
        except CountersUnavailableError as exc:
            log.warning("admission counters unavailable, lease of turn %s not renewed: %s", turn_id, exc)

    async def release_lease(self, tenant: str, turn_id: str) -> None:
        """Return the tenant lease of ``turn_id`` (taken by :meth:`admit_queued`)."""
        await self._release_lease(tenant, turn_id)

    def _refusal(
        self, tenant: str, reason: str, status: int, code: str, message: str, retry_after_s: float, **details: Any
    ) -> ServiceError:
        """The error refusing a request of ``tenant`` for ``reason`` (counted in the metrics)."""
        self._metrics.admission_rejections.labels(tenant=tenant, reason=reason).inc()
        return ServiceError(
            status,
            code,
            message,
            details={**details, "retry_after_s": round(retry_after_s, 3)},
            headers={"Retry-After": _retry_after(retry_after_s)},
        )

    def _slots(self, capacity: int, queue_max: int) -> TurnSlots:
        if self.slots is None:
            self.slots = TurnSlots(capacity, queue_max)
        else:
            self.slots.resize(capacity, queue_max)
        return self.slots

    async def _release_lease(self, tenant: str, turn_id: str) -> None:
        try:
            await self.counters.release(f"turns:{tenant}", turn_id)
        except CountersUnavailableError as exc:  # the lease expires by itself
            log.warning("admission counters unavailable, lease left to expire: %s", exc)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        """Finish pending releases and close the counters."""
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        await self.counters.aclose()
