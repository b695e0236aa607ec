"""Conversation titles over HTTP: made by the summarizer after the first turn, off the critical path, editable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_stack import ApiStack, api_stack

pytestmark = pytest.mark.usefixtures("storage_kind")


ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>It is sunny.</channel:answer>'


def summarizer(tmp_path: Path, *replies: dict[str, Any]) -> dict[str, Any]:
    """``platform`` settings with a scripted summarizer role that answers ``replies`` in turn."""
    script = tmp_path / "summarizer.yaml"
    script.write_text(yaml.safe_dump({"responses": list(replies)}))
    default = {"provider": "scripted", "model": str(tmp_path / "script.yaml")}  # the script api_stack writes
    roles = {"summarizer": {"provider": "scripted", "model": str(script)}}
    return {"models": {"default": default, "roles": roles}, "react": {"conversation_titles": True}}


async def stream(stack: ApiStack, url: str) -> list[tuple[str, dict[str, Any]]]:
    """Every (event, data) of a turn's stream, until the server closes it."""
    found: list[tuple[str, dict[str, Any]]] = []
    async with stack.client.stream("GET", url, headers=stack.auth()) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                found.append((event, json.loads(line[6:])))
    return found


async def conversation_row(stack: ApiStack, conversation: str) -> dict[str, Any]:
    listed = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
    return next(row for row in listed.json()["items"] if row["id"] == conversation)


async def test_a_slow_summarizer_titles_the_conversation_after_turn_completed(tmp_path: Path) -> None:
    slow_title = {"text": 'Title: "Weather in Paris today".', "delay_s": 2}
    async with api_stack(tmp_path, [ANSWER, ANSWER], platform=summarizer(tmp_path, slow_title)) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "what is the weather in Paris?")
        async with stack.client.stream("GET", started["events_url"], headers=stack.auth()) as response:
            lines = response.aiter_lines()
            async for line in lines:
                if line == "event: turn.completed":
                    break
            # turn.completed came before the summarizer answered: the list still shows the provisional title
            row = await conversation_row(stack, conversation)
            assert (row["title"], row["title_source"]) == ("what is the weather in Paris?", "message")
            rest = [line async for line in lines]
        titled = json.loads(rest[rest.index("event: conversation.titled") + 1].removeprefix("data: "))
        assert titled == {"conversation_id": conversation, "title": "Weather in Paris today"}
        row = await conversation_row(stack, conversation)
        assert (row["title"], row["title_source"]) == ("Weather in Paris today", "summary")

        # one title per conversation: the second turn asks the summarizer nothing (its script has no reply left)
        second = await stack.start_turn(conversation, "and tomorrow?")
        events = await stream(stack, second["events_url"])
        assert [kind for kind, _ in events][-1] == "turn.completed"
        assert (await conversation_row(stack, conversation))["title"] == "Weather in Paris today"


async def test_the_user_renames_a_conversation_and_the_summarizer_never_overrides_it(tmp_path: Path) -> None:
    title = {"text": "Paris weather", "delay_s": 0.2}
    async with api_stack(tmp_path, [ANSWER], platform=summarizer(tmp_path, title)) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "weather?")
        renamed = await stack.client.patch(
            f"/v1/acme/support/conversations/{conversation}", json={"title": "My trip"}, headers=stack.auth()
        )
        assert renamed.status_code == 200, renamed.text
        assert (renamed.json()["title"], renamed.json()["title_source"]) == ("My trip", "user")
        events = await stream(stack, started["events_url"])
        assert "conversation.titled" not in [kind for kind, _ in events]
        assert (await conversation_row(stack, conversation))["title"] == "My trip"

        empty = await stack.client.patch(
            f"/v1/acme/support/conversations/{conversation}", json={"title": ""}, headers=stack.auth()
        )
        assert empty.status_code == 422
        elsewhere = await stack.client.patch(
            f"/v1/globex/research/conversations/{conversation}", json={"title": "x"}, headers=stack.auth("globex")
        )
        assert elsewhere.status_code == 404


async def test_a_conversation_created_with_a_title_is_not_retitled(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], platform=summarizer(tmp_path)) as stack:
        conversation = await stack.conversation(title="Given")
        started = await stack.start_turn(conversation, "weather?")
        events = await stream(stack, started["events_url"])
        assert [kind for kind, _ in events][-1] == "turn.completed"
        assert (await conversation_row(stack, conversation))["title_source"] == "user"


async def test_a_failing_summarizer_leaves_the_provisional_title(tmp_path: Path) -> None:
    failing = {"error": {"code": "model_unavailable", "message": "down"}}
    async with api_stack(tmp_path, [ANSWER], platform=summarizer(tmp_path, failing)) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "weather in Oslo?")
        events = await stream(stack, started["events_url"])
        assert [kind for kind, _ in events][-1] == "turn.completed"
        row = await conversation_row(stack, conversation)
        assert (row["title"], row["title_source"]) == ("weather in Oslo?", "message")
