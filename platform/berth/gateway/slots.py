"""Worker backpressure: how many turns this process runs at once, and how many may wait for a slot.

``gateway.yaml``'s ``backpressure`` gives ``max_inflight_turns_per_worker`` (slots) and ``queue_max`` (turns
admitted to wait for one). A turn is *reserved* when it is admitted, synchronously, so admission cannot
over-commit; it takes a slot when it runs, first come first served; and it gives both back exactly once
when its task ends, however it ends (a task cancelled before it ever ran included).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["SlotReservation", "TurnSlots"]


class TurnSlots:
    """Running and waiting turns of one worker."""

    def __init__(self, capacity: int, queue_max: int) -> None:
        if capacity <= 0 or queue_max < 0:
            raise ValueError(f"need capacity > 0 and queue_max >= 0, not {capacity} and {queue_max}")
        self.capacity = capacity
        self.queue_max = queue_max
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._reserved = 0

    @property
    def queued(self) -> int:
        """Turns admitted that have not taken a slot yet."""
        return self._reserved - self.running

    def turns_ahead(self) -> int | None:
        """How many turns a turn taking a slot now would wait behind (None: a slot is free for it)."""
        if self.running < self.capacity and not self._waiting:
            return None
        return len(self._waiting)

    def resize(self, capacity: int, queue_max: int) -> None:
        """Apply new limits (a descriptor reload); more capacity hands free slots to waiting turns at once.

        Less capacity takes nothing from running turns: new ones wait until enough of them have finished.
        """
        if capacity <= 0 or queue_max < 0:
            raise ValueError(f"need capacity > 0 and queue_max >= 0, not {capacity} and {queue_max}")
        self.capacity = capacity
        self.queue_max = queue_max
        while self.running < self.capacity and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self.running += 1
                waiter.set_result(None)

    def reserve(self) -> SlotReservation | None:
        """Admit one more turn, or None when the slots and the queue are all taken."""
        if self._reserved >= self.capacity + self.queue_max:
            return None
        self._reserved += 1
        return SlotReservation(self)

    async def _take(self) -> None:
        if self.running < self.capacity and not self._waiting:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter  # the slot is handed over by _give: running already counts this turn
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give()  # handed a slot and cancelled in the same step: pass it on
            else:
                self._waiting.remove(waiter)
            raise

    def _give(self) -> None:
        while self._waiting and self.running <= self.capacity:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


class SlotReservation:
    """One admitted turn's claim: :meth:`run` waits for its slot, :meth:`release` gives everything back."""

    def __init__(self, slots: TurnSlots) -> None:
        self._slots = slots
        self._running = False
        self._released = False

    def turns_ahead(self) -> int | None:
        """How many admitted turns would run before this one (None: it would run at once)."""
        return self._slots.turns_ahead()

    async def run(self) -> None:
        """Wait until a slot is free and take it."""
        if self._released or self._running:
            raise RuntimeError("this reservation has already run or been released")
        await self._slots._take()
        self._running = True

    def release(self) -> None:
        """Give back the slot (if taken) and the reservation; later calls do nothing."""
        if self._released:
            return
        self._released = True
        if self._running:
            self._slots._give()
        self._slots._reserved -= 1
