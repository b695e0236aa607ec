"""The executor's connection to the supervisor (imported on the first tool call, not at start-up)."""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from berth_exec.errors import ToolCallError
from berth_exec.wire import PROTOCOL_VERSION, WireError, receive_frame, send_frame


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
