"""A worker's turn slots: capacity, the queue in front of it, first come first served, exactly-once release."""

from __future__ import annotations

import asyncio

import pytest

from berth.gateway.slots import SlotReservation, TurnSlots


async def started(reservation: SlotReservation) -> asyncio.Task[None]:
    """A task waiting for ``reservation``'s slot, run until it has a slot or waits for one."""
    task = asyncio.create_task(reservation.run())
    await asyncio.sleep(0)
    return task


def reserve(slots: TurnSlots) -> SlotReservation:
    reservation = slots.reserve()
    assert reservation is not None
    return reservation


async def test_admits_capacity_plus_queue_and_no_more() -> None:
    slots = TurnSlots(capacity=2, queue_max=1)
    held = [reserve(slots) for _ in range(3)]
    assert slots.reserve() is None
    tasks = [await started(r) for r in held]
    assert [t.done() for t in tasks] == [True, True, False]
    assert (slots.running, slots.queued) == (2, 1)

    held[0].release()
    await asyncio.sleep(0)
    assert tasks[2].done(), "the finished turn's slot went to the waiting one"
    assert (slots.running, slots.queued) == (2, 0)
    assert slots.reserve() is not None


async def test_a_turn_knows_how_many_wait_ahead_of_it() -> None:
    slots = TurnSlots(capacity=1, queue_max=3)
    first = reserve(slots)
    assert first.turns_ahead() is None, "a free slot: it runs at once"
    await first.run()
    second, third = reserve(slots), reserve(slots)
    assert second.turns_ahead() == 0
    waiting = await started(second)
    assert third.turns_ahead() == 1
    first.release()
    await waiting
    assert third.turns_ahead() == 0


async def test_waiting_turns_run_in_the_order_they_were_admitted() -> None:
    slots = TurnSlots(capacity=1, queue_max=5)
    first = reserve(slots)
    await first.run()
    order: list[int] = []
    waiting = [reserve(slots) for _ in range(4)]

    async def run(n: int) -> None:
        await waiting[n].run()
        order.append(n)
        waiting[n].release()

    tasks = [asyncio.create_task(run(n)) for n in (0, 1, 2, 3)]
    await asyncio.sleep(0)
    first.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3]
    assert (slots.running, slots.queued) == (0, 0)


async def test_a_turn_cancelled_while_waiting_gives_back_its_place() -> None:
    slots = TurnSlots(capacity=1, queue_max=2)
    running, waiting, behind = reserve(slots), reserve(slots), reserve(slots)
    await running.run()
    cancelled, next_up = await started(waiting), await started(behind)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    waiting.release()
    assert slots.queued == 1
    running.release()
    await asyncio.sleep(0)
    assert next_up.done()
    assert (slots.running, slots.queued) == (1, 0)


async def test_a_slot_handed_to_a_turn_cancelled_in_the_same_step_passes_on() -> None:
    slots = TurnSlots(capacity=1, queue_max=2)
    running, handed, behind = reserve(slots), reserve(slots), reserve(slots)
    await running.run()
    handed_task, behind_task = await started(handed), await started(behind)
    running.release()  # hands the slot to `handed` ...
    handed_task.cancel()  # ... which is cancelled before it could take it
    with pytest.raises(asyncio.CancelledError):
        await handed_task
    handed.release()
    await asyncio.sleep(0)
    assert behind_task.done()
    assert slots.running == 1


async def test_release_is_idempotent_and_a_reservation_runs_once() -> None:
    slots = TurnSlots(capacity=1, queue_max=0)
    reservation = reserve(slots)
    await reservation.run()
    with pytest.raises(RuntimeError, match="already"):
        await reservation.run()
    reservation.release()
    reservation.release()
    assert (slots.running, slots.queued) == (0, 0)
    assert slots.reserve() is not None


async def test_more_capacity_starts_waiting_turns_and_less_stops_none() -> None:
    slots = TurnSlots(capacity=1, queue_max=3)
    held = [reserve(slots) for _ in range(3)]
    tasks = [await started(r) for r in held]
    assert [t.done() for t in tasks] == [True, False, False]
    slots.resize(3, 3)
    await asyncio.sleep(0)
    assert all(t.done() for t in tasks)

    slots.resize(1, 3)
    assert slots.running == 3, "running turns keep their slots"
    late = reserve(slots)
    late_task = await started(late)
    held[0].release()
    held[1].release()
    await asyncio.sleep(0)
    assert not late_task.done(), "one turn still runs: the single slot is not free yet"
    held[2].release()
    await asyncio.sleep(0)
    assert late_task.done()


@pytest.mark.parametrize(("capacity", "queue_max"), [(0, 1), (1, -1)])
def test_impossible_limits_are_refused(capacity: int, queue_max: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        TurnSlots(capacity, queue_max)
