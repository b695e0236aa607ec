"""Fixtures for the MCP tests: third-party peers (skip outside CI when missing, fail under CI), our own fault
server, HTTP servers bound to 127.0.0.1, and a secret lookup."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer

from berth.config.environment import running_in_ci
from berth.config.errors import ConfigError
from berth.config.secrets import Secret
from berth.tools.contributions import McpServer

REPO_ROOT = Path(__file__).resolve().parents[3]
SERVERS = Path(__file__).parent / "servers"
NPM_PREFIX = REPO_ROOT / "build" / "npm"
EVERYTHING_JS = NPM_PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
INSTALL_HINT = "run .ci/install-mcp-peers"


def _missing_peer(reason: str) -> None:
    if running_in_ci():
        pytest.fail(f"{reason} (required under CI=true; {INSTALL_HINT})")
    pytest.skip(f"{reason}; {INSTALL_HINT}")


@pytest.fixture
def time_server() -> McpServer:
    """``mcp-server-time`` from PyPI over stdio (shared session)."""
    if importlib.util.find_spec("mcp_server_time") is None:
        _missing_peer("mcp-server-time is not installed")
    return McpServer(
        alias="time", transport="stdio", command=sys.executable, args=["-m", "mcp_server_time"], session="shared"
    )


@pytest.fixture
def everything_js() -> Path:
    """The npm ``@modelcontextprotocol/server-everything`` entry point, with node on PATH."""
    if shutil.which("node") is None:
        _missing_peer("node is not on PATH")
    if not EVERYTHING_JS.is_file():
        _missing_peer(f"@modelcontextprotocol/server-everything is not installed under {NPM_PREFIX}")
    return EVERYTHING_JS


@pytest.fixture
def node() -> str:
    """The node executable."""
    path = shutil.which("node")
    if path is None:
        _missing_peer("node is not on PATH")
    assert path is not None
    return path


@pytest.fixture
async def everything_http(everything_js: Path, node: str) -> AsyncIterator[str]:
    """The everything server's streamable HTTP transport on 127.0.0.1; yields its ``/mcp`` URL."""
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        node,
        "--require",
        str(SERVERS / "localhost_only.cjs"),
        str(everything_js),
        "streamableHttp",
        env={"PATH": os.environ.get("PATH", ""), "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stderr is not None
        # The server says so on stderr once it listens; read until then (bounded by the test timeout).
        while b"listening on port" not in (line := await asyncio.wait_for(process.stderr.readline(), 30)):
            assert line, "the everything server exited before listening"
        drain = asyncio.create_task(_drain(process.stderr))
        yield f"http://127.0.0.1:{port}/mcp"
        drain.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        await process.wait()


@pytest.fixture
def fault_state(tmp_path: Path) -> Path:
    """Where the fault server keeps its once-only markers."""
    state = tmp_path / "fault-state"
    state.mkdir()
    return state


@pytest.fixture
def fault_server(fault_state: Path) -> Callable[..., McpServer]:
    """Build a config for ``servers/faulty.py`` over stdio; keyword arguments override config fields."""

    def build(*extra_args: str, **fields: object) -> McpServer:
        values: dict[str, object] = {
            "alias": "faulty",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVERS / "faulty.py"), "--state", str(fault_state), *extra_args],
            "session": "shared",
        }
        values.update(fields)
        return McpServer.model_validate(values)

    return build


@pytest.fixture
def secrets() -> dict[str, str]:
    """Secret values by the name a config uses (``NAME`` for ``secret:NAME``, ``b:NAME`` for bundle secrets)."""
    return {}


@pytest.fixture
def secret(secrets: dict[str, str]) -> Callable[[str], Secret]:
    """A lookup like ``ctx.secret`` over the ``secrets`` fixture."""

    def lookup(name: str) -> Secret:
        if name not in secrets:
            raise ConfigError("secret_unknown", f"secret '{name}' is not declared")
        return Secret(name, secrets[name])

    return lookup


@pytest.fixture
async def serve_http() -> AsyncIterator[Callable[[MCPServer], str]]:
    """Serve an ``MCPServer`` over streamable HTTP on 127.0.0.1 in this event loop; returns its URL."""
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    def start(app_server: MCPServer) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # connections wait in the backlog until uvicorn accepts: no readiness polling
        config = uvicorn.Config(app_server.streamable_http_app(), log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        servers.append((server, asyncio.create_task(server.serve(sockets=[sock]))))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"

    yield start
    for server, task in servers:
        server.should_exit = True
        await task


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


@pytest.fixture
def no_leftover_processes() -> Iterator[list[int]]:
    """Collects pids a test saw; afterwards asserts none of them is still running."""
    pids: list[int] = []
    yield pids
    alive = [pid for pid in pids if _alive(pid)]
    assert alive == [], f"server processes outlived their sessions: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its parent.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True
