"""What the runtime stores with a turn: the timeline artifact, the turn log's usage and exit reason, reuse."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from storage_builders import T0, final, head, open_store, tool_round

from berth.plugins.storage.sqlite import DATABASE_FILE, SqliteConversationStore
from berth.runtime.persistence import BlockJsonCache, TurnRecorder, restore_conversation
from berth.runtime.timeline import Timeline
from berth.storage.conversations import TurnUsage
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
        handle, turn_id, base_version=restored.version, sources=restored.sources, block_json=restored.block_json
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


def test_the_timeline_artifact_is_what_the_payload_model_writes() -> None:
    timeline = Timeline([*head("turn_1"), *tool_round("turn_1", "c1"), *final("turn_1")])
    cache = BlockJsonCache()
    assert cache.timeline_json(timeline.blocks) == timeline.to_payload().model_dump_json()
    assert cache.timeline_json(()) == Timeline().to_payload().model_dump_json()


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
