"""Tool calls through Berth's MCP manager against the bare SDK client, same server, same run.

Run: ``.venv/bin/python bench/mcp_overhead.py`` (about a minute). The server is a one-tool ``MCPServer`` (``echo``)
started twice: over stdio (as a child process, the way a bundle's stdio server runs) and over streamable
HTTP on 127.0.0.1. Each row calls ``echo`` back to back, one call at a time:

* **berth** — ``McpToolManager.call("mcp.bench.echo", …)``: allow-list and id checks, the owner task's queue,
  the per-call timeout scope and the mapping of the result onto a ``ToolOutput``;
* **bare** — the SDK's own ``Client.call_tool`` on a client this script holds (``shared``) or opens and closes
  around each call (``per_call``), which is what a ``per_call`` session costs at least.

Berth and bare calls alternate in blocks so both see the same machine state. The table gives calls per second
(1 / mean latency), p50 and p99 (nearest rank) per side, the p50 Berth adds, and the berth/bare ratio of p50.
``--calls``, ``--per-call-calls`` and ``--http-per-call-calls`` set the number of calls per side.

A Berth ``per_call`` call returns as soon as the result is in and closes the session in the background; the
bare baseline waits for its client to close (for stdio: the server process to exit) before the next call.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from _machine import header
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from berth.config.secrets import Secret
from berth.tools.contributions import McpServer
from berth.tools.mcp import McpToolManager
from berth.tools.mcp.transports import guarded_command

SERVER = """
import logging, socket, sys
from mcp.server.mcpserver import MCPServer

logging.disable(logging.WARNING)

server = MCPServer("bench")

@server.tool(structured_output=False)
def echo(text: str) -> str:
    '''Return text.'''
    return text

if sys.argv[1] == "stdio":
    server.run("stdio")
else:
    import anyio, uvicorn
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])
"""
PARAMS = {"text": "hello"}
BLOCK = 50


@dataclass
class Row:
    """One table row: latencies (seconds) of both sides."""

    name: str
    berth: list[float]
    bare: list[float]


def no_secrets(name: str) -> Secret:
    """The bench configures no secrets."""
    raise LookupError(name)


async def timed(call: Callable[[], Awaitable[object]], samples: list[float], count: int) -> None:
    """Run ``call`` ``count`` times, appending each latency to ``samples``."""
    for _ in range(count):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)


async def compare(
    name: str, berth_call: Callable[[], Awaitable[object]], bare_call: Callable[[], Awaitable[object]], calls: int
) -> Row:
    """Alternate blocks of Berth and bare calls after a warm-up of each."""
    row = Row(name, [], [])
    await timed(berth_call, [], 3)
    await timed(bare_call, [], 3)
    block = min(BLOCK, max(1, calls // 4))
    while len(row.berth) < calls:
        size = min(block, calls - len(row.berth))
        await timed(berth_call, row.berth, size)
        await timed(bare_call, row.bare, size)
    return row


def stdio_config(session: str) -> McpServer:
    """The bench server over stdio with ``session`` mode."""
    return McpServer.model_validate(
        {
            "alias": "bench",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-c", SERVER, "stdio"],
            "session": session,
        }
    )


def stdio_client() -> Client:
    """A bare SDK client starting the same server the same way (including Berth's launcher, for fairness)."""
    command, args = guarded_command(sys.executable, ["-c", SERVER, "stdio"])
    return Client(StdioServerParameters(command=command, args=args), mode="legacy", cache=None)


async def one_shot(open_client: Callable[[], AbstractAsyncContextManager[Client]]) -> None:
    """Open a client, call ``echo`` once, close it (the bare ``per_call`` baseline)."""
    async with open_client() as client:
        await client.call_tool("echo", PARAMS)


async def run(calls: int, per_call_calls: int, http_per_call_calls: int) -> list[Row]:
    """Measure every row."""
    rows: list[Row] = []
    for session in ("shared", "per_call"):
        count = calls if session == "shared" else per_call_calls
        async with McpToolManager([stdio_config(session)], no_secrets) as manager, stdio_client() as bare:
            await manager.load()
            if session == "shared":
                rows.append(
                    await compare(
                        "stdio, shared",
                        lambda: manager.call("mcp.bench.echo", PARAMS),
                        lambda: bare.call_tool("echo", PARAMS),
                        count,
                    )
                )
            else:
                rows.append(
                    await compare(
                        "stdio, per_call",
                        lambda: manager.call("mcp.bench.echo", PARAMS),
                        lambda: one_shot(stdio_client),
                        count,
                    )
                )
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER, "http", stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(await server.stdout.readline())}/mcp"
        for session, count in (("shared", calls), ("per_call", http_per_call_calls)):
            config = McpServer(alias="bench", transport="streamable-http", url=url, session=session)  # type: ignore[arg-type]
            async with (
                McpToolManager([config], no_secrets) as manager,
                Client(url, mode="legacy", cache=None) as bare,
            ):
                await manager.load()
                bare_call: Callable[[], Awaitable[object]]
                if session == "shared":
                    bare_call = lambda: bare.call_tool("echo", PARAMS)  # noqa: E731
                else:
                    bare_call = lambda: one_shot(lambda: Client(url, mode="legacy", cache=None))  # noqa: E731
                rows.append(
                    await compare(
                        f"streamable HTTP, {session}",
                        lambda: manager.call("mcp.bench.echo", PARAMS),
                        bare_call,
                        count,
                    )
                )
    finally:
        server.terminate()
        await server.wait()
    return rows


def percentile(samples: list[float], rank: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(rank / 100 * len(ordered)) - 1)]


def render(rows: list[Row]) -> str:
    """The results table."""
    header = (
        f"{'row':<26}{'calls':>6}  {'berth/s':>8} {'bare/s':>8}  {'berth p50':>10} {'bare p50':>9}  "
        f"{'berth p99':>10} {'bare p99':>9}  {'added p50':>10} {'ratio':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        berth50, bare50 = percentile(row.berth, 50), percentile(row.bare, 50)
        lines.append(
            f"{row.name:<26}{len(row.berth):>6}  {1 / statistics.fmean(row.berth):>8.0f} "
            f"{1 / statistics.fmean(row.bare):>8.0f}  {berth50 * 1e3:>8.3f}ms {bare50 * 1e3:>7.3f}ms  "
            f"{percentile(row.berth, 99) * 1e3:>8.3f}ms {percentile(row.bare, 99) * 1e3:>7.3f}ms  "
            f"{(berth50 - bare50) * 1e3:>8.3f}ms {berth50 / bare50:>6.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    """Parse options, run, print."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="calls per side on open sessions")
    parser.add_argument("--per-call-calls", type=int, default=10, help="calls per side for stdio per_call")
    parser.add_argument("--http-per-call-calls", type=int, default=100, help="calls per side for HTTP per_call")
    parser.add_argument("--quick", action="store_true", help="20/2/5 calls: a smoke test of the script")
    options = parser.parse_args()
    if options.quick:
        options.calls, options.per_call_calls, options.http_per_call_calls = 20, 2, 5
    print(f"python {platform.python_version()} on {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}")
    rows = asyncio.run(run(options.calls, options.per_call_calls, options.http_per_call_calls))
    print(render(rows))


if __name__ == "__main__":
    print(header(), flush=True)
    main()
