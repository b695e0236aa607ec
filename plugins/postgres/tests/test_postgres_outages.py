"""PostgreSQL going away under running turns: the retry policy (backoff with jitter under a time budget, on a fake
clock), every connection terminated every 0.15 s during eight concurrent turns, and outages of the server
(through :class:`~berth_postgres.testing.PostgresProxy`, since the shared server cannot be stopped): a turn
waits through an outage shorter than the retry budget, and fails with a clear error after a longer one."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
import yaml
from berth_postgres.backend import create_distributed_storage
from berth_postgres.conversations import PostgresConversationStore
from berth_postgres.knowledge import create_knowledge_stores
from berth_postgres.migrations import PostgresUnavailableError
from berth_postgres.pool import StorePool
from berth_postgres.retrying import RetryPolicy, connection_lost
from berth_postgres.testing import PostgresProxy, ProxyCut, async_scratch_database
from pydantic import ValidationError
from storage_builders import T0, final, head, tool_round

from berth.config import Configuration
from berth.config.models.assembly import PostgresConfig
from berth.host.connections import DistributedConnections
from berth.runtime.persistence import TurnRecorder, restore_conversation
from berth.runtime.timeline import Timeline
from berth.storage.conversations import ConversationStore, StorageError
from berth.storage.scope import ConversationScope, OwnerScope

OWNER = OwnerScope(tenant="acme", project="support", user_id="ada")

# -- the retry policy, on a fake clock ---------------------------------------------------------------------------


class FakeClock:
    """A monotonic clock that only moves when the policy sleeps, or an attempt says it took time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Failing:
    """An attempt that raises ``error`` (each try taking ``took_s`` of the fake clock) until try number ``until``,
    then returns that number; it records each try's number and the budget it was told was left."""

    def __init__(self, clock: FakeClock, error: BaseException, *, took_s: float = 0.01, until: int | None = None):
        self.clock, self.error, self.took_s, self.until = clock, error, took_s, until
        self.tries: list[tuple[int, float]] = []

    async def __call__(self, retry: int, remaining_s: float) -> int:
        self.tries.append((retry, remaining_s))
        self.clock.now += self.took_s
        if self.until is not None and retry >= self.until:
            return retry
        raise self.error


async def test_the_policy_retries_until_the_budget_is_spent_then_fails_with_a_clear_error() -> None:
    clock = FakeClock()
    attempt = Failing(clock, ConnectionRefusedError(111, "Connection refused"))
    policy = RetryPolicy(budget_s=10.0)
    with pytest.raises(PostgresUnavailableError) as raised:
        await policy.run(attempt, clock=clock, sleep=clock.sleep, draw=random.Random(1).random)
    assert 10.0 <= clock.now <= 10.0 + 0.01 + 1e-9, "the last try starts within the budget, none after it"
    assert "retry budget 10 s" in str(raised.value)
    assert "ConnectionRefusedError" in str(raised.value)
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
    tries = attempt.tries
    assert [retry for retry, _ in tries] == list(range(len(tries)))
    assert len(tries) > 10, "about 2 s apart at most: many tries in 10 s"
    remaining = [left for _, left in tries]
    assert remaining[0] == 10.0 and remaining == sorted(remaining, reverse=True)


async def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(budget_s=1000.0, first_delay_s=0.05, max_delay_s=2.0)
    assert [policy.cap(n) for n in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert policy.cap(10_000) == 2.0
    clock = FakeClock()
    attempt = Failing(clock, ConnectionResetError(), until=8)
    assert await policy.run(attempt, clock=clock, sleep=clock.sleep, draw=lambda: 0.5) == 8
    assert clock.sleeps == [0.5 * policy.cap(n) for n in range(8)], "pauses grow with the retries"


async def test_the_jitter_spreads_each_pause_below_its_cap() -> None:
    policy = RetryPolicy(budget_s=1000.0)
    draw = random.Random(33).random
    for retry in range(12):
        pauses = [policy.delay(retry, draw) for _ in range(200)]
        assert all(0.0 <= pause < policy.cap(retry) for pause in pauses)
        assert max(pauses) - min(pauses) > policy.cap(retry) / 2, "full jitter: spread over the whole range"


async def test_a_failing_operation_that_comes_back_returns_and_logs_twice(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    attempt = Failing(clock, asyncpg.AdminShutdownError("terminating connection"), until=5)
    with caplog.at_level(logging.DEBUG, logger="berth_postgres.retrying"):
        assert await RetryPolicy().run(attempt, clock=clock, sleep=clock.sleep) == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "retrying the operation" in warnings[0] and "AdminShutdownError" in warnings[0]
    assert "succeeded after 5 retries" in warnings[1]


@pytest.mark.parametrize(
    "error",
    [
        StorageError("conflicting_commit", "the conversation changed"),
        asyncpg.UniqueViolationError("duplicate key value violates unique constraint"),
        asyncpg.exceptions.DataError("invalid input for query argument $1"),  # client-side: an InterfaceError
        ValueError("not a connection problem"),
    ],
)
async def test_an_error_that_is_not_about_the_connection_is_never_retried(error: Exception) -> None:
    clock = FakeClock()
    attempt = Failing(clock, error)
    assert not connection_lost(error)
    with pytest.raises(type(error)):
        await RetryPolicy().run(attempt, clock=clock, sleep=clock.sleep)
    assert len(attempt.tries) == 1 and clock.sleeps == []


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        OSError("Multiple exceptions: [Errno 111] Connect call failed"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.InterfaceError("cannot call Transaction.__aexit__(): the underlying connection is closed"),
    ],
)
def test_what_the_server_being_away_raises_counts_as_a_lost_connection(error: Exception) -> None:
    assert connection_lost(error)


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RetryPolicy(budget_s=0)
    with pytest.raises(ValidationError):
        PostgresConfig.model_validate({"dsn": "secret:pg_dsn", "retry_budget_s": 0})
    assert PostgresConfig.model_validate({"dsn": "secret:pg_dsn"}).retry_budget_s == 60.0


# -- turns against the real server -------------------------------------------------------------------------------


async def run_turn(store: ConversationStore, scope: ConversationScope, turn_id: str, *, rounds: int = 2) -> Timeline:
    """One whole turn through the recorder, the way the loop writes it: load, begin, a round at a time, commit (on
    queued PostgreSQL, accepted and claimed first, as the API and a worker do)."""
    handle = store.conversation(scope)
    if getattr(store, "queued", False):
        await handle.accept_turn(turn_id, accepted_at=T0, head=())
        await store.claim_turn(scope, turn_id)  # type: ignore[attr-defined]
    restored = await restore_conversation(handle, now=T0)
    timeline, pool = restored.timeline, restored.sources
    recorder = TurnRecorder(handle, turn_id, base_version=restored.version, sources=pool, stored=restored.stored)
    blocks = head(turn_id)
    timeline.contribute(*blocks)
    await recorder.begin(blocks, started_at=T0, generation="g1")
    for n in range(1, rounds + 1):
        round_blocks = tool_round(turn_id, f"c{n}")
        timeline.contribute(*round_blocks)
        await recorder.record_round(round_blocks, sources=pool)
    answer = final(turn_id)
    timeline.contribute(*answer)
    await recorder.commit(timeline, sources=pool, state="completed", ended_at=T0, final_round=answer)
    return timeline


async def assert_completed(store: PostgresConversationStore, scope: ConversationScope, turns: list[str]) -> None:
    """Each of ``turns`` is committed ``completed`` in ``scope`` once, in order, with its whole log."""
    snapshot = await store.conversation(scope).load()
    assert [(t.turn_id, t.state) for t in snapshot.turns] == [(turn_id, "completed") for turn_id in turns]
    assert snapshot.version == len(turns)
    for turn_id in turns:
        log = await store.conversation(scope).read_turn_log(turn_id)
        assert [entry.index for entry in log.rounds] == [0, 1, 2, 3], turn_id


@pytest.fixture
async def dsn() -> AsyncIterator[str]:
    """A migrated scratch database of the test's own."""
    async with async_scratch_database() as scratch:
        yield scratch


@pytest.mark.postgres
async def test_eight_turns_on_one_store_survive_every_connection_terminated_every_150_ms(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="berth_postgres")
    async with PostgresConversationStore(dsn, pool_max=10, queued=True) as store:
        stop = asyncio.Event()
        terminated = 0

        async def terminate_every_connection() -> None:  # for 3 s, every 0.15 s
            nonlocal terminated
            admin = await asyncpg.connect(dsn)
            try:
                for _ in range(20):
                    await asyncio.sleep(0.15)
                    terminated += len(
                        await admin.fetch(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        )
                    )
            finally:
                stop.set()
                await admin.close()

        async def turns(n: int) -> list[str]:  # one conversation's turns, one after the other, until the end
            done: list[str] = []
            while not stop.is_set() or not done:
                turn_id = f"turn_{n}_{len(done)}"
                await run_turn(store, OWNER.conversation(f"conv-{n}"), turn_id)
                done.append(turn_id)
            return done

        chaos = asyncio.create_task(terminate_every_connection())
        outcomes = await asyncio.gather(*(turns(n) for n in range(8)), return_exceptions=True)
        await chaos
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        assert failures == [], failures
        assert terminated >= 40, "the store's connections were terminated again and again"
        assert "retrying the operation" in caplog.text
        for n, done in enumerate(outcomes):
            assert isinstance(done, list)
            await assert_completed(store, OWNER.conversation(f"conv-{n}"), done)


async def owner_lock_held(dsn: str, key: int) -> bool:
    """Whether some session holds the advisory lock ``key`` (tried for a transaction, so never kept)."""
    connection = await asyncpg.connect(dsn)
    try:
        async with connection.transaction():
            return not await connection.fetchval("SELECT pg_try_advisory_xact_lock($1)", key)
    finally:
        await connection.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("outage_s", "mode"),
    [(2.0, "refuse"), (2.0, "blackhole"), pytest.param(20.0, "refuse", marks=pytest.mark.fault)],
)
async def test_turns_wait_through_an_outage_shorter_than_the_budget(
    dsn: str, outage_s: float, mode: ProxyCut, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="berth_postgres")
    async with PostgresProxy(dsn) as proxy, PostgresConversationStore(proxy.dsn(dsn), queued=True) as store:
        side = StorePool(pool=store.pool)  # the meta store's and memory index's way: in_transaction
        scopes = [OWNER.conversation(f"conv-{n}") for n in range(8)]
        for scope in scopes:
            await run_turn(store, scope, "turn_1")
        loop = asyncio.get_running_loop()
        async with proxy.outage(outage_s, mode):
            cut_at = loop.time()
            running: list[asyncio.Task[object]] = [
                asyncio.create_task(run_turn(store, scope, "turn_2")) for scope in scopes
            ]
            running.append(asyncio.create_task(side.execute("SELECT 1")))
            await asyncio.sleep(outage_s / 2)
            assert not any(task.done() for task in running), "nothing gets through while PostgreSQL is away"
        restored_at = loop.time()
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        assert [o for o in outcomes if isinstance(o, BaseException)] == []
        assert restored_at - cut_at >= outage_s
        assert proxy.cuts >= 2, "the pool's connections and the owner lock's were ended"
        for scope in scopes:
            await assert_completed(store, scope, ["turn_1", "turn_2"])
        assert "retrying the operation" in caplog.text
        assert "succeeded after" in caplog.text
        deadline = time.monotonic() + 10
        while not await owner_lock_held(dsn, store.owner_key):  # taken again on a new connection
            assert time.monotonic() < deadline, "the owner lock was not taken again"
            await asyncio.sleep(0.05)


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
async def test_an_outage_longer_than_the_budget_fails_the_operation_after_about_the_budget(
    dsn: str, mode: ProxyCut
) -> None:
    budget = 1.5
    async with (
        PostgresProxy(dsn) as proxy,
        PostgresConversationStore(proxy.dsn(dsn), queued=True, retry_budget_s=budget) as store,
    ):
        scope = OWNER.conversation("conv-1")
        await run_turn(store, scope, "turn_1")
        await proxy.cut(mode)
        started = time.monotonic()
        with pytest.raises(PostgresUnavailableError, match=r"retry budget 1\.5 s") as raised:
            await store.conversation(scope).load()
        took = time.monotonic() - started
        assert budget <= took < budget + 2.5, took
        assert connection_lost(raised.value.__cause__)  # type: ignore[arg-type]
        await proxy.restore()
        await run_turn(store, scope, "turn_2")  # the store works again once PostgreSQL is back
        await assert_completed(store, scope, ["turn_1", "turn_2"])


@pytest.mark.postgres
async def test_the_proxy_forwards_then_refuses_and_blackholes_until_restored(dsn: str) -> None:
    async with PostgresProxy(dsn) as proxy:
        through = proxy.dsn(dsn)
        assert through != dsn and f":{proxy.port}/" in through
        connection = await asyncpg.connect(through)
        assert await connection.fetchval("SELECT 1") == 1
        assert proxy.open_connections == 1
        await proxy.cut("refuse")
        with pytest.raises((asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, OSError)):
            await connection.fetchval("SELECT 1")
        with pytest.raises(ConnectionRefusedError):  # nothing listens: refused at once
            await asyncpg.connect(through, timeout=5)
        await proxy.restore()
        await proxy.cut("blackhole")
        with pytest.raises(TimeoutError):  # accepted, never answered
            await asyncpg.connect(through, timeout=0.5)
        await proxy.restore()
        connection = await asyncpg.connect(through)
        try:
            assert await connection.fetchval("SELECT 2") == 2
        finally:
            await connection.close()
        assert proxy.cuts == 1 and proxy.accepted == 3


@pytest.mark.postgres
async def test_the_budget_of_the_descriptors_reaches_every_store_of_the_backend(dsn: str, tmp_path: Path) -> None:
    storage = {"kind": "distributed", "postgres": {"dsn": dsn, "retry_budget_s": 7.5}, "redis": {"url": "redis://x"}}
    assembly = {"platform": {"storage": storage}, "tenants": {"acme": {"projects": {"support": {}}}}}
    (tmp_path / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    connections = DistributedConnections.resolve(Configuration.load(tmp_path))
    assert connections.retry_budget_s == 7.5
    assert create_knowledge_stores(connections)._pool.retry.budget_s == 7.5
    backend = create_distributed_storage(connections)
    await backend.open()
    try:
        assert backend.conversations.retry.budget_s == 7.5
        for store in (backend.meta, backend.memory):
            assert store._pool.retry.budget_s == 7.5
    finally:
        await backend.aclose()


@pytest.mark.postgres
async def test_a_process_that_starts_while_postgres_is_away_waits_for_it(dsn: str) -> None:
    async with PostgresProxy(dsn) as proxy:
        await proxy.cut("refuse")
        connections = DistributedConnections(
            postgres_dsn=proxy.dsn(dsn),
            redis_url="redis://unused",
            artifacts=None,
            retry_budget_s=30,  # type: ignore[arg-type]
        )
        probe = create_distributed_storage(connections)
        with pytest.raises(ConnectionRefusedError):  # a probe answers now
            await probe.open(wait=False)
        backend = create_distributed_storage(connections)
        opening = asyncio.create_task(backend.open())  # a worker starting now
        await asyncio.sleep(1.0)
        assert not opening.done()  # still waiting, not exited
        await proxy.restore()
        await asyncio.wait_for(opening, 20)
        try:
            assert (await backend.ping()).startswith("PostgreSQL")
        finally:
            await backend.aclose()
