"""The executor's connection to the supervisor (imported on the first tool call, not at start-up).

A connection starts with the hello frame, which carries the run's token; the requests after it do not.
"""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from berth_exec.errors import ToolCallError
from berth_exec.wire import (
    DEFAULT_MAX_FRAME,
    HELLO_MAX_FRAME,
    PROTOCOL_VERSION,
    WireError,
    receive_frame,
    send_frame,
)


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
            frame = {"v": PROTOCOL_VERSION, "id": request_id, **message}
            try:
                response = _exchange(self._connected(), frame, DEFAULT_MAX_FRAME)
            except (OSError, EOFError, WireError) as exc:
                self.close()
                raise ToolCallError("supervisor_unreachable", f"{type(exc).__name__}: {exc}") from None
        return _result(response)

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connected(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
                welcome = _exchange(sock, {"v": PROTOCOL_VERSION, "op": "hello", "token": self._token}, HELLO_MAX_FRAME)
            except BaseException:
                sock.close()
                raise
            if not welcome.get("ok"):
                sock.close()
                _result(welcome)  # raises the supervisor's refusal
            self._sock = sock
        return self._sock


def _exchange(sock: socket.socket, frame: dict[str, Any], max_answer: int) -> dict[str, Any]:
    """Send ``frame`` and read the answer. When the supervisor refused the frame before it was all sent (too large)
    and closed, the send fails: its refusal, already on its way, is read instead."""
    try:
        send_frame(sock, frame)
    except OSError as error:
        try:
            return receive_frame(sock, max_answer)
        except (OSError, EOFError, WireError):
            raise error from None
    return receive_frame(sock, max_answer)


def _result(response: dict[str, Any]) -> Any:
    """The result of a response, or its error raised as :class:`ToolCallError`."""
    if response.get("ok"):
        return response.get("result")
    error = response.get("error") or {}
    raise ToolCallError(str(error.get("code", "tool_failed")), str(error.get("message", "no message")))
