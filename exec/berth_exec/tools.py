"""What generated code imports to call the bundle's tools: ``from berth_exec import tools``.

::

    from berth_exec import tools

    page = tools.call("web.fetch", url="https://example.org")      # blocks until the supervisor answers
    page = await tools.acall("web.fetch", url="https://example.org")  # the same, for async code
    text = tools.read("fi:turn_3.files/report.md")                 # a logical path, read by the supervisor

Every call travels to the supervisor over the run's Unix socket with the run's token; the supervisor checks both,
allows only the bundle's own tools and answers with the tool's result or a :class:`ToolCallError` whose ``code``
says what went wrong (``tool_not_allowed``, ``tool_timeout``, ``tool_failed``, ``unauthorized`` …).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import threading
from typing import Any

from berth_exec.wire import PROTOCOL_VERSION, WireError, receive_frame, send_frame

SOCKET_VARIABLE = "SUPERVISOR_SOCKET_PATH"
"""The environment variable that names the supervisor's socket inside the sandbox."""


class ToolCallError(Exception):
    """The supervisor refused or the tool failed; ``code`` is stable, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


class SupervisorClient:
    """One connection to the supervisor, shared by the threads of the program (calls go one at a time)."""

    def __init__(self, socket_path: str, token: str) -> None:
        self.socket_path = socket_path
        self._token = token
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)

    def request(self, message: dict[str, Any]) -> Any:
        """Send one request (``op`` and its fields) and return the result, or raise :class:`ToolCallError`."""
        with self._lock:
            request_id = next(self._ids)
            frame = {"v": PROTOCOL_VERSION, "token": self._token, "id": request_id, **message}
            try:
                sock = self._connected()
                send_frame(sock, frame)
                response = receive_frame(sock)
            except (OSError, EOFError, WireError) as exc:
                self.close()
                raise ToolCallError("supervisor_unreachable", f"{type(exc).__name__}: {exc}") from None
        if response.get("ok"):
            return response.get("result")
        error = response.get("error") or {}
        raise ToolCallError(str(error.get("code", "tool_failed")), str(error.get("message", "no message")))

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connected(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.socket_path)
            self._sock = sock
        return self._sock


_client: SupervisorClient | None = None


def configure(socket_path: str, token: str) -> None:
    """Point this module at a supervisor (the executor bootstrap does it before the program runs)."""
    global _client
    if _client is not None:
        _client.close()
    _client = SupervisorClient(socket_path, token)


def _current() -> SupervisorClient:
    if _client is None:
        path = os.environ.get(SOCKET_VARIABLE)
        raise ToolCallError(
            "not_in_sandbox",
            "berth_exec.tools is not connected: programs calling tools must run through exec.python"
            + (f" (a socket is named at {path}, but no token was given)" if path else ""),
        )
    return _client


def call(tool_id: str, /, **params: Any) -> Any:
    """Call the bundle's tool ``tool_id`` with ``params`` and return its result (JSON: text, dict or list)."""
    return _current().request({"op": "call", "tool_id": tool_id, "params": params})


async def acall(tool_id: str, /, **params: Any) -> Any:
    """:func:`call` for async code: runs in a thread, so other tasks of the program go on meanwhile."""
    return await asyncio.to_thread(call, tool_id, **params)


def read(path: str) -> str:
    """The text behind a logical path (``fi:…``, ``so:…``, ``ar:…``) as ``react.read`` would give it."""
    result = _current().request({"op": "read", "path": path})
    return str(result)
