"""Embedded storage works in threads of its own: with every thread of the event loop's default executor taken (by
``exec.python`` runs waiting out their processes, say, or tools of a host of old), conversations are still opened,
written, committed and read, and the ``/readyz`` round-trip answers."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from storage_builders import T0, final, head, tool_round

from berth.default_plugins.storage.embedded import EmbeddedStorageBackend
from berth.default_plugins.storage.sqlite_meta import SqliteMetaStore
from berth.default_plugins.storage.threads import in_storage_thread
from berth.runtime.persistence import TurnRecorder, restore_conversation
from berth.storage.meta import ConversationMeta
from berth.storage.scope import OwnerScope

GUARD_S = 20.0
"""Far more than the work takes; on a host whose storage shares the default executor it never ends."""


async def test_storage_answers_while_the_default_executor_is_taken(tmp_path: Path) -> None:
    release = threading.Event()
    loop = asyncio.get_running_loop()
    taken = [loop.run_in_executor(None, release.wait) for _ in range(40)]  # more than any default executor has
    try:
        await asyncio.wait_for(_a_turn_stored_and_read(tmp_path / "var"), GUARD_S)
    finally:
        release.set()
        await asyncio.gather(*taken)


async def _a_turn_stored_and_read(root: Path) -> None:
    backend = EmbeddedStorageBackend(root)
    meta = SqliteMetaStore(root)
    await backend.open()
    await meta.open()
    try:
        scope = OwnerScope(tenant="acme", project="support", user_id="ada").conversation("conv-1")
        await meta.create_conversation(ConversationMeta(scope, None, "hello", T0, T0))
        handle = backend.conversations.conversation(scope)
        restored = await restore_conversation(handle, now=T0)
        timeline, pool = restored.timeline, restored.sources
        recorder = TurnRecorder(handle, "turn_1", base_version=restored.version, sources=pool, stored=restored.stored)
        blocks = head("turn_1")
        timeline.contribute(*blocks)
        await recorder.begin(blocks, started_at=T0, generation="g1")
        round_blocks = tool_round("turn_1", "c1")
        timeline.contribute(*round_blocks)
        await recorder.record_round(round_blocks, sources=pool)
        answer = final("turn_1")
        timeline.contribute(*answer)
        await recorder.commit(timeline, sources=pool, state="completed", ended_at=T0, final_round=answer)

        log = await handle.read_turn_log("turn_1")
        assert log.turn.state == "completed"
        assert (await meta.get_conversation(scope)) is not None
        assert (await backend.ping()).startswith("sqlite berth.sqlite3: wrote and read back")
        assert (await meta.ping()).startswith("sqlite meta.sqlite3: wrote and read back")
        assert (await in_storage_thread(lambda: threading.current_thread().name)).startswith("berth-storage")
    finally:
        await meta.aclose()
        await backend.aclose()
