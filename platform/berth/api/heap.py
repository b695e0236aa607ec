"""Keeping the garbage collector's full passes short on a serving host.

A full collection in CPython walks every tracked object it has not been told to ignore, and stops the
whole process while it does: on a host with hundreds of resident conversations that was 60 to 190 ms, every
few seconds under load (``bench/api_load.py --turns 12``; p99 first-delta 80 to 130 ms, almost all of it these
pauses). Almost nothing survives to a full pass that is garbage: the passes collected nothing in 14 of 17
cases. So :class:`HeapGovernor`:

* freezes the startup heap once the host has started (modules, models, bundles);
* after every full collection, freezes what survived it (``gc.freeze``): the next full pass walks only what
  is newer, so its pause stays proportional to the churn since the last one, not to the resident state;
* sweeps rarely (:data:`SWEEP_INTERVAL_S`): unfreezes everything and collects, so cyclic garbage formed by
  frozen objects (which reference counting alone cannot free) is reclaimed. Measured under full load: such
  garbage forms at ≈60 objects/s, and a sweep pauses for ≈0.4 s — once an hour.

Frozen objects are still freed by reference counting the moment nothing refers to them; freezing only
hides them from the cycle collector.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

__all__ = ["CHECK_INTERVAL_S", "SWEEP_INTERVAL_S", "HeapGovernor"]

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
"""How often the governor looks whether a full collection has run."""

SWEEP_INTERVAL_S = 3600.0
"""How often everything is unfrozen and collected once."""


def full_collections() -> int:
    """How many full (generation 2) collections this process has run."""
    return int(gc.get_stats()[2]["collections"])


class HeapGovernor:
    """Freezes what survives full collections; sweeps everything now and then (see the module's text)."""

    def __init__(self, *, sweep_interval_s: float = SWEEP_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self._sweep_interval_s = sweep_interval_s
        self._clock = clock
        self._last_sweep = clock()
        self._seen = full_collections()

    def start(self) -> None:
        """Freeze the startup heap (after one full collection, so only live objects are frozen)."""
        gc.collect()
        gc.freeze()
        self._seen = full_collections()
        self._last_sweep = self._clock()

    def step(self) -> str | None:
        """Do what is due: ``"swept"``, ``"froze"`` (a full collection ran since the last step), or None."""
        if self._clock() - self._last_sweep >= self._sweep_interval_s:
            started = time.perf_counter()
            frozen = gc.get_freeze_count()
            gc.unfreeze()
            collected = gc.collect()
            gc.freeze()
            log.info(
                "heap sweep: %d objects collected of %d frozen in %.0f ms",
                collected,
                frozen,
                (time.perf_counter() - started) * 1000,
            )
            self._seen = full_collections()
            self._last_sweep = self._clock()
            return "swept"
        seen = full_collections()
        if seen != self._seen:
            self._seen = seen
            gc.freeze()
            return "froze"
        return None

    async def run(self, check_interval_s: float = CHECK_INTERVAL_S) -> None:
        """Step every ``check_interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(check_interval_s)
            self.step()
