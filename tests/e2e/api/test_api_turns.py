"""Turns over HTTP: start returns at once, events stream as SSE, resume with Last-Event-ID, cancel."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from api_stack import api_stack
from slow_bundle import WAIT, slow_bundle

from berth.turns.redis_events import EPOCH_SEQS

pytestmark = pytest.mark.usefixtures("storage_kind")

ACTION = '<channel:thinking>t</channel:thinking><channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}</channel:action>'  # noqa: E501
READ_SKILL = '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "react.read", "params": {"paths": ["sk:greeting-etiquette"]}}}</channel:action>'  # noqa: E501
ANSWER = (
    '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hello, Ada! Use names [[S:1]].'
    '</channel:answer><channel:followups>{"followups": ["Again?"]}</channel:followups>'
)


async def test_a_turn_streams_every_event_and_is_stored(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [READ_SKILL, ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "greet Ada")
        events = await stack.events(started["events_url"])
        turn_id = started["turn_id"]
        assert [event_id for event_id, _, _ in events] == [f"{turn_id}:{n}" for n in range(1, len(events) + 1)]
        kinds = [kind for _, kind, _ in events]
        assert kinds[0] == "turn.started"
        assert kinds[-1] == "turn.completed"
        for kind in ("channel.delta", "channel.done", "tool.call", "tool.result", "citation.sources"):
            assert kind in kinds
        answer = "".join(d["text"] for _, k, d in events if k == "channel.delta" and d["marker"] == "answer")
        assert answer == "Hello, Ada! Use names [Greeting (Wikipedia)](https://en.wikipedia.org/wiki/Greeting)."
        completed = events[-1][2]
        assert completed["followups"] == ["Again?"]
        assert completed["sources_used"][0]["url"] == "https://en.wikipedia.org/wiki/Greeting"
        detail = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        (turn,) = detail["turns"]
        assert (turn["turn_id"], turn["state"], turn["prompt"]) == (turn_id, "completed", "greet Ada")
        assert turn["citations"] == [
            {"sid": 1, "url": "https://en.wikipedia.org/wiki/Greeting", "title": "Greeting (Wikipedia)"}
        ]
        assert turn["followups"] == ["Again?"]


async def test_reconnecting_with_last_event_id_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hi")
        first = await stack.events(started["events_url"], limit=5)
        rest = await stack.events(started["events_url"], last_event_id=first[-1][0])
        everything = await stack.events(started["events_url"])
        assert [e[0] for e in first + rest] == [e[0] for e in everything]
        assert first + rest == everything


async def test_a_last_event_id_with_thousands_of_digits_is_a_400_not_a_server_error(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hi")
        oversized = f"{started['turn_id']}:{'7' * 5000}"
        for headers, params in (({"Last-Event-ID": oversized}, {}), ({}, {"last_event_id": oversized})):
            answer = await stack.client.get(started["events_url"], headers={**stack.auth(), **headers}, params=params)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["code"] == "last_event_id_invalid"
            assert "5000 digits" in error["message"]
            assert ("Last-Event-ID" if headers else "last_event_id") in error["message"]
        resumed = await stack.events(started["events_url"], last_event_id=f"{started['turn_id']}:{'9' * 18}")
        assert [kind for _, kind, _ in resumed] in ([], ["turn.completed"])  # nothing after it but the turn's end


async def test_a_client_disconnect_does_not_cancel_the_turn(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hi")
        await stack.events(started["events_url"], limit=1)
        rest = await stack.events(started["events_url"], last_event_id=f"{started['turn_id']}:1")
        assert rest[-1][1] == "turn.completed"


async def test_cancel_stops_the_running_tool_and_records_the_turn_as_cancelled(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [WAIT], bundles={"slow": slow_bundle(tmp_path)}) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "wait")
        until_call = await stack.events(started["events_url"], limit=2)
        assert until_call[-1][1] == "tool.call"
        url = f"/v1/acme/support/conversations/{conversation}/turns/{started['turn_id']}/cancel"
        cancelled = await stack.client.post(url, headers=stack.auth())
        assert cancelled.status_code == 202
        assert cancelled.json()["cancelled"] is True
        events = await stack.events(started["events_url"], last_event_id=until_call[-1][0])
        assert events[-1][1] == "turn.failed"
        assert events[-1][2]["code"] == "cancelled"
        detail = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        assert detail["turns"][0]["state"] == "cancelled"
        again = await stack.client.post(url, headers=stack.auth())
        assert again.json()["cancelled"] is False


async def test_feedback_is_stored_and_reported(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER, ANSWER]) as stack:
        conversation = await stack.conversation()
        turns = []
        for _ in range(2):
            started = await stack.start_turn(conversation, "hi")
            await stack.events(started["events_url"])
            turns.append(started["turn_id"])
        base = f"/v1/acme/support/conversations/{conversation}/turns"
        ok = await stack.client.post(
            f"{base}/{turns[0]}/feedback", json={"reaction": "ok", "text": "great"}, headers=stack.auth()
        )
        bad = await stack.client.post(f"{base}/{turns[1]}/feedback", json={"reaction": "not_ok"}, headers=stack.auth())
        assert (ok.status_code, bad.status_code) == (200, 200)
        report = await stack.client.get(
            "/v1/acme/support/feedback",
            params={"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"},
            headers=stack.auth(),
        )
        assert report.json()["satisfaction_rate"] == 0.5
        detail = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        assert detail["turns"][0]["feedback"][0]["text"] == "great"


async def test_files_of_outputs_are_downloadable(tmp_path: Path) -> None:
    write = json.dumps(
        {
            "action": "call_tool",
            "tool_call": {
                "tool_id": "react.write",
                "params": {"path": "outputs/report.md", "content": "# Report\n", "kind": "file"},
            },
        }
    )
    async with api_stack(tmp_path, [f"<channel:action>{write}</channel:action>", ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write")
        await stack.events(started["events_url"])
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{started['turn_id']}.outputs/report.md"
        response = await stack.client.get(url, headers=stack.auth())
        assert response.status_code == 200
        assert response.text == "# Report\n"
        assert response.headers["content-disposition"].startswith('attachment; filename="report.md"')
        hidden = url.replace(".outputs/report.md", ".files/report.md")
        assert (await stack.client.get(hidden, headers=stack.auth())).status_code == 404


async def test_attachments_are_sniffed_and_shown_to_the_model(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER, ANSWER]) as stack:
        conversation = await stack.conversation()
        url = f"/v1/acme/support/conversations/{conversation}/turns"
        files = {"notes": ("notes.txt", b"The launch is on Tuesday.", "application/pdf")}
        response = await stack.client.post(url, data={"message": "read this"}, files=files, headers=stack.auth())
        assert response.status_code == 202, response.text
        await stack.events(response.json()["events_url"])
        detail = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        attachment = detail["turns"][0]["attachments"][0]
        assert (attachment["name"], attachment["mime"]) == ("notes.txt", "text/plain")
        exe = {"tool": ("tool.txt", b"MZ\x90\x00" + bytes(200), "text/plain")}
        refused = await stack.client.post(url, data={"message": "run this"}, files=exe, headers=stack.auth())
        assert refused.status_code == 415
        assert refused.json()["error"]["code"] == "attachment_type"


async def test_the_next_turn_may_start_as_soon_as_the_last_one_completed(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], repeat=True) as stack:
        conversation = await stack.conversation()
        for n in range(5):
            started = await stack.start_turn(conversation, f"message {n}")
            events = await stack.events(started["events_url"])
            assert events[-1][1] == "turn.completed"


OPS_BUNDLE = """
from fastapi import APIRouter
from pydantic import BaseModel
from berth import AgentSpec, BundleInfo, hookimpl

class Props(BaseModel):
    greeting: str = "hi"

@hookimpl
def berth_bundle():
    return BundleInfo(id="opsy", version="1", props_model=Props)

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="ops")

@hookimpl
def berth_routes(ctx):
    router = APIRouter()

    @router.get("/status")
    async def status() -> dict:
        return {"tenant": ctx.tenant, "project": ctx.project, "greeting": ctx.props.greeting}

    @router.post("/echo")
    async def echo(body: dict) -> dict:
        return {"echo": body}

    return router
"""


async def test_bundle_ops_routes_are_mounted_scoped_and_authenticated(tmp_path: Path) -> None:
    folder = tmp_path / "opsy"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(OPS_BUNDLE))
    async with api_stack(tmp_path, [ANSWER], bundles={"opsy": {"source": {"path": str(folder)}}}) as stack:
        base = "/v1/acme/support/bundles/opsy/ops"
        status = await stack.client.get(f"{base}/status", headers=stack.auth())
        assert status.status_code == 200, status.text
        assert status.json() == {"tenant": "acme", "project": "support", "greeting": "hi"}
        echoed = await stack.client.post(f"{base}/echo", json={"a": 1}, headers=stack.auth())
        assert echoed.json() == {"echo": {"a": 1}}
        assert (await stack.client.get(f"{base}/status")).status_code == 401
        assert (await stack.client.get(f"{base}/missing", headers=stack.auth())).status_code == 404


async def test_a_client_accepting_an_event_stream_gets_the_turn_in_one_request(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        url = f"/v1/acme/support/conversations/{conversation}/turns"
        headers = {**stack.auth(), "Accept": "text/event-stream"}
        async with stack.client.stream("POST", url, json={"message": "greet Ada"}, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events_url = response.headers["content-location"]
            body = (await response.aread()).decode()
        ids = [line.removeprefix("id: ") for line in body.splitlines() if line.startswith("id: ")]
        kinds = [line.removeprefix("event: ") for line in body.splitlines() if line.startswith("event: ")]
        assert (kinds[0], kinds[-1]) == ("turn.started", "turn.completed")
        turn_id = ids[0].split(":")[0]
        assert events_url == f"{url}/{turn_id}/events"
        resumed = await stack.events(events_url, last_event_id=ids[2])
        assert [event_id for event_id, _, _ in resumed] == ids[3:], "the same log: a dropped stream resumes"


@pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True)
async def test_a_stream_whose_worker_died_before_the_end_event_ends_with_the_stored_end(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ACTION, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "greet Ada")
        told = await stack.events(started["events_url"])
        assert told[-1][1] == "turn.completed"
        # what a worker killed after the commit leaves: the events up to the answer, then the log closed by the
        # worker that found the turn committed, without the end event the dead one never wrote
        assert stack.services.distributed is not None
        redis = stack.services.distributed.redis
        key = f"berth:events:{started['turn_id']}"
        kept = await redis.xrange(key, count=len(told) - 1)
        await redis.delete(key)
        for entry_id, fields in kept:
            await redis.xadd(key, fields, id=entry_id)
        await redis.xadd(key, {b"end": b""}, id=f"{len(told) - 1}-1")
        replayed = await stack.events(started["events_url"])
        assert [e[1] for e in replayed[:-1]] == [e[1] for e in told[:-1]]
        last_id, kind, data = replayed[-1]
        # numbered after the attempt's epoch, not after the client's position: that number may have named an event
        # Redis lost, which another client read before the loss (one number never names two events)
        after_epoch = f"{started['turn_id']}:{EPOCH_SEQS + 1}"
        assert (last_id, kind) == (after_epoch, "turn.completed")
        assert (data["replayed"], data["answer"]) == (True, told[-1][2]["answer"])
        await redis.delete(key)  # Redis lost it all (a restart): the store still tells how the turn ended
        (only,) = await stack.events(started["events_url"])
        assert only == (after_epoch, "turn.completed", data), "not number 1, which named turn.started"
        assert told[0][0] == f"{started['turn_id']}:1"
