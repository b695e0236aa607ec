"""``exec.python`` over the HTTP API: the program calls a bundle tool, its chart is an event and a served file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_stack import api_stack

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

BUNDLE = Path(__file__).resolve().parent.parent / "exec_probe_bundle"


def responses() -> list[str]:
    call = {
        "action": "call_tool",
        "notes": "chart",
        "tool_call": {"tool_id": "exec.python", "params": {"purpose": "draw the chart", "outputs": ["chart.png"]}},
    }
    program = (BUNDLE / "chart_program.txt").read_text()
    return [
        f"<channel:action>{json.dumps(call)}</channel:action><channel:code>{program}</channel:code>",
        '<channel:action>{"action": "complete", "notes": ""}</channel:action><channel:answer>Done.</channel:answer>',
    ]


async def test_the_chart_is_an_artifact_event_and_the_files_route_serves_it(tmp_path: Path) -> None:
    bundles = {"probe": {"source": {"path": str(BUNDLE)}}}
    secrets = {"bundles": {"probe": {"probe_key": "literal:probe-key-1234"}}}
    async with api_stack(tmp_path, responses(), bundles=bundles, bundles_secrets=secrets) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "chart please", bundle="probe")
        events = await stack.events(started["events_url"])
        kinds = [kind for _, kind, _ in events]
        assert kinds[-1] == "turn.completed", events
        result = next(data for _, kind, data in events if kind == "tool.result" and data["tool_id"] == "exec.python")
        assert result["ok"], result
        artifacts = [data for _, kind, data in events if kind == "artifact"]
        path = f"fi:{started['turn_id']}.outputs/chart.png"
        assert artifacts == [{"call_id": "c1", "path": path, "mime": "image/png", "size": artifacts[0]["size"]}]
        served = await stack.client.get(
            f"/v1/acme/support/conversations/{conversation}/files/{path}", headers=stack.auth()
        )
        assert served.status_code == 200
        assert served.headers["content-type"] == "image/png"
        assert served.content.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(served.content) == artifacts[0]["size"]
