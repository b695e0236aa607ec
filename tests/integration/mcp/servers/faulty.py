"""An MCP server (stdio) that fails on demand, for the fault tests; written with the SDK's ``MCPServer``.

``--hang-on-start`` starts the process but never answers. ``--state DIR`` is where ``*_once`` tools keep
their markers, so a restarted process behaves differently from the one that was killed.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer


def build(state: Path) -> MCPServer:
    """The server and its tools."""
    server = MCPServer("faulty")

    @server.tool(structured_output=False)
    def echo(text: str) -> str:
        """Return ``text``."""
        return text

    @server.tool(structured_output=False)
    def crash() -> str:
        """Kill this server process in the middle of the call, every time."""
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    @server.tool(structured_output=False)
    def crash_once(marker: str) -> str:
        """Kill this server process the first time ``marker`` is seen; answer on later calls."""
        path = state / marker
        if not path.exists():
            path.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return f"answered by {os.getpid()}"

    @server.tool(structured_output=False)
    async def block_once(marker: str, ctx: Context) -> str:
        """The first time: report this process's pid as progress, then never answer. Later: answer."""
        path = state / marker
        if path.exists():
            return f"answered by {os.getpid()}"
        path.write_text(str(os.getpid()))
        await ctx.report_progress(0, 1, str(os.getpid()))
        await anyio.sleep_forever()
        return "unreachable"

    @server.tool(structured_output=False)
    def big(size: int) -> str:
        """Return ``size`` characters of text."""
        return ("0123456789abcdef" * (size // 16 + 1))[:size]

    @server.tool(structured_output=False)
    def pid() -> str:
        """This server's process id."""
        return str(os.getpid())

    return server


def main() -> None:
    """Parse the options and serve over stdio."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-on-start", action="store_true")
    parser.add_argument("--state", type=Path, default=Path.cwd())
    options = parser.parse_args()
    if options.hang_on_start:
        threading.Event().wait()
    build(options.state).run("stdio")


if __name__ == "__main__":
    main()
