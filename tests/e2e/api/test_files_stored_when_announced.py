"""A file a turn produces is stored before its ``artifact`` event is sent: the download works while the turn still
runs, and the file outlives the process that wrote it (a resumed turn finds it: the fault drill kills workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_stack import api_stack
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

pytestmark = pytest.mark.usefixtures("storage_kind")

WRITE = (
    "<channel:action>"
    + json.dumps(
        {
            "action": "call_tool",
            "tool_call": {
                "tool_id": "react.write",
                "params": {"path": "outputs/report.txt", "content": "first findings"},
            },
        }
    )
    + "</channel:action>"
)


async def test_an_announced_file_downloads_while_its_turn_still_runs(tmp_path: Path) -> None:
    close_gate()
    async with api_stack(tmp_path, [WRITE, HOLD, ANSWER], bundles=gate_bundles(tmp_path)) as stack:
        try:
            conversation = await stack.conversation()
            started = await stack.start_turn(conversation, "write, then wait")
            announced = await stack.wait_for(started["events_url"], "artifact")
            assert announced["path"] == f"fi:{started['turn_id']}.outputs/report.txt"
            await stack.wait_for(started["events_url"], "tool.call")  # in gate.hold now: nothing is committed yet
            download = await stack.client.get(
                f"/v1/acme/support/conversations/{conversation}/files/{announced['path']}", headers=stack.auth()
            )
            assert download.status_code == 200, download.text
            assert download.content == b"first findings"
            open_gate()
            assert (await stack.wait_for(started["events_url"], "turn.completed"))["answer"] == "done"
            after = await stack.client.get(
                f"/v1/acme/support/conversations/{conversation}/files/{announced['path']}", headers=stack.auth()
            )
            assert after.content == b"first findings"
        finally:
            open_gate()
