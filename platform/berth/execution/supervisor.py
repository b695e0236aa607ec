"""The supervisor: the trusted end of the executor's Unix socket.

It answers the frames of :mod:`berth_exec.wire`. Before anything else it checks the peer: the connecting
process's uid (``SO_PEERCRED``) must be the run's executor uid, and the connection's first frame, the hello (at
most 4 KiB), must carry the run's token (compared in constant time); nothing larger is read from a peer before
that. Then it allows only the bundle's own tool ids, validates nothing itself (the dispatch validates params
exactly as a turn does), applies a per-call timeout and a frame cap, and answers typed errors: ``unauthorized``,
``tool_not_allowed``, ``tool_params_invalid``, ``tool_timeout``, ``tool_failed``, ``payload_too_large``,
``bad_request``.

It runs inside the host process (the API's or a worker's), so a run's program must not be able to make it hold
much: at most :attr:`Supervisor.max_connections` connections of a run are accepted at a time (the next ones wait
in the socket's short listen queue, holding none of the host's descriptors), a connection that has not said hello
within :attr:`Supervisor.hello_timeout_s` is closed, a request frame is at most :attr:`Supervisor.max_frame` bytes
(1 MiB: decoding one holds the event loop for at most ~25 ms), the frames of a run hold at most
:attr:`Supervisor.max_buffered` bytes together, a frame (or an answer) must pass within
:attr:`Supervisor.frame_timeout_s` once started, and decoding a run's large frames takes at most a fifth of the
event loop (:class:`~berth.execution.frames.DecodePacer`; :mod:`berth.execution.frames`).
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
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from berth.execution.frames import ByteAllowance, DecodePacer, receive_body, receive_length, receive_raw_body
from berth_exec.wire import HELLO_MAX_FRAME, PROTOCOL_VERSION, WireError, encode_frame

logger = logging.getLogger(__name__)

MAX_REQUEST_FRAME: Final = 1024 * 1024
"""The largest frame a program may send: a tool's params; files go through ``work/`` and ``out/``."""

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
    max_frame: int = MAX_REQUEST_FRAME
    """The largest request frame (the supervisor's answers may be up to the wire's 8 MiB)."""
    max_connections: int = 8
    """Connections of the run served at a time; the next ones wait in the listen queue until one ends."""
    max_buffered: int = 4 * MAX_REQUEST_FRAME
    """Bytes the run's unanswered frames may hold together, across its connections."""
    hello_timeout_s: float = 10.0
    """How long a new connection has to say hello."""
    frame_timeout_s: float = 30.0
    """How long a frame has to arrive once its first byte came, and an answer to be taken by the program."""
    calls: list[CallRecord] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    """What the supervisor refused or cut short, by code (``unauthorized``, ``connection_cap`` …)."""
    _listener: socket.socket | None = field(default=None, repr=False)
    _accepting: asyncio.Task[None] | None = field(default=None, repr=False)
    _connections: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.max_frame > self.max_buffered:
            raise ValueError(f"max_frame ({self.max_frame}) is over max_buffered ({self.max_buffered})")
        self._allowance = ByteAllowance(self.max_buffered)
        self._pacer = DecodePacer()

    async def start(self) -> None:
        """Listen on the socket (mode 0666: the peer uid check, not the file mode, decides who is served)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.socket_path))
            os.chmod(self.socket_path, 0o666)  # noqa: S103 - SO_PEERCRED and the token decide, not the mode
            listener.listen(self.max_connections)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept(listener, asyncio.Semaphore(self.max_connections)))

    async def aclose(self) -> None:
        """Stop listening, end the run's connections and remove the socket."""
        tasks = [task for task in (self._accepting, *self._connections) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self.refusals:
            logger.warning(
                "exec supervisor on %s refused or cut short: %s",
                self.socket_path,
                ", ".join(f"{code} x{count}" for code, count in sorted(self.refusals.items())),
            )

    async def _accept(self, listener: socket.socket, slots: asyncio.Semaphore) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if slots.locked():
                self._refused(
                    "connection_cap",
                    "exec supervisor on %s: the program holds %d connections, the cap; more wait until one ends",
                    self.socket_path,
                    self.max_connections,
                )
            await slots.acquire()
            try:
                connection, _ = await loop.sock_accept(listener)
            except OSError as error:  # out of descriptors: the host's, not the run's; try again shortly
                slots.release()
                logger.warning("exec supervisor on %s could not accept: %s", self.socket_path, error)
                await asyncio.sleep(0.5)
                continue
            except BaseException:
                slots.release()
                raise
            connection.setblocking(False)
            task = asyncio.create_task(self._serve(connection))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
            task.add_done_callback(lambda _: slots.release())

    async def _serve(self, connection: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            with connection:
                if not await self._welcome(connection, loop.time() + self.hello_timeout_s):
                    return
                while True:
                    try:
                        length = await receive_length(connection, self.max_frame, None, self.frame_timeout_s)
                        async with self._allowance.holding(length):
                            body = await receive_raw_body(connection, length, self.frame_timeout_s)
                            request = await self._pacer.decode(body)
                            answer = await self._answer(request)
                            await self._send(connection, answer)
                    except EOFError:
                        return
                    except WireError as error:
                        self._refused(error.code, "exec supervisor on %s refused a frame: %s", self.socket_path, error)
                        await self._send(connection, _error(None, error.code, error.message))
                        return
        except TimeoutError:
            self._refused("frame_timeout", "exec supervisor on %s closed a connection that stalled", self.socket_path)
        except (ConnectionError, OSError):
            return

    async def _welcome(self, connection: socket.socket, deadline: float) -> bool:
        """Read the hello (at most 4 KiB, by ``deadline``), check the peer's uid and the token, and answer."""
        loop = asyncio.get_running_loop()
        hello: dict[str, Any] = {}
        try:
            length = await receive_length(connection, HELLO_MAX_FRAME, deadline, self.hello_timeout_s)
            hello = await receive_body(connection, length, max(0.0, deadline - loop.time()))
        except EOFError:
            return False
        except TimeoutError:
            self._refused("hello_timeout", "exec supervisor on %s closed a connection without hello", self.socket_path)
            return False
        except WireError as error:
            refusal: tuple[str, str] | None = (error.code, error.message)
            if error.code == "payload_too_large":
                refusal = (error.code, f"{error.message}: a connection starts with the hello (protocol 2)")
        else:
            refusal = self._hello_refusal(peer_uid(connection), hello)
        if refusal is None:
            welcome = {"v": PROTOCOL_VERSION, "max_frame": self.max_frame}
            await self._send(connection, {"id": None, "ok": True, "result": welcome})
            return True
        code, message = refusal
        if code == "unauthorized":
            self.calls.append(CallRecord(str(hello.get("op")), "", False, code, 0.0))
        self._refused(code, "exec supervisor on %s refused a connection: %s", self.socket_path, message)
        await self._send(connection, _error(hello.get("id"), code, message))
        return False

    def _hello_refusal(self, uid: int, hello: dict[str, Any]) -> tuple[str, str] | None:
        """Why a first frame is not this run's hello: another uid, another protocol version or op, a wrong token."""
        if self.executor_uid is not None and uid != self.executor_uid:
            return ("unauthorized", f"uid {uid} is not this run's executor (uid {self.executor_uid})")
        if hello.get("v") != PROTOCOL_VERSION or hello.get("op") != "hello":
            return (
                "bad_request",
                f"protocol version {hello.get('v')!r} sent {hello.get('op')!r} first; this supervisor speaks "
                f"{PROTOCOL_VERSION}, whose connections start with a hello",
            )
        if not hmac.compare_digest(str(hello.get("token", "")).encode(), self.token.encode()):
            return ("unauthorized", "wrong or missing run token")
        return None

    async def _send(self, connection: socket.socket, message: dict[str, Any]) -> None:
        """Write one frame; a program that does not take it within the frame timeout is cut off."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.frame_timeout_s):
            await loop.sock_sendall(connection, encode_frame(message))

    def _refused(self, code: str, message: str, *arguments: object) -> None:
        """Count a refusal; log the first of each kind per run (a flood of them must not flood the log)."""
        if not self.refusals[code]:
            logger.warning(message, *arguments)
        self.refusals[code] += 1

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
