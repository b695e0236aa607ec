"""``berth worker``: a process that claims queued turns and runs them (distributed mode, SPEC §8).

A worker runs up to :attr:`TurnWorker.capacity` turns at once (``--concurrency``, capped by ``gateway.yaml``'s
``backpressure.max_inflight_turns_per_worker``). Three loops share its event loop:

* **consume** — whenever it has a free slot, takes turns from the queue (:meth:`~berth.turns.queue.TurnQueue.
  take`), never more than its free slots: first the entries of a worker that stopped renewing them (idle longer
  than the lease: taken over before any new turn), then waiting turns in per-tenant fair order; with nothing to
  take it waits for a new turn, checking for stalled entries every quarter lease. Each turn runs in a task
  (:meth:`~berth.distributed.execution.QueuedTurnRunner.run_queued`); its entry is acknowledged once the turn
  is committed;
* **keep alive** — every third of the lease, resets the idle time of the entries it runs, so no other
  worker takes them over while it lives;
* **reconcile** — every half lease, queues again every unfinished turn that no live process owns and the queue
  no longer holds (a Redis restart lost it, or the API died between storing the turn and queueing it).

A turn runs at most once at a time in a worker: running turns are keyed by turn id, and another entry for a turn
running here (queued again by a reconciler, or by a retried enqueue) is kept alive with it and acknowledged when it
is committed. Should that run fail, every entry of the turn is left pending and taken over after the lease.
A turn's last attempt runs alone (``run_queued`` says ``isolate`` when a busy worker claims it): the worker keeps its
entry, takes no new turn until the turn would run alone, and runs it then.

Who runs a turn is decided in PostgreSQL (the turn's owner and its advisory lock), so a reclaimed entry
whose turn is still run by a live worker is dropped, and a turn is resumed after its last logged round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass, field

from berth.distributed.execution import QueuedTurnRunner
from berth.turns.queue import QueueEntry
from berth.turns.services import HostServices

__all__ = ["TurnWorker", "WorkerSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker takes turns.

    :ivar concurrency: turns it runs at once (at most ``backpressure.max_inflight_turns_per_worker``).
    :ivar lease_s: how long an entry may go without a keep-alive before another worker takes it over.
    :ivar block_s: how long one wait for a new turn lasts at most (a stop is noticed within it).
    """

    concurrency: int = 8
    lease_s: float = 15.0
    block_s: float = 1.0


@dataclass
class _RunningTurn:
    """A turn this worker runs: the entry it runs from, the other entries read for it meanwhile, its task."""

    entry: QueueEntry
    reclaimed: bool
    extra: list[QueueEntry] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def entries(self) -> list[QueueEntry]:
        """Every queue entry of the turn this worker holds."""
        return [self.entry, *self.extra]


class TurnWorker:
    """Consumes the turn queue of ``services`` (opened, distributed) until :meth:`stop`."""

    def __init__(self, services: HostServices, settings: WorkerSettings | None = None, *, name: str | None = None):
        if services.distributed is None:
            raise RuntimeError("a turn worker needs distributed storage (platform.storage.kind: distributed)")
        self.services = services
        self.settings = settings or WorkerSettings()
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = services.metrics
        self._queue = services.distributed.queue
        self._turns = QueuedTurnRunner(services)
        self._running: dict[str, _RunningTurn] = {}  # turn id → the turn running here
        self._slot_freed = asyncio.Event()
        self._turn_ended = asyncio.Condition()
        self._isolating: list[str] = []  # turns whose last attempt waits to run alone here, in order
        self._stopping = asyncio.Event()
        self.turns_run = 0
        self.metrics.turns_running.set_function(lambda: len(self._running))
        self.metrics.worker_slots.set_function(lambda: self.capacity)

    @property
    def capacity(self) -> int:
        """Turns this worker runs at once at most: ``concurrency``, capped by ``gateway.yaml``'s
        ``backpressure.max_inflight_turns_per_worker`` (the descriptors in force)."""
        gateway = self.services.current_gateway()
        if gateway is None:
            return self.settings.concurrency
        return max(1, min(self.settings.concurrency, gateway.backpressure.max_inflight_turns_per_worker))

    @property
    def running(self) -> int:
        """Turns this worker runs now."""
        return len(self._running)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (no new turns are taken)."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop taking turns; :meth:`run` returns once the running ones are committed."""
        self._stopping.set()
        self._slot_freed.set()

    async def run(self) -> None:
        """Take and run turns until :meth:`stop`; then let the running turns finish (still kept alive)."""
        consume = asyncio.create_task(self._consume(), name="worker consume")
        helpers = [
            asyncio.create_task(self._keep_alive(), name="worker keep-alive"),
            asyncio.create_task(self._reconcile(), name="worker reconcile"),
        ]
        try:
            await self._stopping.wait()
            await consume  # ends within a wait for new turns
            tasks = [turn.task for turn in self._running.values() if turn.task is not None]
            if tasks:
                await asyncio.wait(tasks)
        finally:
            for task in [consume, *helpers]:
                task.cancel()
            for task in [consume, *helpers]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _consume(self) -> None:
        lease_ms = int(self.settings.lease_s * 1000)
        idle_wait_s = min(self.settings.block_s, self.settings.lease_s / 4)
        while not self._stopping.is_set():
            free = self.capacity - len(self._running)
            if free <= 0 or self._isolating:  # full, or a turn waits to run alone: take nothing
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                reclaimed, fresh = await self._queue.take(self.name, free, min_idle_ms=lease_ms)
                for entry in reclaimed:
                    self._start(entry, reclaimed=True)
                for entry in fresh:
                    self._start(entry, reclaimed=False)
                if not reclaimed and not fresh:
                    await self._queue.wait(idle_wait_s)
            except Exception:
                log.warning("could not read the turn queue; retrying", exc_info=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 1.0)

    def _start(self, entry: QueueEntry, *, reclaimed: bool) -> None:
        """Run the turn of ``entry``, unless it runs here already (then the entry is settled with it)."""
        tenant = entry.scope.tenant
        running = self._running.get(entry.turn_id)
        if running is not None:
            if all(held.entry_id != entry.entry_id for held in running.entries()):
                running.extra.append(entry)
                self.metrics.turn_duplicate_entries.labels(tenant=tenant).inc()
                log.info("turn %s runs here already: its entry %s is settled with it", entry.turn_id, entry.entry_id)
            return
        if reclaimed:
            self.metrics.turn_reclaims.labels(tenant=tenant).inc()
            log.warning("taking over turn %s: its worker stopped renewing it", entry.turn_id)
        elif (waited := entry.waited_s) is not None:
            self.metrics.turn_queue_wait.labels(tenant=tenant).observe(waited)
        running = _RunningTurn(entry, reclaimed)
        self._running[entry.turn_id] = running
        running.task = asyncio.create_task(self._run(running), name=f"turn {entry.turn_id}")

    async def _run(self, running: _RunningTurn) -> None:
        entry, tenant = running.entry, running.entry.scope.tenant
        outcome: str | None = None
        try:
            try:
                outcome = await self._turns.run_queued(entry)
                if outcome == "isolate":
                    outcome = await self._run_alone(entry)
            except asyncio.CancelledError:
                raise
            except Exception:  # left pending: taken over after the lease, by this worker or another
                log.exception("queued turn %s could not be run", entry.turn_id)
            if outcome in ("ran", "ended"):  # its slot is free once every entry of the turn is acknowledged
                await self._settle(running)
        finally:
            self._running.pop(entry.turn_id, None)
            self._slot_freed.set()
            async with self._turn_ended:
                self._turn_ended.notify_all()
        if outcome in (None, "retry"):  # the entries stay pending: taken again after the lease
            self.metrics.turn_retry(tenant)
        elif outcome == "ran":
            self.turns_run += 1
            if running.reclaimed:
                self.metrics.turn_takeovers.labels(tenant=tenant).inc()
        # elsewhere: another live process runs the turn; its entries are that process's to finish

    async def _run_alone(self, entry: QueueEntry) -> str:
        """Run a turn whose next attempt is its last once it would run alone here (its entry kept alive meanwhile):
        no new turn is taken from now until it has run, so no other turn dies with it; turns waiting likewise run
        one after the other."""
        self._isolating.append(entry.turn_id)
        try:
            while True:
                async with self._turn_ended:
                    await self._turn_ended.wait_for(lambda: self._alone(entry.turn_id))
                outcome = await self._turns.run_queued(entry)
                if outcome != "isolate":
                    return outcome
                await asyncio.sleep(min(self.settings.lease_s / 4, 1.0))  # not alone after all: look again soon
        finally:
            self._isolating.remove(entry.turn_id)
            self._slot_freed.set()

    def _alone(self, turn_id: str) -> bool:
        """Whether ``turn_id`` is the first turn waiting to run alone and no other turn runs here."""
        return self._isolating[0] == turn_id and all(other in self._isolating for other in self._running)

    async def _settle(self, running: _RunningTurn) -> None:
        """Acknowledge every entry of a turn that has ended, including one read for it while acknowledging."""
        settled = 0
        while settled < len(entries := running.entries()):
            held = entries[settled]
            settled += 1
            try:
                await self._queue.done(held)
            except Exception:
                log.warning("could not acknowledge entry %s of turn %s", held.entry_id, held.turn_id, exc_info=True)

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)
            held = [entry.entry_id for turn in self._running.values() for entry in turn.entries()]
            try:
                await self._queue.keep_alive(self.name, held)
            except Exception:
                log.warning("could not renew the queue entries of the running turns", exc_info=True)

    async def _reconcile(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_s / 2)
            try:
                await self.requeue_orphans()
            except Exception:
                log.warning("could not look for turns the queue lost; retrying", exc_info=True)

    async def requeue_orphans(self) -> int:
        """Queue again the unfinished turns no live process owns and the queue does not hold, except those this
        worker runs; return how many."""
        parts = self.services.distributed
        assert parts is not None
        requeued = 0
        for turn in await parts.claims.orphaned_turns(older_than_s=self.settings.lease_s):
            if turn.turn_id in self._running or await self._queue.is_queued(turn.turn_id):
                continue
            log.warning("queueing turn %s again: it was %s and the queue had lost it", turn.turn_id, turn.state)
            if await self._queue.enqueue(turn.scope, turn.turn_id):
                self.metrics.turn_requeues.labels(tenant=turn.scope.tenant).inc()
                requeued += 1
        return requeued

    async def observe_queue(self) -> None:
        """Set the gauges a scrape of this worker reads from the shared queue (the oldest unfinished turn's age)."""
        age = await self._queue.oldest_age_s()
        self.metrics.oldest_unfinished_turn_age.set(age or 0.0)
