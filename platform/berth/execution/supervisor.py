"""The supervisor: the trusted end of the executor's Unix socket.

It answers the frames of :mod:`berth_exec.wire`. Before anything else it checks the peer: the connecting
process's uid (``SO_PEERCRED``) must be the run's executor uid, and every request must carry the run's token
(compared in constant time). Then it allows only the bundle's own tool ids, validates nothing itself (the
dispatch validates params exactly as a turn does), applies a per-call timeout and a frame cap, and answers typed
errors: ``unauthorized``, ``tool_not_allowed``, ``tool_params_invalid``, ``tool_timeout``, ``tool_failed``,
``payload_too_large``, ``bad_request``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
import struct
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from berth_exec.wire import DEFAULT_MAX_FRAME, PROTOCOL_VERSION, WireError, read_frame, write_frame

logger = logging.getLogger(__name__)

PEERCRED = struct.Struct("3i")


class SupervisorRefusal(Exception):  # noqa: N818 - an answer to the program, not a host error
    """A call the supervisor answers with an error frame: a stable ``code`` and a message for the program."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


class ToolDispatch(Protocol):
    """What the supervisor serves: the bundle's tools in the run's scope, and logical-path reads."""

    @property
    def tool_ids(self) -> Collection[str]:
        """The tool ids the program may call."""
        ...

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        """Run one tool (params validated as in a turn); raise :class:`SupervisorRefusal` for the program."""
        ...

    async def read(self, path: str) -> str:
        """The text at a logical path; raise :class:`SupervisorRefusal` when it cannot be read."""
        ...


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request the supervisor answered (kept for the run's report and tests)."""

    op: str
    target: str
    ok: bool
    code: str | None
    duration_s: float


@dataclass
class Supervisor:
    """Serves one run's executor on ``socket_path`` until closed."""

    socket_path: Path
    token: str = field(repr=False)
    executor_uid: int | None
    dispatch: ToolDispatch
    call_timeout_s: float = 60.0
    max_frame: int = DEFAULT_MAX_FRAME
    calls: list[CallRecord] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = field(default=None, repr=False)

    async def start(self) -> None:
        """Listen on the socket (mode 0666: the peer uid check, not the file mode, decides who is served)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o666)  # noqa: S103 - SO_PEERCRED and the token decide, not the mode

    async def aclose(self) -> None:
        """Stop listening and remove the socket."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = writer.get_extra_info("socket")
            uid = peer_uid(peer) if peer is not None else None
            while True:
                try:
                    request = await read_frame(reader, self.max_frame)
                except EOFError:
                    return
                except WireError as error:
                    await write_frame(writer, _error(None, error.code, error.message))
                    return
                refusal = self._refusal(uid, request)
                if refusal is not None:
                    self.calls.append(CallRecord(str(request.get("op")), "", False, "unauthorized", 0.0))
                    await write_frame(writer, _error(request.get("id"), "unauthorized", refusal))
                    return
                await write_frame(writer, await self._answer(request))
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _refusal(self, uid: int | None, request: dict[str, Any]) -> str | None:
        """Why a request is not the executor's (another uid, a wrong token), or None."""
        if self.executor_uid is not None and uid != self.executor_uid:
            logger.warning("exec supervisor refused uid %s (the executor is uid %s)", uid, self.executor_uid)
            return f"uid {uid} is not this run's executor"
        if not hmac.compare_digest(str(request.get("token", "")).encode(), self.token.encode()):
            logger.warning("exec supervisor refused a request with a wrong token (uid %s)", uid)
            return "wrong or missing run token"
        return None

    async def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("id")
        op = request.get("op")
        started = time.monotonic()
        target = str(request.get("tool_id") or request.get("path") or "")
        try:
            if request.get("v") != PROTOCOL_VERSION:
                raise SupervisorRefusal(
                    "bad_request", f"protocol version {request.get('v')!r}; this supervisor speaks {PROTOCOL_VERSION}"
                )
            if op == "call":
                result = await self._call(request)
            elif op == "read":
                path = request.get("path")
                if not isinstance(path, str) or not path:
                    raise SupervisorRefusal("bad_request", "read needs a logical path")
                result = await asyncio.wait_for(self.dispatch.read(path), self.call_timeout_s)
            else:
                raise SupervisorRefusal("bad_request", f"unknown op {op!r} (call, read)")
        except SupervisorRefusal as refusal:
            self.calls.append(CallRecord(str(op), target, False, refusal.code, time.monotonic() - started))
            return _error(request_id, refusal.code, refusal.message)
        except TimeoutError:
            self.calls.append(CallRecord(str(op), target, False, "tool_timeout", time.monotonic() - started))
            return _error(request_id, "tool_timeout", f"{target} did not answer within {self.call_timeout_s:g} s")
        except Exception as error:  # a tool's bug is the program's error, never the supervisor's end
            logger.warning("exec tool call %s failed", target, exc_info=True)
            self.calls.append(CallRecord(str(op), target, False, "tool_failed", time.monotonic() - started))
            return _error(request_id, "tool_failed", f"{target} raised {type(error).__name__}: {error}")
        self.calls.append(CallRecord(str(op), target, True, None, time.monotonic() - started))
        return {"id": request_id, "ok": True, "result": result}

    async def _call(self, request: dict[str, Any]) -> Any:
        tool_id = request.get("tool_id")
        params = request.get("params") or {}
        if not isinstance(tool_id, str) or not isinstance(params, dict):
            raise SupervisorRefusal("bad_request", "call needs a tool_id (string) and params (object)")
        if tool_id not in self.dispatch.tool_ids:
            allowed = ", ".join(sorted(self.dispatch.tool_ids)) or "none"
            raise SupervisorRefusal("tool_not_allowed", f"{tool_id} is not one of this bundle's tools ({allowed})")
        return await asyncio.wait_for(self.dispatch.call(tool_id, params), self.call_timeout_s)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    _, uid, _ = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
    return int(uid)


def _error(request_id: object, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}
