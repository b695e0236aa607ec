"""A secret a tool revealed and then echoed (in an error, a result, a summary, a source) reaches no one: the SSE
stream, the stored blocks (every file of the host's ``var`` folder, the SQLite database included) and the model's
next request (as the fake Anthropic server received it) hold ``***`` where the value was."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from api_stack import api_stack

from berth.testing.fakes.anthropic_server import FakeAnthropicServer

pytestmark = pytest.mark.usefixtures("clean_berth_env")

TOKEN = "tok-7Hq2-masked-in-every-place"
API_KEY = "sk-ant-masking-0123456789abcdef"

LEAKY_BUNDLE = '''
from berth import AgentSpec, BundleInfo, hookimpl, tool
from berth.runtime.toolbox import ToolNotice
from berth.tools.results import SourceCandidate, ToolOutput


@hookimpl
def berth_bundle():
    return BundleInfo(id="leaky", version="1")


@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="call the tools, then answer")


@hookimpl
def berth_tools(ctx):
    def token():
        return ctx.secret("b:api_token").reveal()

    @tool
    def connect() -> str:
        """Connect to the backend (it refuses, naming the token it was given)."""
        raise ConnectionError(f"the backend refused token {token()}")

    @tool
    def notice() -> str:
        """Fail with a notice that names the token."""
        raise ToolNotice("backend_refused", f"token {token()} is not valid here")

    @tool
    def fetch() -> ToolOutput:
        """Fetch a record that echoes the token in its value, summary and source."""
        return ToolOutput(
            value={"record": f"auth={token()}", token(): "as a key", "quoted": f'say "{token()}"'},
            summary=f"fetched with {token()}",
            sources=[SourceCandidate(url=f"https://api.example/r?key={token()}", title=f"T {token()}", text=token())],
        )

    return [connect, notice, fetch]
'''


def call(tool_id: str) -> str:
    action = {"action": "call_tool", "notes": "", "tool_call": {"tool_id": tool_id, "params": {}}}
    return f"<channel:action>{json.dumps(action)}</channel:action>"


ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Done.</channel:answer>'


def leaky_bundle(tmp_path: Path) -> dict[str, dict[str, dict[str, str]]]:
    folder = tmp_path / "leaky"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(LEAKY_BUNDLE))
    return {"leaky": {"source": {"path": str(folder)}}}


async def test_a_secret_a_tool_echoes_reaches_neither_the_stream_nor_the_store_nor_the_model(tmp_path: Path) -> None:
    secrets = {"bundles": {"leaky": {"api_token": f"literal:{TOKEN}"}}}
    async with FakeAnthropicServer(api_key=API_KEY) as server:
        for answer in (call("leaky.connect"), call("leaky.notice"), call("leaky.fetch"), ANSWER):
            server.push_text(answer, chunk_size=40)
        model = {"provider": "anthropic", "model": "claude-sonnet-5-5", "base_url": server.base_url, "api_key": API_KEY}
        platform = {"models": {"default": model}}
        async with api_stack(
            tmp_path, [], bundles=leaky_bundle(tmp_path), bundles_secrets=secrets, platform=platform
        ) as stack:
            conversation = await stack.conversation(bundle="leaky")
            started = await stack.start_turn(conversation, "go", bundle="leaky")
            async with stack.client.stream("GET", started["events_url"], headers=stack.auth()) as response:
                stream = "".join([line + "\n" async for line in response.aiter_lines()])
            stored = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        requests = [json.dumps(r.body, ensure_ascii=False) for r in server.message_requests]

    assert "event: turn.completed" in stream, stream
    results = [line for line in stream.splitlines() if line.startswith("data: ") and '"tool_id":"leaky.' in line]
    assert len(results) >= 6, stream  # a call and a result (or notice) of each tool
    assert TOKEN not in stream
    assert "the backend refused token ***" in stream
    assert "token *** is not valid here" in stream
    assert "fetched with ***" in stream

    assert TOKEN not in stored.text
    files = [path for path in (tmp_path / "var").rglob("*") if path.is_file()]
    assert any(path.suffix in (".db", ".sqlite", ".sqlite3") for path in files), files
    holding = [path for path in files if TOKEN.encode() in path.read_bytes()]
    assert holding == []
    database = b"".join(path.read_bytes() for path in files)
    assert b"the backend refused token ***" in database

    assert len(requests) == 4
    assert all(TOKEN not in request for request in requests)
    last = requests[-1]
    assert "ConnectionError: the backend refused token ***" in last
    assert "token *** is not valid here" in last
    assert "auth=***" in last
    assert "https://api.example/r?key=***" in last
