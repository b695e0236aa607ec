"""Live events over HTTP (SPEC §4.1): follow-ups and steers sent while a turn runs, and after it ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

from berth.storage.scope import ConversationScope

pytestmark = pytest.mark.usefixtures("storage_kind")

LONG_ANSWER = {
    "text": '<channel:action>{"action": "complete"}</channel:action><channel:answer>A long answer that is '
    "still being written when the user steers</channel:answer>",
    "pause_s": 30,
}
STEERED_ANSWER = (
    '<channel:action>{"action": "complete"}</channel:action><channel:answer>in French then</channel:answer>'
)


@asynccontextmanager
async def gated(tmp_path: Path, responses: list[Any], **options: Any) -> AsyncIterator[ApiStack]:
    """A stack serving the gate bundle: a turn that calls ``gate.hold`` runs until the test opens the gate."""
    close_gate()
    async with api_stack(tmp_path, responses, bundles=gate_bundles(tmp_path), **options) as stack:
        yield stack


async def follow(stack: ApiStack, url: str, until: str, who: str = "acme") -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Yield (event, data) of a turn's stream as they come, ending after the first ``until`` event."""
    import json

    async with stack.client.stream("GET", url, headers=stack.auth(who)) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                yield event, json.loads(line[6:])
                if event == until:
                    return


def send(stack: ApiStack, conversation: str, turn_id: str, kind: str, message: str, who: str = "acme") -> Any:
    return stack.client.post(
        f"/v1/acme/support/conversations/{conversation}/turns/{turn_id}/events",
        json={"kind": kind, "message": message},
        headers=stack.auth(who),
    )


async def test_a_followup_mid_turn_is_stored_at_once_streamed_and_seen_at_the_next_decision(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold, then answer")
        turn_id = started["turn_id"]
        await stack.wait_for(started["events_url"], "tool.call")  # the turn is in gate.hold now

        sent = await send(stack, conversation, turn_id, "followup", "and mention the weather")
        assert sent.status_code == 202, sent.text
        accepted = sent.json()
        assert accepted == {
            "turn_id": turn_id,
            "kind": "followup",
            "started_turn": False,
            "path": f"ar:{turn_id}.user.followup.1",
            "events_url": started["events_url"],
        }
        # stored before the answer: the turn log holds it while the turn still runs
        scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=conversation)
        assert stack.services.store is not None
        logged = await stack.services.store.conversation(scope).read_turn_log(turn_id)
        assert logged.turn.state == "running"
        paths = [record.path for entry in logged.rounds for record in entry.blocks]
        assert f"ar:{turn_id}.user.followup.1" in paths

        open_gate()
        events = [item async for item in follow(stack, started["events_url"], "turn.completed")]
        kinds = [kind for kind, _ in events]
        assert kinds.index("user.followup") < kinds.index("turn.completed")
        followup = dict(events)["user.followup"]
        assert (followup["kind"], followup["message"]) == ("followup", "and mention the weather")

        after = stack.model().requests[-1].prompt  # the round after gate.hold: the decision that answers
        assert "and mention the weather" in after.section_text("current_turn")
        announce = after.section_text("announce")
        assert "[LIVE EVENTS]" in announce
        assert f"NEW followup ar:{turn_id}.user.followup.1" in announce
        assert "and mention the weather" not in stack.model().requests[0].prompt.section_text("current_turn")


async def test_a_steer_stops_the_answer_being_written_and_the_loop_decides_again(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [LONG_ANSWER, STEERED_ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write a long answer")
        await stack.wait_for(started["events_url"], "channel.delta")  # the model is writing; it pauses for 30 s

        sent = await send(stack, conversation, started["turn_id"], "steer", "answer in French instead")
        assert sent.status_code == 202, sent.text
        assert sent.json()["path"] == f"ar:{started['turn_id']}.user.steer.1"

        events = [item async for item in follow(stack, started["events_url"], "turn.completed")]
        kinds = [kind for kind, _ in events]
        cancelled = [data for kind, data in events if kind == "notice" and data.get("code") == "stream_cancelled"]
        assert len(cancelled) == 1 and cancelled[0]["round"] == 1
        assert kinds.index("user.steer") < kinds.index("turn.completed")
        assert events[-1][1]["answer"] == "in French then"
        requests = stack.model().requests
        assert len(requests) == 2
        assert "answer in French instead" in requests[1].prompt.section_text("current_turn")
        assert "NEW steer" in requests[1].prompt.section_text("announce")

        detail = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        (turn,) = detail.json()["turns"]
        assert turn["answer"] == "in French then"


async def test_with_steer_next_decision_the_answer_is_not_cut_and_the_steer_starts_the_next_turn(
    tmp_path: Path,
) -> None:
    quick = dict(LONG_ANSWER, pause_s=0.5)
    platform = {"react": {"steer": "next_decision"}}
    async with api_stack(tmp_path, [quick, STEERED_ANSWER], platform=platform) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write a long answer")
        await stack.wait_for(started["events_url"], "channel.delta")
        sent = await send(stack, conversation, started["turn_id"], "steer", "answer in French instead")
        assert sent.status_code == 202
        events = [item async for item in follow(stack, started["events_url"], "turn.completed")]
        completed = events[-1][1]
        assert completed["answer"].startswith("A long answer")  # the response was written to its end
        # the model never saw the steer in this turn: it starts the next one
        next_turn = completed["next_turn"]
        following = await stack.wait_for(next_turn["events_url"], "turn.completed")
        assert following["answer"] == "in French then"
        assert stack.model().requests[-1].prompt.section_text("current_turn").count("answer in French instead") == 1


async def test_an_event_after_the_turn_ended_starts_the_next_turn(tmp_path: Path) -> None:
    answer = '<channel:action>{"action": "complete"}</channel:action><channel:answer>ok</channel:answer>'
    async with api_stack(tmp_path, [answer, answer]) as stack:
        conversation = await stack.conversation()
        first = await stack.start_turn(conversation, "hello")
        await stack.wait_for(first["events_url"], "turn.completed")

        sent = await send(stack, conversation, first["turn_id"], "followup", "one more thing")
        assert sent.status_code == 202, sent.text
        accepted = sent.json()
        assert accepted["started_turn"] is True and accepted["path"] is None
        assert accepted["turn_id"] != first["turn_id"]
        await stack.wait_for(accepted["events_url"], "turn.completed")
        detail = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        prompts = [(turn["turn_id"], turn["prompt"]) for turn in detail.json()["turns"]]
        assert prompts == [(first["turn_id"], "hello"), (accepted["turn_id"], "one more thing")]


async def test_two_subscribers_of_a_turn_both_see_its_live_events(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold")
        await stack.wait_for(started["events_url"], "tool.call")

        async def subscriber() -> list[tuple[str, dict[str, Any]]]:
            return [item async for item in follow(stack, started["events_url"], "turn.completed")]

        first, second = asyncio.create_task(subscriber()), asyncio.create_task(subscriber())
        sent = await send(stack, conversation, started["turn_id"], "followup", "both of you should see this")
        assert sent.status_code == 202
        open_gate()
        for events in (await first, await second):
            messages = [data["message"] for kind, data in events if kind == "user.followup"]
            assert messages == ["both of you should see this"]


async def test_a_forged_turn_or_another_tenants_turn_is_not_found(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold")
        await stack.wait_for(started["events_url"], "tool.call")

        forged = await send(stack, conversation, "turn_forged123", "followup", "hi")
        assert forged.status_code == 404
        assert forged.json()["error"]["code"] == "not_found"

        theirs = await stack.conversation(who="globex", tenant="globex", project="research")
        crossed = await stack.client.post(
            f"/v1/globex/research/conversations/{theirs}/turns/{started['turn_id']}/events",
            json={"kind": "steer", "message": "take over"},
            headers=stack.auth("globex"),
        )
        assert crossed.status_code == 404
        into_acme = await send(stack, conversation, started["turn_id"], "steer", "take over", who="globex")
        assert into_acme.status_code in (403, 404)

        bad = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns/{started['turn_id']}/events",
            json={"kind": "shout", "message": "x"},
            headers=stack.auth(),
        )
        assert bad.status_code == 422
        open_gate()
        completed = await stack.wait_for(started["events_url"], "turn.completed")
        assert "next_turn" not in completed  # nothing was delivered to it


async def test_a_followup_that_arrives_while_the_answer_is_written_starts_the_next_turn(tmp_path: Path) -> None:
    slow = dict(LONG_ANSWER, pause_s=0.5)
    async with api_stack(tmp_path, [slow, STEERED_ANSWER], platform={"react": {"steer": "next_decision"}}) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write")
        await stack.wait_for(started["events_url"], "channel.delta")
        sent = await send(stack, conversation, started["turn_id"], "followup", "and then a summary")
        assert sent.json()["turn_id"] == started["turn_id"]
        completed = await stack.wait_for(started["events_url"], "turn.completed")
        next_turn = completed["next_turn"]
        assert next_turn["message"] == "and then a summary", "a client shows the new turn's own message"
        await stack.wait_for(next_turn["events_url"], "turn.completed")
        detail = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        turns = detail.json()["turns"]
        assert [turn["prompt"] for turn in turns] == ["write", "and then a summary"]
        assert turns[1]["turn_id"] == next_turn["turn_id"]
