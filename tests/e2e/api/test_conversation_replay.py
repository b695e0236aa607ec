"""A conversation read back (``GET …/conversations/{id}``) holds what its turns showed live: reasoning, tool calls and
their outcomes, follow-ups sent while a turn ran, notices, usage; a stopped turn keeps the answer it had streamed; the
first message titles the conversation as soon as its turn is accepted."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

pytestmark = pytest.mark.usefixtures("storage_kind")

READ_SKILL = (
    "<channel:thinking>Read the etiquette first.</channel:thinking>"
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "react.read", '
    '"params": {"paths": ["sk:greeting-etiquette"]}}}</channel:action>'
)
UNKNOWN_TOOL = (
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.wave", "params": {}}}</channel:action>'
)
GREET = (
    "<channel:thinking>Now greet Ada.</channel:thinking>"
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}'
    "</channel:action>"
)
GREETED = (
    '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hello, Ada! [[S:1]]</channel:answer>'
    '<channel:followups>{"followups": ["Again?"]}</channel:followups>'
)
LONG_TEXT = "A long answer that is still being written when the user stops it."
LONG_ANSWER = {  # the model pauses before its last chunk (in the follow-ups): the user stops the turn meanwhile
    "text": f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{LONG_TEXT}</channel:answer>'
    '<channel:followups>{"followups": ["never sent"]}</channel:followups>',
    "pause_s": 30,
}
PRICE = {"input": 3.0, "output": 15.0}


async def conversation_detail(stack: ApiStack, conversation: str) -> dict[str, Any]:
    response = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
    assert response.status_code == 200, response.text
    detail: dict[str, Any] = response.json()
    return detail


async def test_a_reopened_turn_shows_its_reasoning_tool_calls_notices_and_usage(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"  # what api_stack writes: priced under its file name
    platform = {"models": {"default": {"provider": "scripted", "model": str(script)}, "prices": {script.name: PRICE}}}
    async with api_stack(tmp_path, [READ_SKILL, UNKNOWN_TOOL, GREET, GREETED], platform=platform) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "greet Ada")
        completed = await stack.wait_for(started["events_url"], "turn.completed")
        (turn,) = (await conversation_detail(stack, conversation))["turns"]

    assert (turn["state"], turn["outcome"], turn["partial"]) == ("completed", "completed", False)
    assert turn["reasoning"] == ["Read the etiquette first.", "Now greet Ada."]
    read, wave, greet = turn["tools"]
    assert (read["tool_id"], read["ok"], read["params"]) == ("react.read", True, {"paths": ["sk:greeting-etiquette"]})
    assert (wave["tool_id"], wave["ok"]) == ("hello.wave", False)
    assert wave["summary"].startswith("unknown_tool: no tool 'hello.wave'")
    assert (greet["tool_id"], greet["ok"], greet["summary"], greet["params"]) == (
        "hello.greet",
        True,
        "Hello, Ada!",
        {"name": "Ada"},
    )
    assert read["seq"] < wave["seq"] < greet["seq"]
    assert [notice["code"] for notice in turn["notices"]] == ["unknown_tool"]
    assert turn["answer"] == "Hello, Ada! [Greeting (Wikipedia)](https://en.wikipedia.org/wiki/Greeting)"
    assert turn["followups"] == ["Again?"]
    assert turn["status_message"] is None
    live = completed["usage"]
    assert turn["usage"]["input_tokens"] == live["input_tokens"] > 0
    assert turn["usage"]["output_tokens"] == live["output_tokens"] > 0
    assert live["cost_usd"] is not None
    assert math.isclose(turn["usage"]["cost_usd"], live["cost_usd"], rel_tol=1e-9)


async def test_a_stopped_turn_keeps_the_answer_it_had_streamed_for_the_user_and_the_model(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [LONG_ANSWER, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write a long answer")
        shown: list[str] = []
        async with stack.client.stream("GET", started["events_url"], headers=stack.auth()) as response:
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "channel.delta" and '"answer"' in line:
                    shown.append(json.loads(line[6:])["text"])
                    if "".join(shown) == LONG_TEXT:  # all of it is on the user's screen; the model pauses
                        break
        cancel = f"/v1/acme/support/conversations/{conversation}/turns/{started['turn_id']}/cancel"
        assert (await stack.client.post(cancel, headers=stack.auth())).json()["cancelled"] is True
        failed = await stack.wait_for(started["events_url"], "turn.failed")
        assert failed["code"] == "cancelled"

        (turn,) = (await conversation_detail(stack, conversation))["turns"]
        assert (turn["state"], turn["partial"]) == ("cancelled", True)
        assert turn["answer"] == LONG_TEXT
        assert turn["followups"] == [], "the turn was stopped before it suggested any"
        assert turn["status_message"] == "the turn was cancelled"

        following = await stack.start_turn(conversation, "go on")
        await stack.wait_for(following["events_url"], "turn.completed")
        prompt = stack.model().requests[-1].prompt
        assert turn["answer"] in "".join(part.text for part in prompt.parts()), "the model sees what it had written"


async def test_a_followup_shows_in_the_reopened_turn_after_the_tool_call_it_arrived_during(tmp_path: Path) -> None:
    close_gate()
    async with api_stack(tmp_path, [HOLD, ANSWER], bundles=gate_bundles(tmp_path)) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold, then answer")
        await stack.wait_for(started["events_url"], "tool.call")
        sent = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns/{started['turn_id']}/events",
            json={"kind": "followup", "message": "and mention the weather"},
            headers=stack.auth(),
        )
        assert sent.status_code == 202, sent.text
        open_gate()
        await stack.wait_for(started["events_url"], "turn.completed")
        (turn,) = (await conversation_detail(stack, conversation))["turns"]

    (hold,) = turn["tools"]
    (followup,) = turn["live_events"]
    assert (hold["tool_id"], hold["ok"], hold["summary"]) == ("gate.hold", True, "through")
    assert (followup["kind"], followup["message"], followup["attachments"]) == (
        "followup",
        "and mention the weather",
        [],
    )
    assert hold["seq"] < followup["seq"]


async def test_the_first_message_titles_the_conversation_while_its_turn_runs_and_a_refused_one_does_not(
    tmp_path: Path,
) -> None:
    close_gate()
    gateway = {"limits": {"default": {"concurrent_turns": 1}}}
    async with api_stack(tmp_path, [HOLD, ANSWER], bundles=gate_bundles(tmp_path), gateway=gateway) as stack:
        held = await stack.conversation()
        started = await stack.start_turn(held, "hold the line please")
        await stack.wait_for(started["events_url"], "tool.call")
        refused_in = await stack.conversation()
        refused = await stack.client.post(
            f"/v1/acme/support/conversations/{refused_in}/turns", json={"message": "me too"}, headers=stack.auth()
        )
        assert refused.status_code == 429, refused.text
        listed = (await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())).json()["items"]
        titles = {item["id"]: (item["title"], item["title_source"]) for item in listed}
        assert titles[held] == ("hold the line please", "message"), "titled while the turn still runs"
        assert titles[refused_in] == (None, None)
        open_gate()
        await stack.wait_for(started["events_url"], "turn.completed")
