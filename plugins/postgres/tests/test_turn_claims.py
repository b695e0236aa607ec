"""Queued mode of the PostgreSQL store: turns the queue owns until a worker claims them, one unfinished turn per
conversation, take-over of a dead worker's turns, and writes fenced by the owner."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from berth_postgres.conversations import QUEUE_OWNER, PostgresConversationStore
from storage_builders import T0, head, tool_round

from berth.runtime.persistence import block_record
from berth.storage.claims import POISONED, ClaimedTurn, ParkedTurn
from berth.storage.conversations import BlockRecord, StorageError
from berth.storage.scope import ConversationScope

pytestmark = pytest.mark.postgres


def records(blocks: list) -> tuple[BlockRecord, ...]:  # type: ignore[type-arg]
    return tuple(block_record(block) for block in blocks)


@pytest.fixture
async def queued(migrated: str) -> AsyncIterator[PostgresConversationStore]:
    async with PostgresConversationStore(migrated, queued=True) as store:
        yield store


async def accept(store: PostgresConversationStore, scope: ConversationScope, turn_id: str) -> None:
    await store.accept_queued_turn(
        scope, turn_id, accepted_at=T0, head=records(head(turn_id)[1:]), request=f"request of {turn_id}".encode()
    )


async def test_an_accepted_turn_belongs_to_the_queue_and_a_second_one_waits(
    queued: PostgresConversationStore, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    with pytest.raises(StorageError) as busy:
        await accept(queued, scope, "turn_2")
    assert busy.value.code == "turn_in_progress"
    assert [t.turn_id for t in await queued.orphaned_turns(older_than_s=0)] == ["turn_1"]
    other = scope.owner.conversation("conv-2")  # another conversation is not held up
    await accept(queued, other, "turn_3")
    assert {t.turn_id for t in await queued.orphaned_turns(older_than_s=0)} == {"turn_1", "turn_3"}
    assert QUEUE_OWNER == 0


async def test_a_claimed_turn_is_the_claimers_until_it_dies_then_another_takes_it_over_with_its_log(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    first = PostgresConversationStore(migrated, queued=True)
    await first.open()
    claimed = await first.claim_turn(scope, "turn_1")
    assert claimed is not None and claimed.request == b"request of turn_1"
    handle = first.conversation(scope)
    await handle.begin_turn("turn_1", started_at=T0, generation="g1", head=records(head("turn_1")))
    await handle.append_round("turn_1", records(tool_round("turn_1", "c1")))
    with pytest.raises(StorageError) as owned:
        await queued.claim_turn(scope, "turn_1")
    assert owned.value.code == "turn_owned"
    assert await queued.orphaned_turns(older_than_s=0) == ()  # its owner lives
    await first.aclose()  # the worker is gone (its connections with it)
    (orphan,) = await queued.orphaned_turns(older_than_s=0)
    assert (orphan.turn_id, orphan.state) == ("turn_1", "running")
    taken = await queued.claim_turn(scope, "turn_1")
    assert taken is not None
    assert [entry.index for entry in taken.log.rounds] == [0, 1]
    assert [r.path for r in taken.log.rounds[1].blocks][1:] == ["tc:turn_1.c1.call", "tc:turn_1.c1.result"]
    # the turn goes on after its last round, and nothing marked it interrupted meanwhile
    assert await queued.conversation(scope).append_round("turn_1", records(tool_round("turn_1", "c2"))) == 2
    assert [t.state for t in (await queued.conversation(scope).load()).turns] == ["running"]


async def test_a_worker_whose_turn_was_taken_over_can_no_longer_write_it(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    async with PostgresConversationStore(migrated, queued=True) as first:
        await first.claim_turn(scope, "turn_1")
        await first.conversation(scope).begin_turn(
            "turn_1", started_at=T0, generation=None, head=records(head("turn_1"))
        )
        # its owner lock was lost for a moment (a dropped connection) and another worker took the turn over:
        # the turn now names that worker as its owner
        connection = await asyncpg.connect(migrated)
        try:
            await connection.execute("UPDATE berth_turns SET owner=$1 WHERE turn_id='turn_1'", queued.owner_key)
        finally:
            await connection.close()
        with pytest.raises(StorageError) as fenced:
            await first.conversation(scope).append_round("turn_1", records(tool_round("turn_1", "c1")))
        assert fenced.value.code == "turn_owned"


async def test_a_claim_of_an_ended_turn_finds_nothing_to_run(
    queued: PostgresConversationStore, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    await queued.conversation(scope).end_unstarted_turn("turn_1", state="cancelled", ended_at=T0)
    assert await queued.claim_turn(scope, "turn_1") is None
    with pytest.raises(StorageError) as missing:
        await queued.claim_turn(scope, "turn_9")
    assert missing.value.code == "turn_not_found"


async def test_each_new_owner_is_one_attempt_and_the_claim_after_the_last_parks_the_turn(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    for attempt in (1, 2, 3):  # a worker claims it, begins it and dies, three times
        async with PostgresConversationStore(migrated, queued=True) as worker:
            claimed = await worker.claim_turn(scope, "turn_1", max_attempts=3)
            assert isinstance(claimed, ClaimedTurn) and claimed.attempt == attempt
            again = await worker.claim_turn(scope, "turn_1", max_attempts=3)  # its own entry read again
            assert isinstance(again, ClaimedTurn) and again.attempt == attempt
    parked = await queued.claim_turn(scope, "turn_1", max_attempts=3)
    assert isinstance(parked, ParkedTurn) and parked.attempts == 3
    assert "3 times" in parked.error and "its worker stopped each time" in parked.error
    (turn,) = (await queued.conversation(scope).load()).turns
    assert (turn.state, turn.exit_reason, turn.attempts, turn.error) == ("failed", POISONED, 3, parked.error)
    assert await queued.claim_turn(scope, "turn_1", max_attempts=3) is None  # parked once, never run again
    await accept(queued, scope, "turn_2")  # the conversation takes new turns again


async def test_a_released_turn_goes_back_to_the_queue_with_its_error_and_counts_its_attempts(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    async with PostgresConversationStore(migrated, queued=True) as worker:
        await worker.claim_turn(scope, "turn_1", max_attempts=2)
        assert await queued.release_turn(scope, "turn_1", error="not mine") is False  # only its owner releases it
        assert await worker.release_turn(scope, "turn_1", error="TimeoutError: the model did not answer") is True
        assert [t.turn_id for t in await queued.orphaned_turns(older_than_s=0)] == ["turn_1"]  # the worker lives
        claimed = await worker.claim_turn(scope, "turn_1", max_attempts=2)  # released: its next claim is attempt 2
        assert isinstance(claimed, ClaimedTurn) and claimed.attempt == 2
        await worker.release_turn(scope, "turn_1", error="TimeoutError: again")
    parked = await queued.claim_turn(scope, "turn_1", max_attempts=2)
    assert isinstance(parked, ParkedTurn)
    assert parked.error.endswith("(its last attempt ended with: TimeoutError: again); it will not be run again")


async def test_an_operator_ends_or_retries_a_turn_whoever_owns_it(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    async with PostgresConversationStore(migrated, queued=True) as worker:
        await worker.claim_turn(scope, "turn_1", max_attempts=3)
        await worker.conversation(scope).begin_turn(
            "turn_1", started_at=T0, generation=None, head=records(head("turn_1"))
        )
        (listed,) = await queued.unfinished_turns()
        assert (listed.turn_id, listed.state, listed.attempts, listed.owner_alive) == ("turn_1", "running", 1, True)
        assert await queued.retry_turn(scope, "turn_1") is True
        (listed,) = await queued.unfinished_turns()
        assert (listed.attempts, listed.owner_alive) == (0, False)  # back to the queue, its attempts reset
        await worker.claim_turn(scope, "turn_1", max_attempts=3)
        assert await queued.end_turn(scope, "turn_1", state="failed", code="ended_by_operator", error="stuck") == 1
        with pytest.raises(StorageError) as refused:  # the worker that still runs it cannot write it any more
            await worker.conversation(scope).append_round("turn_1", records(tool_round("turn_1", "c1")))
        assert refused.value.code == "turn_not_running"
    assert await queued.end_turn(scope, "turn_1", state="failed", code="x", error="y") is None  # ended already
    assert await queued.unfinished_turns() == ()
    (turn,) = (await queued.conversation(scope).load()).turns
    assert (turn.state, turn.exit_reason, turn.error) == ("failed", "ended_by_operator", "stuck")


async def test_the_last_attempt_of_a_turn_that_died_before_is_only_for_an_idle_worker(
    queued: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await accept(queued, scope, "turn_1")
    for attempt in (1, 2):  # busy workers take its first attempts; each dies with it
        async with PostgresConversationStore(migrated, queued=True) as busy:
            claimed = await busy.claim_turn(scope, "turn_1", max_attempts=3, alone=False)
            assert isinstance(claimed, ClaimedTurn) and claimed.attempt == attempt
    async with PostgresConversationStore(migrated, queued=True) as busy:
        with pytest.raises(StorageError) as refused:  # its last attempt: not beside other turns
            await busy.claim_turn(scope, "turn_1", max_attempts=3, alone=False)
        assert refused.value.code == "turn_needs_isolation"
        (waiting,) = await queued.unfinished_turns()
        assert (waiting.attempts, waiting.owner_alive) == (2, False)  # the refusal changed nothing
        claimed = await busy.claim_turn(scope, "turn_1", max_attempts=3, alone=True)  # now it runs nothing else
        assert isinstance(claimed, ClaimedTurn) and claimed.attempt == 3
