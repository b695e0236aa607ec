"""The embedded conversation store: SQLite (WAL) + files, atomic commits, per-round turn log, scoping."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from storage_builders import T0, final, head, open_store, tool_round

from berth.default_plugins.storage.sqlite import DATABASE_FILE, SqliteConversationStore
from berth.runtime.persistence import StoredTimeline, TurnRecorder, block_record, restore_conversation
from berth.runtime.sources import Source, SourceRow, SourcesPool
from berth.runtime.timeline import Timeline
from berth.storage.conversations import (
    ArtifactWrite,
    BlockRecord,
    LoggedBlock,
    StorageError,
    TimelineChange,
    TurnCommit,
)
from berth.storage.scope import ConversationScope, OwnerScope

run = asyncio.run


def run_turn(
    store: SqliteConversationStore,
    scope: ConversationScope,
    turn_id: str,
    *,
    rounds: int = 2,
    sources: tuple[Source, ...] = (),
    artifacts: tuple[ArtifactWrite, ...] = (),
) -> Timeline:
    """Run one whole turn through the recorder, the way the loop does, and return the timeline."""
    handle = store.conversation(scope)
    restored = run(restore_conversation(handle, now=T0))
    timeline, pool = restored.timeline, restored.sources
    recorder = TurnRecorder(handle, turn_id, base_version=restored.version, sources=pool, stored=restored.stored)
    blocks = head(turn_id)
    timeline.contribute(*blocks)
    run(recorder.begin(blocks, started_at=T0, generation="g1"))
    for n in range(1, rounds + 1):
        round_blocks = tool_round(turn_id, f"c{n}")
        timeline.contribute(*round_blocks)
        pool = pool.merge(sources).pool
        run(recorder.record_round(round_blocks, sources=pool))
    answer = final(turn_id)
    timeline.contribute(*answer)
    run(
        recorder.commit(timeline, sources=pool, state="completed", ended_at=T0, final_round=answer, artifacts=artifacts)
    )
    return timeline


def reopened_after_a_stop(root: Path, scope: ConversationScope, *, rounds: int) -> SqliteConversationStore:
    """A store opened again after a process stopped: turn_1 committed, turn_2 begun with ``rounds`` rounds."""
    first = open_store(root)
    run_turn(first, scope, "turn_1")
    handle = first.conversation(scope)
    run(handle.begin_turn("turn_2", started_at=T0, generation="g1", head=tuple(map(block_record, head("turn_2")))))
    for n in range(1, rounds + 1):
        run(handle.append_round("turn_2", tuple(map(block_record, tool_round("turn_2", f"c{n}")))))
    run(first.aclose())  # the process stops before the turn commits
    return open_store(root)


def test_a_new_conversation_loads_empty(store: SqliteConversationStore, scope: ConversationScope) -> None:
    snapshot = run(store.conversation(scope).load())
    assert snapshot.timeline == ()
    assert (snapshot.version, snapshot.sources, snapshot.turns, snapshot.uncommitted) == (0, (), (), ())


def test_the_database_runs_in_wal_mode(store: SqliteConversationStore, tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "var" / DATABASE_FILE) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_committed_turn_restores_the_same_timeline_and_sources(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    sources = (Source(url="https://example.org/a?utm_source=x", title="A"), Source(url="https://example.org/b"))
    timeline = run_turn(store, scope, "turn_1", sources=sources)
    restored = run(restore_conversation(store.conversation(scope), now=T0))
    assert restored.timeline.blocks == timeline.blocks
    assert [row.sid for row in restored.sources.rows] == [1, 2]
    assert restored.sources.rows[0].title == "A"
    assert restored.version == 1
    assert restored.interrupted_turn_ids == ()


def test_the_turn_log_keeps_every_round_with_the_head_as_round_zero(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    run_turn(store, scope, "turn_1", rounds=3)
    log = run(store.conversation(scope).read_turn_log("turn_1"))
    assert [entry.index for entry in log.rounds] == [0, 1, 2, 3, 4]
    assert [r.path for r in log.rounds[0].blocks] == ["ar:turn_1.turn.header", "ar:turn_1.user.prompt"]
    assert [r.path for r in log.rounds[2].blocks][1:] == ["tc:turn_1.c2.call", "tc:turn_1.c2.result"]
    assert log.rounds[-1].blocks[0].path == "ar:turn_1.assistant.completion"
    assert log.turn.state == "completed"
    assert log.turn.generation == "g1"
    assert log.turn.rounds == 4


def test_a_round_append_writes_the_same_statements_at_round_5_and_at_round_500(
    tmp_path: Path, scope: ConversationScope
) -> None:
    statements: list[str] = []
    store = open_store(tmp_path / "var", trace=statements.append)
    handle = store.conversation(scope)
    run(handle.begin_turn("turn_1", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_1")))))

    def append(n: int) -> list[str]:
        statements.clear()
        blocks = tuple(block_record(b) for b in tool_round("turn_1", f"c{n:04d}", result="r" * 500))
        run(handle.append_round("turn_1", blocks))
        return [re.sub(r"\d+", "#", statement) for statement in statements]

    traces = {n: append(n) for n in range(1, 501)}
    run(store.aclose())
    assert traces[5] == traces[500]
    assert sum(len(statement) for statement in traces[500]) < 4_000, "only this round's rows are written"


def test_a_turn_that_never_committed_comes_back_interrupted_with_its_completed_rounds(
    tmp_path: Path, scope: ConversationScope
) -> None:
    second = reopened_after_a_stop(tmp_path / "var", scope, rounds=1)
    snapshot = run(second.conversation(scope).load())
    assert snapshot.interrupted_turn_ids == ("turn_2",)
    assert [entry.index for entry in snapshot.uncommitted[0].rounds] == [0, 1]
    assert [t.rounds for t in snapshot.turns] == [3, 1], "an uncommitted turn counts the rounds its log holds"

    later = T0 + timedelta(hours=1)
    restored = run(restore_conversation(second.conversation(scope), now=later))
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
    status = restored.timeline.blocks[-1]
    assert status.meta["state"] == "interrupted"
    assert "1 completed round" in (status.text or "")
    assert run(second.conversation(scope).read_turn_log("turn_2")).turn.rounds == 2, "the status is its round 2"

    again = run(restore_conversation(second.conversation(scope), now=later))
    assert again.interrupted_turn_ids == (), "the interruption is recorded once"
    assert again.timeline.blocks == restored.timeline.blocks
    assert [t.state for t in run(second.conversation(scope).load()).turns] == ["completed", "interrupted"]
    run(second.aclose())


def test_a_turn_this_store_is_running_is_not_called_interrupted(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    run(handle.begin_turn("turn_1", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_1")))))
    snapshot = run(handle.load())
    assert [t.state for t in snapshot.turns] == ["running"]
    assert snapshot.uncommitted == ()


def test_a_commit_from_a_stale_version_is_refused_and_changes_nothing(
    store: SqliteConversationStore, scope: ConversationScope, tmp_path: Path
) -> None:
    run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    before = run(handle.load())
    run(handle.begin_turn("turn_2", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_2")))))
    stale = TurnCommit(
        turn_id="turn_2", state="completed", ended_at=T0, base_version=0, timeline=TimelineChange(length=0)
    )
    with pytest.raises(StorageError) as refused:
        run(handle.commit_turn(stale))
    assert refused.value.code == "conflicting_commit"
    after = run(handle.load())
    assert (after.timeline, after.version) == (before.timeline, before.version)


def test_a_commit_writes_only_the_timeline_positions_that_changed(tmp_path: Path, scope: ConversationScope) -> None:
    statements: list[str] = []
    store = open_store(tmp_path / "var", trace=statements.append)
    for n in range(1, 6):
        run_turn(store, scope, f"turn_{n}")
    statements.clear()
    run_turn(store, scope, "turn_6")
    written = [s for s in statements if s.startswith("INSERT INTO timeline")]
    assert len(written) == 2 + 2 * 3 + 1, "the new turn's head, two tool rounds and its answer; nothing older"
    assert all("turn_6" in statement for statement in written)
    restored = run(restore_conversation(store.conversation(scope), now=T0))
    assert restored.timeline.turn_ids() == tuple(f"turn_{n}" for n in range(1, 7))
    run(store.aclose())


def test_the_timeline_refers_to_the_turn_log_instead_of_copying_its_blocks(
    store: SqliteConversationStore, scope: ConversationScope, tmp_path: Path
) -> None:
    timeline = run_turn(store, scope, "turn_1")
    with sqlite3.connect(tmp_path / "var" / DATABASE_FILE) as connection:
        copied = connection.execute("SELECT COUNT(*) FROM timeline WHERE block IS NOT NULL").fetchone()[0]
        referring = connection.execute("SELECT COUNT(*) FROM timeline WHERE block IS NULL").fetchone()[0]
    assert (copied, referring) == (0, len(timeline))
    restored = run(restore_conversation(store.conversation(scope), now=T0))
    assert restored.timeline.blocks == timeline.blocks


def test_a_timeline_reference_to_a_log_entry_that_does_not_hold_the_block_is_refused(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    before = run(handle.load())
    run(handle.begin_turn("turn_2", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_2")))))
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
        run(handle.commit_turn(bad))
    assert refused.value.code == "unknown_logged_block"
    assert "ar:turn_2.user.prompt" in refused.value.message
    after = run(handle.load())
    assert (after.timeline, after.version) == (before.timeline, before.version)
    assert [t.state for t in after.turns] == ["completed", "running"]


def test_a_load_without_the_turn_index_still_returns_the_interrupted_turns(
    tmp_path: Path, scope: ConversationScope
) -> None:
    store = reopened_after_a_stop(tmp_path / "var", scope, rounds=0)
    snapshot = run(store.conversation(scope).load(turn_index=False))
    assert [t.turn_id for t in snapshot.turns] == ["turn_2"]
    assert [log.turn.turn_id for log in snapshot.uncommitted] == ["turn_2"]
    assert [t.turn_id for t in run(store.conversation(scope).load()).turns] == ["turn_1", "turn_2"]
    run(store.aclose())


def test_a_load_that_knows_the_stored_version_skips_the_timeline(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    run_turn(store, scope, "turn_1")
    handle = store.conversation(scope)
    assert run(handle.load(known_version=1)).timeline is None
    stale = run(handle.load(known_version=0)).timeline
    assert stale is not None and len(stale) == 2 + 2 * 3 + 1


def test_artifacts_commit_with_the_turn_and_read_back(store: SqliteConversationStore, scope: ConversationScope) -> None:
    run_turn(store, scope, "turn_1", artifacts=(ArtifactWrite(path="turn_1/outputs/report.md", data=b"# Report"),))
    assert run(store.conversation(scope).read_artifact("turn_1/outputs/report.md")) == b"# Report"


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a//b", "a/./b", "a\\b", "nul\x00byte", ""])
def test_unsafe_artifact_paths_are_refused(store: SqliteConversationStore, scope: ConversationScope, path: str) -> None:
    with pytest.raises(StorageError) as refused:
        run(store.conversation(scope).read_artifact(path))
    assert refused.value.code == "unsafe_artifact_path"


def test_an_artifact_of_a_refused_commit_is_not_visible(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    run(handle.begin_turn("turn_1", started_at=T0, generation=None, head=()))
    bad = TurnCommit(
        turn_id="turn_1",
        state="completed",
        ended_at=T0,
        base_version=7,
        timeline=TimelineChange(length=0),
        artifacts=(ArtifactWrite(path="turn_1/files/a.txt", data=b"a"),),
    )
    with pytest.raises(StorageError):
        run(handle.commit_turn(bad))
    with pytest.raises(StorageError) as missing:
        run(handle.read_artifact("turn_1/files/a.txt"))
    assert missing.value.code == "artifact_not_found"


def test_turn_lifecycle_errors_have_codes(store: SqliteConversationStore, scope: ConversationScope) -> None:
    handle = store.conversation(scope)
    with pytest.raises(StorageError) as unknown:
        run(handle.append_round("turn_9", ()))
    assert unknown.value.code == "turn_not_found"
    run_turn(store, scope, "turn_1")
    with pytest.raises(StorageError) as again:
        run(handle.begin_turn("turn_1", started_at=T0, generation=None, head=()))
    assert again.value.code == "turn_exists"
    with pytest.raises(StorageError) as done:
        run(handle.append_round("turn_1", ()))
    assert done.value.code == "turn_not_running"
    with pytest.raises(StorageError) as missing_log:
        run(handle.read_turn_log("turn_9"))
    assert missing_log.value.code == "turn_not_found"


def test_a_closed_store_refuses_work(tmp_path: Path, scope: ConversationScope) -> None:
    store = open_store(tmp_path / "var")
    run(store.aclose())
    with pytest.raises(StorageError) as closed:
        run(store.conversation(scope).load())
    assert closed.value.code == "store_closed"


def test_conversations_are_scoped_by_the_bound_context_never_shared(
    store: SqliteConversationStore, owner: OwnerScope
) -> None:
    ada = owner.conversation("shared-id")
    bob = OwnerScope(tenant="acme", project="support", user_id="bob").conversation("shared-id")
    other_tenant = OwnerScope(tenant="globex", project="support", user_id="ada").conversation("shared-id")
    run_turn(store, ada, "turn_1")
    assert run(store.conversation(bob).load()).timeline == ()
    assert run(store.conversation(other_tenant).load()).timeline == ()
    run_turn(store, bob, "turn_1")
    assert [r.scope for r in run(store.list_conversations(owner))] == [ada]
    assert run(store.list_conversations(other_tenant.owner)) == ()


def test_the_conversation_index_lists_titles_and_turn_counts_newest_first(
    store: SqliteConversationStore, owner: OwnerScope
) -> None:
    first, second = owner.conversation("c1"), owner.conversation("c2")
    run_turn(store, first, "turn_1")
    run_turn(store, first, "turn_2")
    handle = store.conversation(second)
    run(handle.begin_turn("turn_1", started_at=T0, generation=None, head=()))
    later = T0 + timedelta(days=1)
    run(
        handle.commit_turn(
            TurnCommit(
                turn_id="turn_1",
                state="completed",
                ended_at=later,
                base_version=0,
                timeline=TimelineChange(length=0),
                title="Taxes",
            )
        )
    )
    records = run(store.list_conversations(owner))
    assert [(r.scope.conversation_id, r.title, r.turn_count) for r in records] == [("c2", "Taxes", 1), ("c1", None, 2)]


@pytest.mark.parametrize("bad", ["../other", "a/b", "", "with space", "x" * 129, "dot.ted"])
def test_scope_ids_that_could_escape_a_folder_are_refused(owner: OwnerScope, bad: str) -> None:
    with pytest.raises(ValidationError):
        owner.conversation(bad)


def test_sources_rows_are_written_only_when_they_change(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    pool = SourcesPool()
    recorder = TurnRecorder(handle, "turn_1", base_version=0, sources=pool, stored=StoredTimeline())
    run(recorder.begin(head("turn_1"), started_at=T0))
    pool = pool.merge([Source(url="https://a.org/x")]).pool
    run(recorder.record_round(tool_round("turn_1", "c1"), sources=pool))
    pool = pool.merge([Source(url="https://a.org/x", title="Now titled"), Source(url="https://b.org/")]).pool
    run(recorder.record_round(tool_round("turn_1", "c2"), sources=pool))
    snapshot = run(handle.load())
    rows = [SourceRow.model_validate_json(record.json) for record in snapshot.sources]
    assert [(row.sid, row.title) for row in rows] == [(1, "Now titled"), (2, "")]


def prompt_only(turn_id: str) -> tuple[BlockRecord, ...]:
    """What the API stores when it acknowledges a turn: the user's message alone."""
    return tuple(block_record(b) for b in head(turn_id) if b.path.endswith("user.prompt"))


def test_an_accepted_turn_of_a_stopped_process_comes_back_interrupted_with_the_message(
    tmp_path: Path, scope: ConversationScope
) -> None:
    first = open_store(tmp_path / "var")
    run(first.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    assert [t.state for t in run(first.conversation(scope).load()).turns] == ["accepted"], "its own: not interrupted"
    run(first.aclose())  # the process stops before the turn begins

    second = open_store(tmp_path / "var")
    snapshot = run(second.conversation(scope).load())
    assert [t.state for t in snapshot.turns] == ["interrupted"]
    restored = run(restore_conversation(second.conversation(scope), now=T0))
    assert [b.path for b in restored.timeline.blocks] == ["ar:turn_1.user.prompt", "ar:turn_1.turn.status"]
    run(second.aclose())


def test_an_accepted_turn_begins_with_its_full_head_and_ids_stay_unique(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    run(handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    with pytest.raises(StorageError) as twice:
        run(handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    assert twice.value.code == "turn_exists"
    full_head = tuple(map(block_record, head("turn_1")))
    run(handle.begin_turn("turn_1", started_at=T0, generation="g1", head=full_head))
    log = run(handle.read_turn_log("turn_1"))
    assert log.turn.state == "running"
    assert [r.path for r in log.rounds[0].blocks] == [r.path for r in full_head]
    with pytest.raises(StorageError) as again:
        run(handle.begin_turn("turn_1", started_at=T0, generation="g1", head=full_head))
    assert again.value.code == "turn_exists"


def test_an_accepted_turn_that_never_began_can_be_ended(
    store: SqliteConversationStore, scope: ConversationScope
) -> None:
    handle = store.conversation(scope)
    run(handle.accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    run(handle.end_unstarted_turn("turn_1", state="cancelled", ended_at=T0))
    [turn] = run(handle.load()).turns
    assert (turn.state, turn.exit_reason) == ("cancelled", "cancelled")
