"""What the runtime stores with a turn: the timeline changes, the turn log's usage and exit reason, reuse."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_builders import T0, final, head, open_store, tool_round

from berth.default_plugins.storage.sqlite import DATABASE_FILE, SqliteConversationStore
from berth.runtime.blocks import Block, BlockType
from berth.runtime.persistence import StoredTimeline, TurnRecorder, restore_conversation
from berth.runtime.timeline import Timeline
from berth.storage.conversations import LoggedBlock, StorageError, TimelineChange, TurnUsage
from berth.storage.scope import ConversationScope

run = asyncio.run


def commit_turn(
    store: SqliteConversationStore, scope: ConversationScope, turn_id: str, **commit: object
) -> TurnRecorder:
    """Restore, run one tool round and commit, the way the loop does; return the recorder."""
    handle = store.conversation(scope)
    restored = run(restore_conversation(handle, now=T0))
    timeline = restored.timeline
    recorder = TurnRecorder(
        handle, turn_id, base_version=restored.version, sources=restored.sources, stored=restored.stored
    )
    timeline.contribute(*head(turn_id))
    run(recorder.begin(head(turn_id), started_at=T0))
    work = tool_round(turn_id, "c1")
    timeline.contribute(*work)
    run(recorder.record_round(work, sources=restored.sources))
    answer = final(turn_id)
    timeline.contribute(*answer)
    run(
        recorder.commit(
            timeline,
            sources=restored.sources,
            state="completed",
            ended_at=T0,
            final_round=answer,
            **commit,  # type: ignore[arg-type]
        )
    )
    return recorder


def test_a_timeline_change_names_only_the_positions_whose_block_is_not_stored() -> None:
    timeline = Timeline([*head("turn_1"), *tool_round("turn_1", "c1"), *final("turn_1")])
    stored = StoredTimeline()
    first = stored.change(timeline.blocks)
    assert first == TimelineChange.whole(tuple(stored.record(block) for block in timeline.blocks))
    stored.stored(timeline.blocks)
    assert stored.change(timeline.blocks) == TimelineChange(length=len(timeline))
    timeline.contribute(*head("turn_2"))
    timeline.hide("tc:turn_1.c1.result", "a result hidden", editable_from=0)
    change = stored.change(timeline.blocks)
    assert [position for position, _ in change.writes] == [4, 6, 7]
    assert change.writes[0][1].json == timeline.blocks[4].model_dump_json()
    summary = Block(
        type=BlockType.CONV_RANGE_SUMMARY,
        path="ar:turn_1.conv.range.summary",
        turn_id="turn_1",
        ts=T0,
        author="runtime",
        text="turn 1 looked something up",
    )
    timeline.replace_prefix(6, summary)
    change = stored.change(timeline.blocks)
    assert (change.length, [p for p, _ in change.writes]) == (3, [0, 1, 2]), "compaction shifts what follows it"


@pytest.mark.parametrize(("length", "positions"), [(-1, []), (2, [2]), (3, [1, 1]), (3, [2, 1])])
def test_a_timeline_change_refuses_positions_outside_or_out_of_order(length: int, positions: list[int]) -> None:
    record = StoredTimeline().record(head("turn_1")[0])
    with pytest.raises(ValueError, match="distinct ascending positions"):
        TimelineChange(length=length, writes=tuple((p, record) for p in positions))


def test_the_turn_log_records_usage_and_exit_reason(store: SqliteConversationStore, scope: ConversationScope) -> None:
    usage = TurnUsage(input_tokens=12, output_tokens=5, cache_read_input_tokens=900, cache_creation_input_tokens=40)
    commit_turn(store, scope, "turn_1", usage=usage, exit_reason="iteration_limit")
    log = run(store.conversation(scope).read_turn_log("turn_1"))
    assert (log.turn.usage, log.turn.exit_reason) == (usage, "iteration_limit")
    (turn,) = run(store.conversation(scope).load()).turns
    assert (turn.usage, turn.exit_reason) == (usage, "iteration_limit")


def test_a_database_from_before_turn_usage_gains_the_columns_on_open(tmp_path: Path, scope: ConversationScope) -> None:
    root = tmp_path / "var"
    root.mkdir()
    with sqlite3.connect(root / DATABASE_FILE) as connection:
        connection.execute(
            "CREATE TABLE turns (conversation INTEGER NOT NULL, turn_id TEXT NOT NULL, seq INTEGER NOT NULL,"
            " state TEXT NOT NULL, committed INTEGER NOT NULL DEFAULT 0, started_at TEXT NOT NULL, ended_at TEXT,"
            " generation TEXT, rounds INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (conversation, turn_id)) WITHOUT ROWID"
        )
    store = open_store(root)
    commit_turn(store, scope, "turn_1", usage=TurnUsage(input_tokens=3), exit_reason="completed")
    log = run(store.conversation(scope).read_turn_log("turn_1"))
    assert (log.turn.usage.input_tokens, log.turn.exit_reason) == (3, "completed")
    run(store.aclose())


def test_a_timeline_committed_here_is_taken_over_while_the_store_holds_its_version(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    committed = commit_turn(store, scope, "turn_1").committed
    assert committed is not None
    restored = run(restore_conversation(store.conversation(scope), now=T0, committed=committed))
    assert restored.reused and restored.timeline is committed.timeline
    parsed = run(restore_conversation(store.conversation(scope), now=T0))
    assert not parsed.reused and parsed.timeline.blocks == committed.timeline.blocks


def test_a_timeline_committed_elsewhere_since_is_parsed_from_the_store(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    stale = commit_turn(store, scope, "turn_1").committed
    commit_turn(store, scope, "turn_2")  # another worker's turn, as far as `stale` knows
    assert stale is not None
    restored = run(restore_conversation(store.conversation(scope), now=T0, committed=stale))
    assert not restored.reused
    assert restored.timeline.turn_ids() == ("turn_1", "turn_2")


def test_a_timeline_file_of_an_earlier_release_moves_into_the_table_on_open(
    tmp_path: Path, scope: ConversationScope
) -> None:
    root = tmp_path / "var"
    store = open_store(root)
    timeline = commit_turn(store, scope, "turn_1").committed
    assert timeline is not None
    run(store.aclose())
    # What an earlier release left: the timeline as one JSON file the conversation row points at.
    folder = root.joinpath("artifacts", scope.tenant, scope.project, scope.user_id, scope.conversation_id, "timeline")
    folder.mkdir(parents=True)
    (folder / "1-legacy.json").write_text(timeline.timeline.to_payload().model_dump_json(), encoding="utf-8")
    with sqlite3.connect(root / DATABASE_FILE) as connection:
        connection.execute("DELETE FROM timeline")
        connection.execute("UPDATE conversations SET timeline_file='1-legacy.json'")
    store = open_store(root)
    restored = run(restore_conversation(store.conversation(scope), now=T0))
    assert restored.timeline.blocks == timeline.timeline.blocks
    assert not (folder / "1-legacy.json").exists()
    commit_turn(store, scope, "turn_2")
    assert run(restore_conversation(store.conversation(scope), now=T0)).timeline.turn_ids() == ("turn_1", "turn_2")
    run(store.aclose())


def test_a_turn_started_without_waiting_surfaces_a_failed_begin_at_its_next_write(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    commit_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    restored = run(restore_conversation(handle, now=T0))

    async def start_again() -> None:
        recorder = TurnRecorder(
            handle, "turn_1", base_version=restored.version, sources=restored.sources, stored=restored.stored
        )
        recorder.start(head("turn_1"), started_at=T0)  # returns at once; the write goes on
        await recorder.record_round(tool_round("turn_1", "c9"), sources=restored.sources)

    with pytest.raises(StorageError) as refused:
        run(start_again())
    assert refused.value.code == "turn_exists"
    log = run(handle.read_turn_log("turn_1"))
    assert all(block.path != "tc:turn_1.c9.call" for entry in log.rounds for block in entry.blocks)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 11), min_size=0, max_size=12),
    st.lists(st.integers(0, 11), min_size=0, max_size=12),
)
def test_applying_a_timeline_change_to_what_is_stored_gives_the_new_timeline(
    before: list[int], after: list[int]
) -> None:
    pool = [*head("turn_1"), *tool_round("turn_1", "c1"), *tool_round("turn_1", "c2"), *final("turn_1")]
    pool += [block.model_copy(update={"hidden": True, "replacement": "hidden"}) for block in pool[:4]]
    stored = StoredTimeline()
    stored.stored([pool[n] for n in before])
    rows = {position: pool[n].model_dump_json() for position, n in enumerate(before)}
    blocks = [pool[n] for n in after]
    change = stored.change(blocks)
    for position, write in change.writes:  # what a store does with it
        rows[position] = (write.record if isinstance(write, LoggedBlock) else write).json
    rows = {position: json for position, json in rows.items() if position < change.length}
    assert [rows[position] for position in range(len(blocks))] == [block.model_dump_json() for block in blocks]
    assert len(change.writes) <= sum(
        1 for position, n in enumerate(after) if position >= len(before) or before[position] != n
    ), "only positions whose block is not the one stored are written"
