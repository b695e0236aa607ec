"""A process killed (SIGKILL) while it writes leaves a consistent store: at most the open round is lost.

Each test starts a real child process that writes to a store as fast as it can and prints a line after
every write that returned; the test kills it once it has seen enough lines, wherever it is, then opens
the store again and checks what survived.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from storage_builders import T0, open_store

from berth.default_plugins.storage.sqlite import DATABASE_FILE
from berth.runtime.blocks import BlockType
from berth.runtime.persistence import restore_conversation
from berth.storage.scope import ConversationScope

HERE = Path(__file__).resolve().parent

WRITER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from storage_builders import T0, final, head, tool_round
from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.runtime.persistence import TurnRecorder, block_record, restore_conversation
from berth.storage.conversations import ArtifactWrite
from berth.storage.scope import ConversationScope

SCOPE = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="conv-1")


async def rounds(store):
    handle = store.conversation(SCOPE)
    await handle.begin_turn("turn_1", started_at=T0, generation=None, head=tuple(map(block_record, head("turn_1"))))
    n = 0
    while True:
        n += 1
        blocks = tool_round("turn_1", f"c{n}", result="r" * 20_000)
        await handle.append_round("turn_1", tuple(map(block_record, blocks)))
        print(n, flush=True)


async def commits(store):
    handle = store.conversation(SCOPE)
    restored = await restore_conversation(handle, now=T0)
    timeline, pool, version = restored.timeline, restored.sources, restored.version
    n = 0
    while True:
        n += 1
        turn_id = f"turn_{n}"
        recorder = TurnRecorder(handle, turn_id, base_version=version, sources=pool, stored=restored.stored)
        blocks = head(turn_id)
        timeline.contribute(*blocks)
        await recorder.begin(blocks, started_at=T0)
        work = tool_round(turn_id, "c1", result="r" * 20_000)
        timeline.contribute(*work)
        await recorder.record_round(work, sources=pool)
        answer = final(turn_id)
        timeline.contribute(*answer)
        artifact = ArtifactWrite(path=f"{turn_id}/outputs/report.md", data=f"report {n}".encode() * 1000)
        version = await recorder.commit(
            timeline, sources=pool, state="completed", ended_at=T0, final_round=answer, artifacts=(artifact,)
        )
        print(n, flush=True)


async def main():
    store = SqliteConversationStore(Path(sys.argv[1]))
    await store.open()
    await (rounds if sys.argv[2] == "rounds" else commits)(store)


asyncio.run(main())
"""


def kill_after(root: Path, mode: str, writes: int, tmp_path: Path) -> int:
    """Run the writer in ``mode`` and SIGKILL it after it reported ``writes`` writes; return how many it reported."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    child = subprocess.Popen(
        [sys.executable, str(script), str(root), mode, str(HERE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    reported = 0
    for line in child.stdout:
        reported = int(line)
        if reported >= writes:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert reported >= writes, f"the writer stopped early: {child.stderr.read() if child.stderr else ''}"
    return reported


def integrity(root: Path) -> str:
    with sqlite3.connect(root / DATABASE_FILE) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


def test_killed_mid_round_the_turn_is_interrupted_with_every_reported_round(
    tmp_path: Path, scope: ConversationScope
) -> None:
    root = tmp_path / "var"
    reported = kill_after(root, "rounds", 25, tmp_path)
    assert integrity(root) == "ok"
    store = open_store(root)
    snapshot = asyncio.run(store.conversation(scope).load())
    assert snapshot.interrupted_turn_ids == ("turn_1",)
    (log,) = snapshot.uncommitted
    indices = [entry.index for entry in log.rounds]
    assert indices == list(range(len(indices))), "rounds are contiguous: none half-written"
    assert len(indices) - 1 >= reported, "every round the writer saw stored is there"
    assert all(len(entry.blocks) == 3 for entry in log.rounds[1:]), "each round is whole"
    restored = asyncio.run(restore_conversation(store.conversation(scope), now=T0))
    assert restored.timeline.blocks[-1].type == BlockType.TURN_STATUS
    asyncio.run(store.aclose())


@pytest.mark.parametrize("writes", [2, 9])
def test_killed_mid_commit_the_store_holds_the_last_committed_state(
    tmp_path: Path, scope: ConversationScope, writes: int
) -> None:
    root = tmp_path / "var"
    reported = kill_after(root, "commits", writes, tmp_path)
    assert integrity(root) == "ok"
    store = open_store(root)
    handle = store.conversation(scope)
    restored = asyncio.run(restore_conversation(handle, now=T0))
    snapshot = asyncio.run(handle.load())
    committed = [t for t in snapshot.turns if t.state == "completed"]
    assert len(committed) >= reported
    turn_ids = restored.timeline.turn_ids()
    for turn in committed:
        assert turn.turn_id in turn_ids
        number = turn.turn_id.removeprefix("turn_")
        report = asyncio.run(handle.read_artifact(f"{turn.turn_id}/outputs/report.md"))
        assert report == f"report {number}".encode() * 1000
    for turn_id in restored.interrupted_turn_ids:
        blocks = [b for b in restored.timeline.blocks if b.turn_id == turn_id]
        assert blocks[-1].type == BlockType.TURN_STATUS
    completions = [b.turn_id for b in restored.timeline.blocks if b.type == BlockType.ASSISTANT_COMPLETION]
    assert completions == [t.turn_id for t in committed], "the timeline holds exactly the committed turns' answers"
    asyncio.run(store.aclose())
