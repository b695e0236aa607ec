"""What a host finds on start-up of turns it did not finish, and what it leaves alone (in-process hosts).

The kill -9 test (``test_turn_durability.py``) checks that no acknowledged turn is lost across real crashes;
these check what follows one in detail: the conversation shows the interrupted turn, a resumed stream ends
it, the next turn's model sees the unanswered message, and a host sharing the storage root with a live
one never takes the other's running turns for interrupted ones.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from api_stack import api_stack

from berth.default_plugins.models.scripted import ScriptedProvider
from berth.models.protocol import ModelEvent, ModelRequest
from berth.runtime.blocks import BlockType
from berth.runtime.loop import record_block
from berth.runtime.persistence import block_record
from berth.storage.scope import ConversationScope

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Yes, deployed.</channel:answer>'
CALL = {"action": "call_tool", "notes": "", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}
SCOPE = "/v1/acme/support"


@pytest.fixture
def prompts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every prompt the scripted model is sent, in order."""
    sent: list[str] = []
    original = ScriptedProvider.stream

    def stream(self: ScriptedProvider, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        sent.append("\n".join(part.text for part in request.prompt.parts()))
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "stream", stream)
    return sent


def sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of each frame of an SSE body."""
    frames = []
    for frame in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
        frames.append((fields["event"], json.loads(fields["data"])))
    return frames


async def test_a_turn_left_unfinished_comes_back_interrupted_and_the_next_turn_sees_its_message(
    tmp_path: Path, prompts: list[str]
) -> None:
    async with api_stack(tmp_path, [ANSWER]) as before:
        conversation = await before.conversation()
        scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=conversation)
        # What the API stores before its 202, for a turn whose process then stops before running it.
        prompt = record_block(
            BlockType.USER_PROMPT, "turn_lost", "user.prompt", datetime.now(UTC), "user", text="Deploy it?"
        )
        assert before.services.store is not None
        await before.services.store.conversation(scope).accept_turn(
            "turn_lost", accepted_at=prompt.ts, head=(block_record(prompt),)
        )

    async with api_stack(tmp_path, [ANSWER]) as after:
        assert after.services.store is not None
        assert [t.turn_id for t in after.services.store.interrupted_at_open] == ["turn_lost"]
        turns = f"{SCOPE}/conversations/{conversation}/turns"
        resumed = await after.client.get(
            f"{turns}/turn_lost/events", headers={**after.auth(), "Last-Event-ID": "turn_lost:4"}
        )
        assert resumed.status_code == 200
        assert sse(resumed.text) == [
            (
                "turn.failed",
                {
                    "code": "interrupted",
                    "message": "the turn was interrupted: the process serving it stopped before it finished",
                    "turn_id": "turn_lost",
                },
            )
        ]
        assert "id: turn_lost:5\n" in resumed.text

        detail = (await after.client.get(f"{SCOPE}/conversations/{conversation}", headers=after.auth())).json()
        assert [(t["turn_id"], t["state"], t["prompt"]) for t in detail["turns"]] == [
            ("turn_lost", "interrupted", "Deploy it?")
        ]

        headers = {**after.auth(), "Accept": "text/event-stream"}
        next_turn = await after.client.post(turns, json={"message": "Are you there?"}, headers=headers)
        assert sse(next_turn.text)[-1][0] == "turn.completed"
        (seen,) = prompts
        assert seen.index("Deploy it?") < seen.index("never answered") < seen.index("Are you there?")
        detail = (await after.client.get(f"{SCOPE}/conversations/{conversation}", headers=after.auth())).json()
        assert [(t["state"], t["prompt"], t["answer"]) for t in detail["turns"]] == [
            ("interrupted", "Deploy it?", None),
            ("completed", "Are you there?", "Yes, deployed."),
        ]


async def test_a_host_sharing_the_storage_root_leaves_the_turns_of_a_live_one_alone(tmp_path: Path) -> None:
    slow = [
        {"delay_s": 0.6, "text": f"<channel:action>{json.dumps(CALL)}</channel:action>"},
        {"delay_s": 0.3, "text": ANSWER},
    ]
    async with api_stack(tmp_path, slow) as serving, api_stack(tmp_path, slow) as other:
        conversation = await serving.conversation()
        started = await serving.start_turn(conversation, "Deploy it?")
        assert (await serving.events(started["events_url"], limit=1))[0][1] == "turn.started"

        assert other.services.store is not None and other.services.store.interrupted_at_open == ()
        read = await other.client.get(f"{SCOPE}/conversations/{conversation}", headers=other.auth())
        assert read.status_code == 200
        assert all(t["state"] != "interrupted" for t in read.json()["turns"]), "its process is alive"
        elsewhere = await other.client.get(started["events_url"], headers=other.auth())
        assert (elsewhere.status_code, elsewhere.json()["error"]["code"]) == (409, "turn_elsewhere")

        events = await serving.events(started["events_url"])
        assert events[-1][1] == "turn.completed", events[-1]
        detail = (await other.client.get(f"{SCOPE}/conversations/{conversation}", headers=other.auth())).json()
        assert [(t["state"], t["prompt"]) for t in detail["turns"]] == [("completed", "Deploy it?")]
