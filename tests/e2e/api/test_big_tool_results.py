"""A big tool result is capped where it is stored (the timeline, every prompt) by ``react.result_preview_chars``,
and kept whole as a file of its turn: the files route downloads it, and ``react.read`` reads it in a later turn."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from api_stack import api_stack

from berth.storage.scope import ConversationScope

pytestmark = pytest.mark.usefixtures("storage_kind")

LINES = 40_000
"""The tool's result: 40,000 numbered lines, about 400,000 characters."""
CAP = 1_000
FULL = "".join(f"line {n:05d} of the big result\n" for n in range(1, LINES + 1))

BUNDLE_SOURCE = f'''
from berth import AgentSpec, BundleInfo, hookimpl, tool

@tool
async def dump() -> str:
    """A very long result."""
    return "".join(f"line {{n:05d}} of the big result\\n" for n in range(1, {LINES} + 1))

@hookimpl
def berth_bundle():
    return BundleInfo(id="big", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="dump, then answer")

@hookimpl
def berth_tools(ctx):
    return [dump]
'''


def call(tool_id: str, **params: Any) -> str:
    body = {"action": "call_tool", "tool_call": {"tool_id": tool_id, "params": params}}
    return f"<channel:action>{json.dumps(body)}</channel:action>"


DONE = '<channel:action>{"action": "complete"}</channel:action><channel:answer>done</channel:answer>'


def big_bundle(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"big": {"source": {"path": str(folder)}}}


async def test_a_big_result_is_capped_in_storage_and_kept_whole_as_a_file(tmp_path: Path) -> None:
    turn_id = "turn_big1"
    script = [call("big.dump"), DONE, call("react.read", paths=[f"tc:{turn_id}.c1.result"], lines="30000-30002"), DONE]
    async with api_stack(
        tmp_path, script, bundles=big_bundle(tmp_path), platform={"react": {"result_preview_chars": CAP}}
    ) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "dump it", turn_id=turn_id)
        events = await stack.events(started["events_url"])
        result = next(data for _, kind, data in events if kind == "tool.result")
        assert result["paths"] == [f"tc:{turn_id}.c1.result"]
        assert events[-1][1] == "turn.completed"

        # what is stored: a preview of CAP characters and a pointer, not the whole result
        assert stack.services.store is not None
        scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=conversation)
        snapshot = await stack.services.store.conversation(scope).load()
        assert snapshot.timeline is not None
        stored = next(record for record in snapshot.timeline if record.path == f"tc:{turn_id}.c1.result")
        text = json.loads(stored.json)["text"]
        assert text.startswith(FULL[:CAP])
        assert len(text) < CAP + 300
        assert f"{len(FULL)} characters in all" in text
        assert sum(len(record.json) for record in snapshot.timeline) < 20 * CAP
        seen = stack.model().requests[1].prompt.section_text("current_turn")
        assert FULL[:CAP] in seen and FULL[: CAP + 100] not in seen

        # the whole result, kept as a file of the turn
        url = f"/v1/acme/support/conversations/{conversation}/files/tc:{turn_id}.c1.result"
        download = await stack.client.get(url, headers=stack.auth())
        assert download.status_code == 200, download.text
        assert download.text == FULL
        assert download.headers["content-type"] == "text/plain; charset=utf-8"
        assert download.headers["content-disposition"].startswith(f'attachment; filename="{turn_id}.c1.result.txt"')
        assert download.headers["content-security-policy"] == "sandbox"
        refused = await stack.client.get(url, headers=stack.auth("globex"))
        assert refused.status_code == 404
        small = await stack.client.get(url.replace(".c1.result", ".c9.result"), headers=stack.auth())
        assert small.status_code == 404

        # a later turn reads any part of it
        following = await stack.start_turn(conversation, "what is on line 30001?")
        await stack.wait_for(following["events_url"], "turn.completed")
        read = stack.model().requests[-1].prompt.section_text("current_turn")
        assert "line 30001 of the big result" in read
