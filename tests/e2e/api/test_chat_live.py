"""`berth chat`'s conversation over HTTP: a line typed while a turn streams goes to that turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from api_stack import api_stack
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

from berth.cli.chat_session import HttpChat, Lines, converse, split_live_line


class StartedChat(HttpChat):
    """The chat, telling the test which turns it started."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.started = asyncio.Event()
        self.turn_ids: list[str] = []

    async def start(self, text: str) -> Lines | None:
        lines = await super().start(text)
        self.turn_ids.append(str(self._turn_id))
        self.started.set()
        return lines


def test_a_line_starting_with_steer_is_a_steer_and_anything_else_a_followup() -> None:
    assert split_live_line("/steer shorter please") == ("steer", "shorter please")
    assert split_live_line("/steer ") == ("followup", "/steer ")
    assert split_live_line("and the weather?") == ("followup", "and the weather?")


async def test_typing_during_a_turn_sends_a_steer_the_turn_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    close_gate()
    async with api_stack(tmp_path, [HOLD, ANSWER], bundles=gate_bundles(tmp_path)) as stack:
        stack.client.headers.update(stack.auth())
        chat = StartedChat(stack.client, "/v1/acme/support")
        await chat.new_conversation(None)
        conversation = chat.conversation_id
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        talking = asyncio.create_task(converse(chat, lines))
        await lines.put("hold, then answer")
        await chat.started.wait()
        turn_id = chat.turn_ids[0]
        url = f"/v1/acme/support/conversations/{conversation}/turns/{turn_id}/events"
        async with stack.client.stream("GET", url) as response:
            lines_seen = response.aiter_lines()
            async for line in lines_seen:
                if line == "event: tool.call":  # it holds at the gate now
                    await lines.put("/steer keep it short")
                if line == "event: user.steer":
                    break
        open_gate()
        await lines.put(None)
        await talking
        printed = capsys.readouterr()
        assert "steer taken: keep it short" in printed.err
        assert "done" in printed.out
        assert "keep it short" in stack.model().requests[1].prompt.section_text("current_turn")
