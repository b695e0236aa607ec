"""The heap governor: survivors of full collections are frozen; a sweep reclaims cycles among frozen objects."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from berth.api.heap import HeapGovernor


class Node:
    """An object that can form a reference cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def unfrozen_afterwards() -> Iterator[None]:
    """The governor freezes this process's heap: give the other tests their collector back."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def cycle() -> weakref.ref[Node]:
    """A two-node cycle nothing else refers to (only reference counting cannot free it)."""
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


def test_start_freezes_what_is_alive() -> None:
    governor = HeapGovernor(clock=Clock())
    governor.start()
    assert gc.get_freeze_count() > 1000


def test_what_survives_a_full_collection_is_frozen_and_nothing_happens_without_one() -> None:
    governor = HeapGovernor(clock=Clock())
    governor.start()
    assert governor.step() is None
    before = gc.get_freeze_count()  # read first: a governor left running by another test may freeze them early
    survivor = [Node() for _ in range(100)]
    gc.collect()
    assert governor.step() == "froze"
    assert gc.get_freeze_count() >= before + 100
    assert governor.step() is None
    del survivor


def test_a_sweep_reclaims_a_frozen_cycle_that_a_full_collection_cannot() -> None:
    clock = Clock()
    governor = HeapGovernor(sweep_interval_s=3600, clock=clock)
    governor.start()
    watched = cycle()
    alive = watched()
    gc.collect()
    assert governor.step() == "froze"  # the cycle is frozen while alive...
    del alive  # ... and then its last outside reference goes
    gc.collect()
    assert watched() is not None, "frozen: a full collection does not see it"

    assert governor.step() == "froze"  # that collection ran: the governor freezes its survivors again

    clock.now += 3599
    assert governor.step() is None
    clock.now += 1
    assert governor.step() == "swept"
    assert watched() is None
    assert gc.get_freeze_count() > 1000, "what is alive is frozen again"


def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    governor = HeapGovernor(clock=Clock())
    node = Node()
    watched = weakref.ref(node)
    governor.start()
    del node
    assert watched() is None


@pytest.mark.parametrize("generation", [0, 1, 2])
def test_survivors_of_every_collection_are_frozen_as_it_ends(generation: int) -> None:
    governor = HeapGovernor(clock=Clock())
    governor.start()
    try:
        gc.collect()  # the young generation's count from 0: making the survivors does not set off a pass of its own
        survivors = [Node() for _ in range(100)]
        before = gc.get_freeze_count()
        gc.collect(generation)
        assert gc.get_freeze_count() >= before + 100, "frozen by the collection itself, before any step"
        del survivors
    finally:
        governor.stop()


@pytest.mark.parametrize(("generation", "frozen"), [(0, False), (1, True), (2, True)])
def test_a_governor_can_leave_the_young_passes_survivors_alone(generation: int, frozen: bool) -> None:
    governor = HeapGovernor(clock=Clock(), freeze_after_generation=1)
    governor.start()
    try:
        gc.collect()  # the young generation's count from 0: making the survivors does not set off a pass of its own
        survivors = [Node() for _ in range(100)]
        before = gc.get_freeze_count()
        gc.collect(generation)
        assert (gc.get_freeze_count() >= before + 100) is frozen, "frozen by the collection itself, before any step"
        del survivors
    finally:
        governor.stop()


def test_a_stopped_or_dropped_governor_freezes_nothing_more() -> None:
    for retire in ("stop", "drop"):
        governor = HeapGovernor(clock=Clock())
        governor.start()
        if retire == "stop":
            governor.stop()
        del governor
        gc.unfreeze()
        survivor = [Node() for _ in range(100)]
        gc.collect(1)
        assert gc.get_freeze_count() == 0, f"nothing is frozen once the governor is gone ({retire})"
        del survivor
