"""Acknowledged turns survive their process: accepted durably, and found interrupted when whoever ran them is gone.

The store records each turn's owner (the store instance that accepted or began it, holding a lock file for as
long as its process lives). Opening the store records the unfinished turns of owners that are gone as
``interrupted``; the turns of a live owner — another process on the same root — are left alone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from storage_builders import T0, final, head, open_store, tool_round

from berth.default_plugins.storage.owners import OWNERS_FOLDER
from berth.default_plugins.storage.sqlite import DATABASE_FILE, SqliteConversationStore
from berth.runtime.blocks import BlockType
from berth.runtime.persistence import TurnRecorder, block_record, restore_conversation
from berth.storage.conversations import BlockRecord, ConversationHandle, ConversationSnapshot, InterruptedTurn
from berth.storage.scope import ConversationScope, OwnerScope

HERE = Path(__file__).resolve().parent
run = asyncio.run

CHILD = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from storage_builders import T0, final, head, tool_round
from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.runtime.persistence import TurnRecorder, block_record, restore_conversation
from berth.storage.scope import OwnerScope

ADA = OwnerScope(tenant="acme", project="support", user_id="ada")


async def main():
    store = SqliteConversationStore(Path(sys.argv[1]))
    await store.open()
    # accepted, never begun (it waited for a slot)
    waiting = store.conversation(ADA.conversation("waiting"))
    await waiting.accept_turn("turn_a", accepted_at=T0, head=prompt_of("turn_a"))
    # begun, one round appended
    running = store.conversation(ADA.conversation("mid-round"))
    await running.accept_turn("turn_b", accepted_at=T0, head=prompt_of("turn_b"))
    await running.begin_turn("turn_b", started_at=T0, generation="g1", head=tuple(map(block_record, head("turn_b"))))
    await running.append_round("turn_b", tuple(map(block_record, tool_round("turn_b", "c1"))))
    # committed
    done = store.conversation(ADA.conversation("done"))
    restored = await restore_conversation(done, now=T0)
    recorder = TurnRecorder(done, "turn_c", base_version=0, sources=restored.sources, stored=restored.stored)
    blocks = [*head("turn_c"), *final("turn_c")]
    restored.timeline.contribute(*blocks)
    await recorder.begin(head("turn_c"), started_at=T0)
    await recorder.commit(
        restored.timeline, sources=restored.sources, state="completed", ended_at=T0, final_round=final("turn_c")
    )
    print("ready", flush=True)
    await asyncio.sleep(60)


def prompt_of(turn_id):
    return tuple(block_record(b) for b in head(turn_id) if b.path.endswith("user.prompt"))


asyncio.run(main())
"""


def prompt_only(turn_id: str, message: str = "What changed?") -> tuple[BlockRecord, ...]:
    """What the API stores when it acknowledges a turn: the user's message alone."""
    return tuple(block_record(b) for b in head(turn_id, message) if b.path.endswith("user.prompt"))


def stored_states(root: Path) -> dict[str, str]:
    """Turn id → state, read from the database file directly (no load records anything)."""
    with sqlite3.connect(root / DATABASE_FILE) as connection:
        return dict(connection.execute("SELECT turn_id, state FROM turns").fetchall())


def test_accepting_a_turn_syncs_it_to_disk_before_returning(
    store: SqliteConversationStore, scope: ConversationScope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    run(store.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    assert str(tmp_path / "var" / f"{DATABASE_FILE}-wal") in synced, "a 202 promises the turn: a power loss keeps it"


def test_opening_the_store_records_what_a_killed_process_left_unfinished_as_interrupted(
    tmp_path: Path, owner: OwnerScope
) -> None:
    root = tmp_path / "var"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(root), str(HERE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n", child.stderr.read() if child.stderr else ""
    assert stored_states(root) == {"turn_a": "accepted", "turn_b": "running", "turn_c": "completed"}
    child.send_signal(signal.SIGKILL)
    child.wait()

    store = open_store(root)
    try:
        assert stored_states(root) == {"turn_a": "interrupted", "turn_b": "interrupted", "turn_c": "completed"}
        assert set(store.interrupted_at_open) == {
            InterruptedTurn(scope=owner.conversation("waiting"), turn_id="turn_a", was="accepted"),
            InterruptedTurn(scope=owner.conversation("mid-round"), turn_id="turn_b", was="running"),
        }
        assert sorted(p.name for p in (root / OWNERS_FOLDER).iterdir()) == [f"{store.owners.token}.lock"]
        restored = run(restore_conversation(store.conversation(owner.conversation("mid-round")), now=T0))
        assert [b.type for b in restored.timeline.blocks][-1] == BlockType.TURN_STATUS
        assert "after 1 completed round(s)" in (restored.timeline.blocks[-1].text or "")
    finally:
        run(store.aclose())


def test_a_live_process_keeps_its_unfinished_turns_when_another_opens_the_root(
    tmp_path: Path, owner: OwnerScope
) -> None:
    root = tmp_path / "var"
    first = open_store(root)  # another process, still serving
    run(first.conversation(owner.conversation("one")).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    two = first.conversation(owner.conversation("two"))
    run(two.begin_turn("turn_2", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_2")))))

    second = open_store(root)
    try:
        loaded = run(second.conversation(owner.conversation("one")).load())
        assert [t.state for t in loaded.turns] == ["accepted"], "its process is alive: not interrupted"
        assert [t.state for t in run(second.conversation(owner.conversation("two")).load()).turns] == ["running"]
        assert second.interrupted_at_open == ()

        run(first.aclose())  # that process ends with both turns unfinished
        assert [t.state for t in run(second.conversation(owner.conversation("one")).load()).turns] == ["interrupted"]
        assert run(second.recover_interrupted_turns()) == (
            InterruptedTurn(scope=owner.conversation("two"), turn_id="turn_2", was="running"),
        )
        assert stored_states(root) == {"turn_1": "interrupted", "turn_2": "interrupted"}
    finally:
        run(second.aclose())


class LoadsBefore:
    """A handle whose first load returns a snapshot taken earlier: a restore that read before another committed."""

    def __init__(self, handle: ConversationHandle, early: ConversationSnapshot) -> None:
        self._handle = handle
        self._early: ConversationSnapshot | None = early

    def __getattr__(self, name: str) -> object:
        return getattr(self._handle, name)

    async def load(self, *, known_version: int | None = None, turn_index: bool = True) -> ConversationSnapshot:
        early, self._early = self._early, None
        return early or await self._handle.load(known_version=known_version, turn_index=turn_index)


def test_two_restores_racing_to_fold_in_an_interrupted_turn_both_succeed(
    tmp_path: Path, scope: ConversationScope
) -> None:
    first = open_store(tmp_path / "var")
    run(first.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1")))
    run(first.aclose())  # the process stops before the turn begins
    store = open_store(tmp_path / "var")
    try:
        handle = store.conversation(scope)
        early = run(handle.load(turn_index=False))  # e.g. the next turn starting …
        reading = run(restore_conversation(handle, now=T0))  # … while the conversation is read, which folds it in
        starting = run(restore_conversation(LoadsBefore(handle, early), now=T0))  # type: ignore[arg-type]
        assert starting.version == reading.version == 1
        assert [b.path for b in starting.timeline.blocks] == [b.path for b in reading.timeline.blocks]
        assert [t.state for t in run(handle.load()).turns] == ["interrupted"]
    finally:
        run(store.aclose())


def test_a_turn_interrupted_before_it_began_says_its_message_was_never_answered(
    tmp_path: Path, scope: ConversationScope
) -> None:
    first = open_store(tmp_path / "var")
    run(first.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1", "Deploy it?")))
    run(first.aclose())
    store = open_store(tmp_path / "var")
    try:
        restored = run(restore_conversation(store.conversation(scope), now=T0))
        prompt, status = restored.timeline.blocks
        assert (prompt.type, prompt.text) == (BlockType.USER_PROMPT, "Deploy it?")
        assert status.type == BlockType.TURN_STATUS
        assert "never answered" in (status.text or "")
        assert status.meta == {"state": "interrupted", "rounds": 0, "began": False}
    finally:
        run(store.aclose())


def test_the_turn_after_an_interrupted_one_commits_on_top_of_it(tmp_path: Path, scope: ConversationScope) -> None:
    first = open_store(tmp_path / "var")
    run(first.conversation(scope).accept_turn("turn_1", accepted_at=T0, head=prompt_only("turn_1", "Deploy it?")))
    run(first.aclose())
    store = open_store(tmp_path / "var")
    try:
        handle = store.conversation(scope)
        restored = run(restore_conversation(handle, now=T0))
        recorder = TurnRecorder(
            handle, "turn_2", base_version=restored.version, sources=restored.sources, stored=restored.stored
        )
        restored.timeline.contribute(*head("turn_2", "Are you there?"))
        run(recorder.begin(head("turn_2", "Are you there?"), started_at=T0))
        restored.timeline.contribute(*tool_round("turn_2", "c1"))
        run(recorder.record_round(tool_round("turn_2", "c1"), sources=restored.sources))
        restored.timeline.contribute(*final("turn_2"))
        run(
            recorder.commit(
                restored.timeline,
                sources=restored.sources,
                state="completed",
                ended_at=T0,
                final_round=final("turn_2"),
            )
        )
        again = run(restore_conversation(store.conversation(scope), now=T0))
        assert again.timeline.turn_ids() == ("turn_1", "turn_2")
        assert [t.state for t in run(handle.load()).turns] == ["interrupted", "completed"]
    finally:
        run(store.aclose())
