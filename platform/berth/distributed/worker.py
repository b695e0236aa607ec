"""``berth worker``: a process that claims queued turns and runs them (distributed mode, SPEC §8).

A worker runs up to ``concurrency`` turns at once. Three loops share its event loop:

* **consume** — reads new entries of the turn queue for this consumer and runs each turn
  (:meth:`~berth.distributed.execution.QueuedTurnRunner.run_queued`); the entry is acknowledged once the
  turn is committed;
* **keep alive** — every third of the lease, resets the idle time of the entries it runs, so no other
  worker takes them over while it lives;
* **reclaim** — takes over entries idle longer than the lease (their worker died: ``XAUTOCLAIM``) and
  queues again every unfinished turn that no live process owns and the queue no longer holds (a Redis
  restart lost it, or the API died between storing the turn and queueing it).

Who runs a turn is decided in PostgreSQL (the turn's owner and its advisory lock), so a reclaimed entry
whose turn is still run by a live worker is dropped, and a turn is resumed after its last logged round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass

from berth.api.services import HostServices
from berth.distributed.execution import QueuedTurnRunner
from berth.distributed.queue import QueueEntry

__all__ = ["TurnWorker", "WorkerSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker takes turns.

    :ivar concurrency: turns it runs at once.
    :ivar lease_s: how long an entry may go without a keep-alive before another worker takes it over.
    :ivar block_s: how long one read of the queue waits for a new entry.
    """

    concurrency: int = 8
    lease_s: float = 15.0
    block_s: float = 1.0


class TurnWorker:
    """Consumes the turn queue of ``services`` (opened, distributed) until :meth:`stop`."""

    def __init__(self, services: HostServices, settings: WorkerSettings | None = None, *, name: str | None = None):
        if services.distributed is None:
            raise RuntimeError("a turn worker needs distributed storage (platform.storage.kind: distributed)")
        self.services = services
        self.settings = settings or WorkerSettings()
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self._queue = services.distributed.queue
        self._turns = QueuedTurnRunner(services)
        self._running: dict[str, asyncio.Task[None]] = {}  # entry id → the task running its turn
        self._slots = asyncio.Semaphore(self.settings.concurrency)
        self._stopping = asyncio.Event()
        self.turns_run = 0

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

    async def run(self) -> None:
        """Take and run turns until :meth:`stop`; then let the running turns finish."""
        loops = [
            asyncio.create_task(self._consume(), name="worker consume"),
            asyncio.create_task(self._keep_alive(), name="worker keep-alive"),
            asyncio.create_task(self._reclaim(), name="worker reclaim"),
        ]
        try:
            await self._stopping.wait()
        finally:
            for task in loops:
                task.cancel()
            for task in loops:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self._running:
                await asyncio.wait(list(self._running.values()))

    async def _consume(self) -> None:
        block_ms = int(self.settings.block_s * 1000)
        while not self._stopping.is_set():
            await self._slots.acquire()
            self._slots.release()
            free = self.settings.concurrency - len(self._running)
            try:
                entries = await self._queue.read(self.name, max(free, 1), block_ms=block_ms)
            except Exception:
                log.warning("could not read the turn queue; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            for entry in entries:
                await self._start(entry)

    async def _start(self, entry: QueueEntry) -> None:
        if entry.entry_id in self._running:
            return
        await self._slots.acquire()
        task = asyncio.create_task(self._run_entry(entry), name=f"turn {entry.turn_id}")
        self._running[entry.entry_id] = task

    async def _run_entry(self, entry: QueueEntry) -> None:
        try:
            outcome = await self._turns.run_queued(entry)
            if outcome == "elsewhere":  # another live worker runs the turn: its entry is that worker's to finish
                return
            if outcome == "ran":
                self.turns_run += 1
            await self._queue.done(entry)
        except asyncio.CancelledError:
            raise
        except Exception:  # left pending: taken over after the lease, by this worker or another
            log.exception("queued turn %s could not be run", entry.turn_id)
        finally:
            self._running.pop(entry.entry_id, None)
            self._slots.release()

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)
            try:
                await self._queue.keep_alive(self.name, list(self._running))
            except Exception:
                log.warning("could not renew the queue entries of the running turns", exc_info=True)

    async def _reclaim(self) -> None:
        lease_ms = int(self.settings.lease_s * 1000)
        while True:
            await asyncio.sleep(self.settings.lease_s / 2)
            try:
                if len(self._running) < self.settings.concurrency:
                    for entry in await self._queue.reclaim(self.name, min_idle_ms=lease_ms):
                        log.warning("taking over turn %s: its worker stopped renewing it", entry.turn_id)
                        await self._start(entry)
                await self.requeue_orphans()
            except Exception:
                log.warning("could not reclaim turns; retrying", exc_info=True)

    async def requeue_orphans(self) -> int:
        """Queue again the unfinished turns no live process owns and the queue does not hold; return how many."""
        parts = self.services.distributed
        assert parts is not None
        requeued = 0
        for turn in await parts.claims.orphaned_turns(older_than_s=self.settings.lease_s):
            if not await self._queue.is_queued(turn.turn_id):
                log.warning("queueing turn %s again: it was %s and the queue had lost it", turn.turn_id, turn.state)
                await self._queue.enqueue(turn.scope, turn.turn_id)
                requeued += 1
        return requeued
