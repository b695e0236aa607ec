"""Live events in the store: appended to the turn log when they arrive, referenced by the commit that takes them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_builders import T0, final, head, open_store, tool_round

from berth.runtime.live import LiveEvent, LiveInbox
from berth.runtime.persistence import TurnRecorder, restore_conversation
from berth.storage.scope import OwnerScope

ADA = OwnerScope(tenant="acme", project="support", user_id="ada")


def test_a_live_event_is_logged_at_once_kept_once_by_the_commit_and_none_after_it(tmp_path: Path) -> None:
    store = open_store(tmp_path)

    async def scenario() -> None:
        handle = store.conversation(ADA.conversation("c_live"))
        restored = await restore_conversation(handle, now=T0)
        recorder = TurnRecorder(handle, "turn_l", base_version=0, sources=restored.sources, stored=restored.stored)
        timeline = restored.timeline
        timeline.contribute(*head("turn_l"))
        await recorder.begin(head("turn_l"), started_at=T0)
        inbox = LiveInbox("turn_l", clock=lambda: T0)
        assert inbox.attach(recorder.record_live) == []

        await inbox.deliver(LiveEvent("followup", "also the logs", attachments=(("a.txt", "text/plain", b"x"),)))
        logged = await handle.read_turn_log("turn_l")
        assert [[r.path for r in entry.blocks] for entry in logged.rounds][-1] == [
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
        assert await recorder.record_live(head("turn_l")[:1]) is None  # the turn is committed: nothing is appended

        again = await restore_conversation(handle, now=T0)
        paths = [block.path for block in again.timeline.blocks]
        assert paths.count("ar:turn_l.user.followup.1") == 1
        assert paths.index("ar:turn_l.user.followup.1") > paths.index("tc:turn_l.c1.call")
        log = await handle.read_turn_log("turn_l")
        every = [r.path for entry in log.rounds for r in entry.blocks]
        assert every.count("ar:turn_l.user.followup.1") == 1

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(store.aclose())
