"""The conversation store contract, run on both storage kinds (the ``store`` fixture: PostgreSQL and SQLite), plus
what only the PostgreSQL store has (``pg_store``): transactions under dropped connections, concurrent commits
and owners that are gone."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from berth_postgres.conversations import PostgresConversationStore
from berth_postgres.memory import PostgresMemoryIndex
from berth_postgres.testing import PostgresProxy
from storage_builders import T0, final, head, tool_round

from berth.config.errors import ConfigError
from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.default_plugins.storage.sqlite_memory import SqliteMemoryIndex
from berth.runtime.live import LiveEvent, LiveInbox
from berth.runtime.persistence import StoredTimeline, TurnRecorder, block_record, restore_conversation
from berth.runtime.sources import Source, SourceRow, SourcesPool
from berth.runtime.timeline import Timeline
from berth.storage.conversations import (
    ArtifactWrite,
    BlockRecord,
    ConversationStore,
    LoggedBlock,
    StorageError,
    TimelineChange,
    TurnCommit,
    TurnUsage,
)
from berth.storage.memory import MemoryEntry, MemoryFilter, MemoryIndex
from berth.storage.scope import ConversationScope, OwnerScope

pytestmark = pytest.mark.postgres

NO_USAGE = TurnUsage()


async def run_turn(
    store: ConversationStore,
    scope: ConversationScope,
    turn_id: str,
    *,
    rounds: int = 2,
    sources: tuple[Source, ...] = (),
    artifacts: tuple[ArtifactWrite, ...] = (),
    usage: TurnUsage = NO_USAGE,
    exit_reason: str | None = None,
) -> Timeline:
    """Run one whole turn through the recorder, the way the loop does, and return the timeline."""
    handle = store.conversation(scope)
    restored = await restore_conversation(handle, now=T0)
    timeline, pool = restored.timeline, restored.sources
    recorder = TurnRecorder(handle, turn_id, base_version=restored.version, sources=pool, stored=restored.stored)
    blocks = head(turn_id)
    timeline.contribute(*blocks)
    await recorder.begin(blocks, started_at=T0, generation="g1")
    for n in range(1, rounds + 1):
        round_blocks = tool_round(turn_id, f"c{n}")
        timeline.contribute(*round_blocks)
        pool = pool.merge(sources).pool
        await recorder.record_round(round_blocks, sources=pool)
    answer = final(turn_id)
    timeline.contribute(*answer)
    await recorder.commit(
        timeline,
        sources=pool,
        state="completed",
        ended_at=T0,
        final_round=answer,
        artifacts=artifacts,
        usage=usage,
        exit_reason=exit_reason,
    )
    return timeline


def records(blocks: list[object]) -> tuple[BlockRecord, ...]:
    return tuple(block_record(b) for b in blocks)  # type: ignore[arg-type]


def prompt_only(turn_id: str) -> tuple[BlockRecord, ...]:
    """What the API stores when it acknowledges a turn: the user's message alone."""
    return tuple(block_record(b) for b in head(turn_id) if b.path.endswith("user.prompt"))


async def stopped_with_a_running_turn(dsn: str, scope: ConversationScope, *, rounds: int) -> None:
    """A store that committed turn_1, began turn_2 with ``rounds`` rounds, and closed before committing it."""
    first = PostgresConversationStore(dsn)
    await first.open()
    await run_turn(first, scope, "turn_1")
    handle = first.conversation(scope)
    await handle.begin_turn("turn_2", started_at=T0, generation="g1", head=records(head("turn_2")))
    for n in range(1, rounds + 1):
        await handle.append_round("turn_2", records(tool_round("turn_2", f"c{n}")))
    await first.aclose()


async def assert_consistent(store: ConversationStore, scope: ConversationScope) -> None:
    """Every conversation check of the fault tests: the timeline reads, each turn is there once, and every
    turn-log round belongs to a turn and the rounds of each turn are numbered without gaps."""
    restored = await restore_conversation(store.conversation(scope), now=T0)
    ids = [turn.turn_id for turn in (await store.conversation(scope).load()).turns]
    assert len(ids) == len(set(ids))
    connection = await asyncpg.connect(store.dsn)
    try:
        orphans = await connection.fetchval(
            "SELECT COUNT(*) FROM berth_turn_log l WHERE NOT EXISTS (SELECT 1 FROM berth_turns t WHERE"
            " t.tenant=l.tenant AND t.project=l.project AND t.user_id=l.user_id"
            " AND t.conversation_id=l.conversation_id AND t.turn_id=l.turn_id)"
        )
        gaps = await connection.fetch(
            "SELECT turn_id, array_agg(DISTINCT round ORDER BY round) AS rounds FROM berth_turn_log GROUP BY turn_id"
        )
    finally:
        await connection.close()
    assert orphans == 0
    for row in gaps:
        assert list(row["rounds"]) == list(range(len(row["rounds"]))), row["turn_id"]
    assert restored.timeline.turn_ids() == tuple(dict.fromkeys(restored.timeline.turn_ids()))


# -- the contract of the embedded store ----------------------------------------------------------------


async def test_a_new_conversation_loads_empty(store: ConversationStore, scope: ConversationScope) -> None:
    snapshot = await store.conversation(scope).load()
    assert snapshot.timeline == ()
    assert (snapshot.version, snapshot.sources, snapshot.turns, snapshot.uncommitted) == (0, (), (), ())


async def test_a_committed_turn_restores_the_same_timeline_and_sources(
    store: ConversationStore, scope: ConversationScope
) -> None:
    sources = (Source(url="https://example.org/a?utm_source=x", title="A"), Source(url="https://example.org/b"))
    timeline = await run_turn(store, scope, "turn_1", sources=sources)
    restored = await restore_conversation(store.conversation(scope), now=T0)
    assert restored.timeline.blocks == timeline.blocks
    assert [row.sid for row in restored.sources.rows] == [1, 2]
    assert restored.sources.rows[0].title == "A"
    assert restored.version == 1
    assert restored.interrupted_turn_ids == ()


async def test_the_turn_log_keeps_every_round_with_the_head_as_round_zero(
    store: ConversationStore, scope: ConversationScope
) -> None:
    await run_turn(store, scope, "turn_1", rounds=3)
    log = await store.conversation(scope).read_turn_log("turn_1")
    assert [entry.index for entry in log.rounds] == [0, 1, 2, 3, 4]
    assert [r.path for r in log.rounds[0].blocks] == ["ar:turn_1.turn.header", "ar:turn_1.user.prompt"]
    assert [r.path for r in log.rounds[2].blocks][1:] == ["tc:turn_1.c2.call", "tc:turn_1.c2.result"]
    assert log.rounds[-1].blocks[0].path == "ar:turn_1.assistant.completion"
    assert (log.turn.state, log.turn.generation, log.turn.rounds) == ("completed", "g1", 4)


async def test_the_turn_log_records_usage_and_exit_reason(store: ConversationStore, scope: ConversationScope) -> None:
    usage = TurnUsage(input_tokens=12, output_tokens=5, cache_read_input_tokens=900, cache_creation_input_tokens=40)
    await run_turn(store, scope, "turn_1", usage=usage, exit_reason="iteration_limit")
    log = await store.conversation(scope).read_turn_log("turn_1")
    assert (log.turn.usage, log.turn.exit_reason) == (usage, "iteration_limit")
    (turn,) = (await store.conversation(scope).load()).turns
    assert (turn.usage, turn.exit_reason, turn.started_at, turn.ended_at) == (usage, "iteration_limit", T0, T0)


async def test_a_turn_this_store_is_running_is_not_called_interrupted(
    store: ConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    await handle.begin_turn("turn_1", started_at=T0, generation=None, head=records(head("turn_1")))
    snapshot = await handle.load()
    assert [t.state for t in snapshot.turns] == ["running"]
    assert snapshot.uncommitted == ()
    assert await store.recover_interrupted_turns() == ()


async def test_a_commit_from_a_stale_version_is_refused_and_changes_nothing(
    store: ConversationStore, scope: ConversationScope
) -> None:
    await run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    before = await handle.load()
    await handle.begin_turn("turn_2", started_at=T0, generation=None, head=records(head("turn_2")))
    stale = TurnCommit(
        turn_id="turn_2",
        state="completed",
        ended_at=T0,
        base_version=0,
        timeline=TimelineChange(length=0),
        final_round=records(final("turn_2")),
        artifacts=(ArtifactWrite(path="turn_2/a.txt", data=b"a"),),
        title="Overwritten",
    )
    with pytest.raises(StorageError) as refused:
        await handle.commit_turn(stale)
    assert refused.value.code == "conflicting_commit"
    after = await handle.load()
    assert (after.timeline, after.version) == (before.timeline, before.version)
    assert [t.state for t in after.turns] == ["completed", "running"]
    assert (await handle.read_turn_log("turn_2")).turn.rounds == 0, "the final round was not appended"
    with pytest.raises(StorageError):
        await handle.read_artifact("turn_2/a.txt")
    assert (await store.list_conversations(scope.owner))[0].title is None


async def test_a_turn_committed_twice_is_refused_the_second_time(
    store: ConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    await handle.begin_turn("turn_1", started_at=T0, generation=None, head=())
    commit = TurnCommit(
        turn_id="turn_1", state="completed", ended_at=T0, base_version=0, timeline=TimelineChange(length=0)
    )
    assert await handle.commit_turn(commit) == 1
    with pytest.raises(StorageError) as again:
        await handle.commit_turn(commit)
    assert again.value.code == "conflicting_commit"


async def test_a_commit_writes_only_the_timeline_positions_that_changed(
    pg_store: PostgresConversationStore, scope: ConversationScope
) -> None:
    for n in range(1, 4):
        await run_turn(pg_store, scope, f"turn_{n}")
    connection = await asyncpg.connect(pg_store.dsn)
    try:
        await connection.execute("UPDATE berth_timeline SET type = type || '!' WHERE turn_id <> 'turn_4'")
        await run_turn(pg_store, scope, "turn_4")
        untouched = await connection.fetchval("SELECT COUNT(*) FROM berth_timeline WHERE type LIKE '%!'")
        copied = await connection.fetchval("SELECT COUNT(*) FROM berth_timeline WHERE block IS NOT NULL")
    finally:
        await connection.close()
    assert untouched == 3 * (2 + 2 * 3 + 1), "the rows of earlier turns were not rewritten"
    assert copied == 0, "the timeline refers to the turn log instead of copying its blocks"


async def test_a_timeline_reference_to_a_log_entry_that_does_not_hold_the_block_is_refused(
    store: ConversationStore, scope: ConversationScope
) -> None:
    await run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    before = await handle.load()
    await handle.begin_turn("turn_2", started_at=T0, generation=None, head=records(head("turn_2")))
    prompt = block_record(head("turn_2")[1])
    wrong_place = LoggedBlock(turn_id="turn_2", round=0, position=0, record=prompt)  # position 0 is the header
    length = len(before.timeline or ()) + 1
    bad = TurnCommit(
        turn_id="turn_2",
        state="completed",
        ended_at=T0,
        base_version=before.version,
        timeline=TimelineChange(length=length, writes=((length - 1, wrong_place),)),
    )
    with pytest.raises(StorageError) as refused:
        await handle.commit_turn(bad)
    assert refused.value.code == "unknown_logged_block"
    assert "ar:turn_2.user.prompt" in refused.value.message
    after = await handle.load()
    assert (after.timeline, after.version) == (before.timeline, before.version)
    assert [t.state for t in after.turns] == ["completed", "running"]


async def test_a_load_that_knows_the_stored_version_skips_the_timeline(
    store: ConversationStore, scope: ConversationScope
) -> None:
    await run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    assert (await handle.load(known_version=1)).timeline is None
    stale = (await handle.load(known_version=0)).timeline
    assert stale is not None and len(stale) == 2 + 2 * 3 + 1


async def test_a_timeline_committed_elsewhere_since_is_parsed_from_the_store(
    store: ConversationStore, scope: ConversationScope
) -> None:
    await run_turn(store, scope, "turn_1")
    restored = await restore_conversation(store.conversation(scope), now=T0)
    await run_turn(store, scope, "turn_2")
    again = await restore_conversation(store.conversation(scope), now=T0)
    assert again.version == restored.version + 1
    assert again.timeline.turn_ids() == ("turn_1", "turn_2")


async def test_artifacts_commit_with_the_turn_and_read_back(store: ConversationStore, scope: ConversationScope) -> None:
    report = ArtifactWrite(path="turn_1/outputs/report.md", data=b"# Report\x00\xff")
    await run_turn(store, scope, "turn_1", artifacts=(report,))
    assert await store.conversation(scope).read_artifact("turn_1/outputs/report.md") == b"# Report\x00\xff"
    with pytest.raises(StorageError) as missing:
        await store.conversation(scope).read_artifact("turn_1/outputs/other.md")
    assert missing.value.code == "artifact_not_found"


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a//b", "a/./b", "a\\b", "nul\x00byte", ""])
async def test_unsafe_artifact_paths_are_refused(store: ConversationStore, scope: ConversationScope, path: str) -> None:
    with pytest.raises(StorageError) as refused:
        await store.conversation(scope).read_artifact(path)
    assert refused.value.code == "unsafe_artifact_path"


async def test_turn_lifecycle_errors_have_codes(store: ConversationStore, scope: ConversationScope) -> None:
    handle = store.conversation(scope)
    with pytest.raises(StorageError) as unknown:
        await handle.append_round("turn_9", ())
    assert unknown.value.code == "turn_not_found"
    await run_turn(store, scope, "turn_1")
    with pytest.raises(StorageError) as again:
        await handle.begin_turn("turn_1", started_at=T0, generation=None, head=())
    assert again.value.code == "turn_exists"
    with pytest.raises(StorageError) as done:
        await handle.append_round("turn_1", ())
    assert done.value.code == "turn_not_running"
    with pytest.raises(StorageError) as missing_log:
        await handle.read_turn_log("turn_9")
    assert missing_log.value.code == "turn_not_found"
    with pytest.raises(StorageError) as never_begun:
        await handle.commit_turn(
            TurnCommit(turn_id="turn_9", state="completed", ended_at=T0, base_version=1, timeline=TimelineChange(0))
        )
    assert never_begun.value.code == "turn_not_found"


async def test_a_closed_store_refuses_work(migrated: str, scope: ConversationScope) -> None:
    store = PostgresConversationStore(migrated)
    await store.open()
    await store.aclose()
    with pytest.raises(StorageError) as closed:
        await store.conversation(scope).load()
    assert closed.value.code == "store_closed"


async def test_the_conversation_index_lists_titles_and_turn_counts_newest_first(
    store: ConversationStore, owner: OwnerScope
) -> None:
    first, second = owner.conversation("c1"), owner.conversation("c2")
    await run_turn(store, first, "turn_1")
    await run_turn(store, first, "turn_2")
    handle = store.conversation(second)
    await handle.begin_turn("turn_1", started_at=T0, generation=None, head=())
    later = T0 + timedelta(days=1)
    await handle.commit_turn(
        TurnCommit(
            turn_id="turn_1",
            state="completed",
            ended_at=later,
            base_version=0,
            timeline=TimelineChange(length=0),
            title="Taxes",
        )
    )
    listed = await store.list_conversations(owner)
    assert [(r.scope.conversation_id, r.title, r.turn_count) for r in listed] == [("c2", "Taxes", 1), ("c1", None, 2)]
    assert listed[0].updated_at == later


async def test_sources_rows_are_written_only_when_they_change(
    store: ConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    pool = SourcesPool()
    recorder = TurnRecorder(handle, "turn_1", base_version=0, sources=pool, stored=StoredTimeline())
    await recorder.begin(head("turn_1"), started_at=T0)
    pool = pool.merge([Source(url="https://a.org/x")]).pool
    await recorder.record_round(tool_round("turn_1", "c1"), sources=pool)
    pool = pool.merge([Source(url="https://a.org/x", title="Now titled"), Source(url="https://b.org/")]).pool
    await recorder.record_round(tool_round("turn_1", "c2"), sources=pool)
    snapshot = await handle.load()
    rows = [SourceRow.model_validate_json(record.json) for record in snapshot.sources]
    assert [(row.sid, row.title) for row in rows] == [(1, "Now titled"), (2, "")]


async def test_an_accepted_turn_begins_with_its_full_head_and_ids_stay_unique(
    store: ConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    await handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1"))
    with pytest.raises(StorageError) as twice:
        await handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1"))
    assert twice.value.code == "turn_exists"
    full_head = records(head("turn_1"))
    await handle.begin_turn("turn_1", started_at=T0, generation="g1", head=full_head)
    log = await handle.read_turn_log("turn_1")
    assert log.turn.state == "running"
    assert [r.path for r in log.rounds[0].blocks] == [r.path for r in full_head]
    with pytest.raises(StorageError) as again:
        await handle.begin_turn("turn_1", started_at=T0, generation="g1", head=full_head)
    assert again.value.code == "turn_exists"


async def test_an_accepted_turn_that_never_began_can_be_ended(
    store: ConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    await handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1"))
    await handle.end_unstarted_turn("turn_1", state="cancelled", ended_at=T0)
    [turn] = (await handle.load()).turns
    assert (turn.state, turn.exit_reason) == ("cancelled", "cancelled")


async def test_a_live_event_is_logged_at_once_kept_once_by_the_commit_and_none_after_it(
    store: ConversationStore, owner: OwnerScope
) -> None:
    handle = store.conversation(owner.conversation("c_live"))
    restored = await restore_conversation(handle, now=T0)
    recorder = TurnRecorder(handle, "turn_l", base_version=0, sources=restored.sources, stored=restored.stored)
    timeline = restored.timeline
    timeline.contribute(*head("turn_l"))
    await recorder.begin(head("turn_l"), started_at=T0)
    inbox = LiveInbox("turn_l", clock=lambda: T0)
    assert inbox.attach(recorder.record_live) == []
    await inbox.deliver(LiveEvent("followup", "also the logs", attachments=(("a.txt", "text/plain", b"x"),)))
    logged = await handle.read_turn_log("turn_l")
    assert [r.path for r in logged.rounds[-1].blocks] == [
        "ar:turn_l.user.followup.1",
        "fi:turn_l.attachments/live-1/a.txt",
    ]
    tools = tool_round("turn_l", "c1")
    timeline.contribute(*tools)
    await recorder.record_round(tools, sources=restored.sources)
    for received in inbox.take():
        timeline.contribute(*received.blocks)
    inbox.close()
    await recorder.commit(
        timeline, sources=restored.sources, state="completed", ended_at=T0, final_round=final("turn_l")
    )
    assert await recorder.record_live(head("turn_l")[:1]) is None
    paths = [block.path for block in (await restore_conversation(handle, now=T0)).timeline.blocks]
    assert paths.count("ar:turn_l.user.followup.1") == 1
    log = await handle.read_turn_log("turn_l")
    assert [r.path for entry in log.rounds for r in entry.blocks].count("ar:turn_l.user.followup.1") == 1


# -- scoping -------------------------------------------------------------------------------------------


async def test_conversations_are_scoped_by_the_bound_context_never_shared(
    store: ConversationStore, owner: OwnerScope
) -> None:
    ada = owner.conversation("shared-id")
    bob = OwnerScope(tenant="acme", project="support", user_id="bob").conversation("shared-id")
    other_tenant = OwnerScope(tenant="globex", project="support", user_id="ada").conversation("shared-id")
    other_project = OwnerScope(tenant="acme", project="sales", user_id="ada").conversation("shared-id")
    await run_turn(store, ada, "turn_1", artifacts=(ArtifactWrite(path="a.txt", data=b"ada's"),))
    for stranger in (bob, other_tenant, other_project):
        snapshot = await store.conversation(stranger).load()
        assert (snapshot.timeline, snapshot.turns, snapshot.version) == ((), (), 0)
        with pytest.raises(StorageError) as hidden:
            await store.conversation(stranger).read_turn_log("turn_1")
        assert hidden.value.code == "turn_not_found"
        with pytest.raises(StorageError) as no_file:
            await store.conversation(stranger).read_artifact("a.txt")
        assert no_file.value.code == "artifact_not_found"
    await run_turn(store, bob, "turn_1")  # the same turn id in another scope is another turn
    assert [r.scope for r in await store.list_conversations(owner)] == [ada]
    assert await store.list_conversations(other_tenant.owner) == ()
    assert len((await store.conversation(ada).load()).turns) == 1


# -- the schema ----------------------------------------------------------------------------------------


async def test_a_store_on_a_database_that_was_never_migrated_says_to_run_berth_migrate(database: str) -> None:
    store = PostgresConversationStore(database)
    with pytest.raises(ConfigError) as behind:
        await store.open()
    assert behind.value.code == "schema_behind"
    assert "berth migrate" in str(behind.value) and "0001_conversations" in str(behind.value)
    with pytest.raises(StorageError):
        await store.recover_interrupted_turns()


async def test_open_creates_no_tables(database: str) -> None:
    with pytest.raises(ConfigError):
        await PostgresConversationStore(database).open()
    connection = await asyncpg.connect(database)
    try:
        tables = await connection.fetchval("SELECT COUNT(*) FROM pg_tables WHERE schemaname='public'")
    finally:
        await connection.close()
    assert tables == 0


# -- owners that are gone ------------------------------------------------------------------------------


async def test_a_turn_that_never_committed_comes_back_interrupted_with_its_completed_rounds(
    migrated: str, scope: ConversationScope
) -> None:
    await stopped_with_a_running_turn(migrated, scope, rounds=1)
    second = PostgresConversationStore(migrated)
    await second.open()
    try:
        assert [(t.scope, t.turn_id, t.was) for t in second.interrupted_at_open] == [(scope, "turn_2", "running")]
        snapshot = await second.conversation(scope).load()
        assert snapshot.interrupted_turn_ids == ("turn_2",)
        assert [entry.index for entry in snapshot.uncommitted[0].rounds] == [0, 1]
        assert [t.rounds for t in snapshot.turns] == [3, 1], "an uncommitted turn counts the rounds its log holds"

        later = T0 + timedelta(hours=1)
        restored = await restore_conversation(second.conversation(scope), now=later)
        assert restored.interrupted_turn_ids == ("turn_2",)
        paths = [b.path for b in restored.timeline.blocks if b.turn_id == "turn_2"]
        assert paths == [
            "ar:turn_2.turn.header",
            "ar:turn_2.user.prompt",
            "ar:turn_2.react.notes.c1",
            "tc:turn_2.c1.call",
            "tc:turn_2.c1.result",
            "ar:turn_2.turn.status",
        ]
        assert restored.timeline.blocks[-1].meta["state"] == "interrupted"
        again = await restore_conversation(second.conversation(scope), now=later)
        assert again.interrupted_turn_ids == (), "the interruption is recorded once"
        assert again.timeline.blocks == restored.timeline.blocks
        await assert_consistent(second, scope)
    finally:
        await second.aclose()


async def test_a_load_without_the_turn_index_still_returns_the_interrupted_turns(
    migrated: str, scope: ConversationScope
) -> None:
    await stopped_with_a_running_turn(migrated, scope, rounds=0)
    async with PostgresConversationStore(migrated) as store:
        snapshot = await store.conversation(scope).load(turn_index=False)
        assert [t.turn_id for t in snapshot.turns] == ["turn_2"]
        assert [log.turn.turn_id for log in snapshot.uncommitted] == ["turn_2"]
        assert [t.turn_id for t in (await store.conversation(scope).load()).turns] == ["turn_1", "turn_2"]


async def test_an_accepted_turn_of_a_closed_store_comes_back_interrupted_with_the_message(
    migrated: str, scope: ConversationScope
) -> None:
    async with PostgresConversationStore(migrated) as first:
        await first.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1"))
        assert [t.state for t in (await first.conversation(scope).load()).turns] == ["accepted"]
    async with PostgresConversationStore(migrated) as second:
        assert [(t.turn_id, t.was) for t in second.interrupted_at_open] == [("turn_1", "accepted")]
        restored = await restore_conversation(second.conversation(scope), now=T0)
        assert [b.path for b in restored.timeline.blocks] == ["ar:turn_1.user.prompt", "ar:turn_1.turn.status"]


async def test_turns_of_another_live_store_on_the_same_database_are_left_alone(
    pg_store: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await pg_store.conversation(scope).begin_turn(
        "turn_1", started_at=T0, generation=None, head=records(head("turn_1"))
    )
    async with PostgresConversationStore(migrated) as other:
        assert other.interrupted_at_open == ()
        assert [t.state for t in (await other.conversation(scope).load()).turns] == ["running"]
        assert await other.recover_interrupted_turns() == ()
    await pg_store.conversation(scope).append_round("turn_1", records(tool_round("turn_1", "c1")))


async def test_a_store_that_dies_with_its_connections_leaves_its_turns_to_be_recovered(
    pg_store: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    before = await backend_pids(migrated)
    async with PostgresProxy() as proxy:
        doomed = PostgresConversationStore(proxy.dsn(migrated))
        await doomed.open()
        await doomed.conversation(scope).begin_turn("turn_1", started_at=T0, generation=None, head=())
        # As if its process were killed: it never reconnects (a store whose owner connection drops takes its lock
        # again, and would, here in the test's process), and its backends are gone, its owner lock with them.
        await proxy.cut("refuse")
        await terminate(migrated, await backend_pids(migrated) - before)
        recovered = await pg_store.recover_interrupted_turns()
        assert [(t.turn_id, t.was) for t in recovered] == [("turn_1", "running")]
        await doomed.aclose()


# -- dropped connections and concurrency ---------------------------------------------------------------


async def backend_pids(dsn: str) -> set[int]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname=current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
    return {row["pid"] for row in rows}


async def terminate(dsn: str, pids: set[int]) -> None:
    """Terminate these backends, as a killed process or a network cut would end them, and wait (up to 10 s each)
    until they are gone: ``pg_terminate_backend`` only signals, and a backend still exiting holds its locks (the
    owner lock of a store whose process was killed, on a busy machine)."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute("SELECT pg_terminate_backend(pid, 10000) FROM unnest($1::int[]) pid", list(pids))
    finally:
        await connection.close()


async def wait_until_blocked(admin: asyncpg.Connection, query_part: str) -> int:
    """Return the pid of the backend of ``admin``'s database waiting on a lock while running a query that contains
    ``query_part`` (not one of another test's database: tests run in parallel on one server)."""
    for _ in range(200):
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type='Lock'"
            " AND position($1 in query) > 0",
            query_part,
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no backend blocked on {query_part!r}")


async def begun_second_turn(store: ConversationStore, scope: ConversationScope) -> TurnCommit:
    """Commit turn_1, begin turn_2 with one round, and return turn_2's commit (with an artifact)."""
    await run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    before = await handle.load()
    await handle.begin_turn("turn_2", started_at=T0, generation=None, head=records(head("turn_2")))
    await handle.append_round("turn_2", records(tool_round("turn_2", "c1")))
    length = len(before.timeline or ())
    blocks = [*records(head("turn_2")), *records(tool_round("turn_2", "c1")), *records(final("turn_2"))]
    return TurnCommit(
        turn_id="turn_2",
        state="completed",
        ended_at=T0,
        base_version=before.version,
        timeline=TimelineChange(
            length=length + len(blocks), writes=tuple((length + n, block) for n, block in enumerate(blocks))
        ),
        final_round=records(final("turn_2")),
        artifacts=(ArtifactWrite(path="turn_2/out.txt", data=b"out"),),
    )


@pytest.mark.parametrize("blocked_at", ["berth_conversations", "berth_artifacts"])
async def test_a_commit_whose_connection_is_terminated_mid_way_applies_exactly_once(
    pg_store: PostgresConversationStore, scope: ConversationScope, blocked_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    commit = await begun_second_turn(pg_store, scope)
    admin = await asyncpg.connect(pg_store.dsn)
    blocker = await asyncpg.connect(pg_store.dsn)
    try:
        holding = blocker.transaction()
        await holding.start()
        if blocked_at == "berth_conversations":  # before anything is written: the version check waits
            await blocker.execute("SELECT 1 FROM berth_conversations FOR UPDATE")
        else:  # after the log and the timeline are written: the artifact's insert waits on this one's key
            await blocker.execute(
                "INSERT INTO berth_artifacts VALUES ($1, $2, $3, $4, 'turn_2/out.txt', '', 0, 'x', '')",
                scope.tenant,
                scope.project,
                scope.user_id,
                scope.conversation_id,
            )
        committing = asyncio.create_task(pg_store.conversation(scope).commit_turn(commit))
        pid = await wait_until_blocked(admin, blocked_at)
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.1)
        await holding.rollback()
        assert await committing == commit.base_version + 1
        assert "retrying the operation" in caplog.text, "the first attempt was cut off"
    finally:
        await blocker.close()
        await admin.close()
    snapshot = await pg_store.conversation(scope).load()
    assert snapshot.version == commit.base_version + 1
    assert [(t.turn_id, t.state) for t in snapshot.turns] == [("turn_1", "completed"), ("turn_2", "completed")]
    log = await pg_store.conversation(scope).read_turn_log("turn_2")
    assert [entry.index for entry in log.rounds] == [0, 1, 2], "the final round is in the log once"
    assert await pg_store.conversation(scope).read_artifact("turn_2/out.txt") == b"out"
    await assert_consistent(pg_store, scope)


async def test_a_retried_commit_that_already_landed_returns_the_stored_version(
    pg_store: PostgresConversationStore, scope: ConversationScope
) -> None:
    commit = await begun_second_turn(pg_store, scope)
    handle = pg_store.conversation(scope)
    version = await handle.commit_turn(commit)

    async def retry(connection: asyncpg.Connection, retried: bool) -> int:
        return await handle.apply_commit(connection, commit, commit.ended_at, [], retried=True)

    assert await pg_store.transaction(retry) == version  # the reply of the first attempt was lost
    assert (await handle.load()).version == version
    await assert_consistent(pg_store, scope)


async def test_an_operation_on_a_pooled_connection_that_was_terminated_is_retried(
    pg_store: PostgresConversationStore, migrated: str, scope: ConversationScope
) -> None:
    await run_turn(pg_store, scope, "turn_1")
    connection = await asyncpg.connect(migrated)
    try:  # the pool's connections, not the one holding the pg_store's owner lock
        pooled = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname=current_database() AND pid <> pg_backend_pid()"
            " AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype='advisory')"
        )
    finally:
        await connection.close()
    assert pooled
    await terminate(migrated, {row["pid"] for row in pooled})
    await run_turn(pg_store, scope, "turn_2")
    await assert_consistent(pg_store, scope)


async def test_of_two_concurrent_commits_to_one_conversation_one_wins_and_the_other_conflicts(
    pg_store: PostgresConversationStore, scope: ConversationScope
) -> None:
    await run_turn(pg_store, scope, "turn_1")
    handle = pg_store.conversation(scope)
    base = (await handle.load()).version
    for turn_id in ("turn_a", "turn_b"):
        await handle.begin_turn(turn_id, started_at=T0, generation=None, head=records(head(turn_id)))
    commits = [
        TurnCommit(
            turn_id=turn_id,
            state="completed",
            ended_at=T0,
            base_version=base,
            timeline=TimelineChange(length=9 + 1, writes=((9, records(final(turn_id))[0]),)),
            final_round=records(final(turn_id)),
        )
        for turn_id in ("turn_a", "turn_b")
    ]
    outcomes = await asyncio.gather(*(handle.commit_turn(c) for c in commits), return_exceptions=True)
    won = [o for o in outcomes if o == base + 1]
    lost = [o for o in outcomes if isinstance(o, StorageError)]
    assert len(won) == 1 and len(lost) == 1
    assert lost[0].code == "conflicting_commit"
    snapshot = await handle.load()
    assert snapshot.version == base + 1
    committed = {t.turn_id: t.state for t in snapshot.turns}
    assert sorted(committed.values()) == ["completed", "completed", "running"]
    await assert_consistent(pg_store, scope)


async def test_a_turn_accepted_again_after_a_lost_reply_is_not_a_second_turn(
    pg_store: PostgresConversationStore, scope: ConversationScope
) -> None:
    handle = pg_store.conversation(scope)
    await handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1"))
    calls: list[bool] = []

    async def accept_again(connection: asyncpg.Connection, retried: bool) -> None:
        calls.append(retried)
        if not retried:
            raise asyncpg.ConnectionDoesNotExistError("the connection dropped")
        await asyncio.sleep(0)

    await pg_store.transaction(accept_again)
    assert calls == [False, True], "retried once, with retried=True"
    assert [t.turn_id for t in (await handle.load()).turns] == ["turn_1"]


async def test_a_database_migrated_by_the_migration_runner_serves_the_store(
    database: str, scope: ConversationScope
) -> None:
    from berth_postgres.migrations import migrate

    assert "0001_conversations" in await migrate(database)
    async with PostgresConversationStore(database) as store:
        await run_turn(store, scope, "turn_1")
        assert (await store.conversation(scope).load()).version == 1


def memory_index_beside(store: ConversationStore) -> MemoryIndex:
    """The memory index of the backend ``store`` belongs to (its database, its connection or pool)."""
    if isinstance(store, PostgresConversationStore):
        return PostgresMemoryIndex(pool=store.pool)
    assert isinstance(store, SqliteConversationStore)
    return SqliteMemoryIndex(store.database.path.parent, database=store.database)


def commit_remembering(scope: ConversationScope, turn_id: str, text: str, *, base_version: int) -> TurnCommit:
    """A commit of ``turn_id`` whose turn leaves one memory entry: its prompt, ``text``."""
    entry = MemoryEntry(
        scope=scope,
        path=f"ar:{turn_id}.user.prompt",
        turn_id=turn_id,
        turn_ordinal=1,
        kind="user",
        ts=T0,
        text=text,
        vector=(0.6, 0.8),
    )
    return TurnCommit(
        turn_id=turn_id,
        state="completed",
        ended_at=T0,
        base_version=base_version,
        timeline=TimelineChange(length=0),
        memory=(entry,),
    )


async def test_a_turns_memory_entries_are_written_by_its_commit(
    store: ConversationStore, scope: ConversationScope
) -> None:
    index = memory_index_beside(store)
    await index.open()
    handle = store.conversation(scope)
    await handle.begin_turn("turn_1", started_at=T0, generation=None, head=records(head("turn_1")))
    commit = commit_remembering(scope, "turn_1", "the ultramarine pigment", base_version=0)
    assert await handle.commit_turn(commit) == 1
    hits = await index.search_lexical(MemoryFilter(owner=scope.owner), "ultramarine", limit=5)
    assert [(hit.entry.path, hit.entry.text, hit.entry.vector) for hit in hits] == [
        ("ar:turn_1.user.prompt", "the ultramarine pigment", pytest.approx((0.6, 0.8)))
    ]
    await index.aclose()


async def test_a_refused_commit_writes_none_of_its_memory_entries(
    store: ConversationStore, scope: ConversationScope
) -> None:
    index = memory_index_beside(store)
    await index.open()
    await run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    await handle.begin_turn("turn_2", started_at=T0, generation=None, head=records(head("turn_2")))
    stale = commit_remembering(scope, "turn_2", "the ultramarine pigment", base_version=0)
    with pytest.raises(StorageError) as refused:
        await handle.commit_turn(stale)
    assert refused.value.code == "conflicting_commit"
    assert await index.list_entries(MemoryFilter(owner=scope.owner)) == ()
    await index.aclose()
