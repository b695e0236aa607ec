"""Keeping the garbage collector's full passes short on a serving host.

A full collection in CPython walks every tracked object it has not been told to ignore, and stops the
whole process while it does: on a host with hundreds of resident conversations that was 60 to 190 ms, every
few seconds under load (``bench/api_load.py --turns 12``; p99 first-delta 80 to 130 ms, almost all of it these
pauses). Almost nothing survives to a full pass that is garbage: the passes collected nothing in 14 of 17
cases. So :class:`HeapGovernor`:

* freezes the startup heap once the host has started (modules, models, bundles);
* after every collection, the young ones included, freezes what survived it (``gc.freeze``): an object that
  lived through a pass is a resident conversation's state or a turn still in flight, not a cycle about to be
  dropped, and walking it again in every later pass was the collector's whole cost. Under ``bench/api_load.py``
  (200 turns in flight) the young passes found about 10 cyclic-garbage objects per turn and promoted about 700
  live ones; freezing after full passes only, the collector took 0.86 ms per turn, over a third of it in full
  passes that walked the in-flight turns again; freezing after generation-1 passes too, 0.46-0.59 ms (timed by
  ``gc.callbacks``, 200 users), half of it in generation-1 passes that walked what the young passes had promoted,
  the longest pause 15-17 ms; freezing after young passes too (issue 39), 0.20-0.24 ms, no generation-1 pass left
  to run and the longest pause 5-10 ms. Freezing earlier leaks next to nothing: unfreezing and collecting after
  a 10 s window at saturation (about 1,200 turns) found 1,452 objects freezing after generation-1 passes and
  1,591 freezing after every pass (1.3 a turn either way), the process's RSS 162 MiB in both. (Collecting the
  young generation less often instead, at 2,000 allocations for 700, saved a third of the collector's time at 50
  users but cost a quarter more at 200, with pauses of 36-46 ms: more of a turn is alive, and walked, per pass.);
* sweeps rarely (:data:`SWEEP_INTERVAL_S`): unfreezes everything and collects, so cyclic garbage formed by
  frozen objects (which reference counting alone cannot free) is reclaimed. Measured under full load: such
  garbage forms at ≈60 objects/s, and a sweep pauses for ≈0.4 s — once an hour.

Frozen objects are still freed by reference counting the moment nothing refers to them; freezing only
hides them from the cycle collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["CHECK_INTERVAL_S", "FREEZE_AFTER_GENERATION", "SWEEP_INTERVAL_S", "HeapGovernor"]

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
"""How often the governor looks whether a full collection has run."""

SWEEP_INTERVAL_S = 3600.0
"""How often everything is unfrozen and collected once."""


FREEZE_AFTER_GENERATION = 0
"""Survivors of a collection of this generation or an older one are frozen at once (see the module's text): 0,
every collection's."""


def full_collections() -> int:
    """How many full (generation 2) collections this process has run."""
    return int(gc.get_stats()[2]["collections"])


class HeapGovernor:
    """Freezes what survives every collection; sweeps everything now and then (see the module's
    text). ``freeze_after_generation`` is the youngest generation whose passes freeze their survivors."""

    def __init__(
        self,
        *,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
        freeze_after_generation: int = FREEZE_AFTER_GENERATION,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._sweep_interval_s = sweep_interval_s
        self._freeze_after_generation = freeze_after_generation
        self._clock = clock
        self._last_sweep = clock()
        self._seen = full_collections()
        self._on_collection: Callable[[str, dict[str, Any]], None] | None = None

    def start(self) -> None:
        """Freeze the startup heap (after one full collection, so only live objects are frozen), then freeze
        the survivors of every collection of ``freeze_after_generation`` or older (every collection, by
        default) as it ends, for as long as this governor lives (or until :meth:`stop`)."""
        gc.collect()
        gc.freeze()
        self._seen = full_collections()
        self._last_sweep = self._clock()
        if self._on_collection is None:
            self._on_collection = _freezer(weakref.ref(self), self._freeze_after_generation)
            gc.callbacks.append(self._on_collection)

    def stop(self) -> None:
        """Stop freezing after collections (what is frozen stays frozen)."""
        if self._on_collection is not None:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._on_collection)
            self._on_collection = None

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


def _freezer(governor: weakref.ref[HeapGovernor], generation: int) -> Callable[[str, dict[str, Any]], None]:
    """A ``gc.callbacks`` entry that freezes after each collection of ``generation`` or older; it removes
    itself once ``governor`` is gone (a governor nobody holds governs nothing)."""

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] < generation:
            return
        if governor() is None:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(on_collection)
            return
        gc.freeze()

    return on_collection
