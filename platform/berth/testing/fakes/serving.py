"""Run an ASGI app on 127.0.0.1 in a background thread, ready the moment :meth:`LocalServer.start` returns.

The listening socket is bound and put into ``listen`` state before the server thread starts, so a
client may connect at once (the kernel queues the connection until uvicorn accepts it): no polling,
no sleeping. The server runs its own event loop, so it serves sync and async tests alike, the way a
remote service would.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import uvicorn
from starlette.requests import Request
from starlette.types import ASGIApp

Answer = TypeVar("Answer")

__all__ = ["LocalServer", "RecordedRequest", "ScriptedServer"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request a fake server received and how it answered.

    :param headers: lower-cased names.
    :param body: the parsed JSON body (None when it was not JSON).
    :param status: the HTTP status of the answer.
    :param usage: the token usage the answer reported, when it reported one.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    usage: dict[str, int] | None = None


class LocalServer:
    """Serves ``app`` on ``127.0.0.1`` (a free port) from a daemon thread; a context manager (sync and async)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The bound port (the server must be started)."""
        if self._port is None:
            raise RuntimeError("the server is not running; call start() or use it as a context manager")
        return self._port

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Bind, listen and start serving; clients may connect as soon as this returns."""
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self._app, lifespan="off", log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name=f"fake-server-{self._port}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread (open keep-alive connections are closed)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._server = None
        self._thread = None
        self._port = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


class ScriptedServer(LocalServer, Generic[Answer]):
    """A :class:`LocalServer` that answers from a queue of scripted answers and records every request."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self._script: deque[Answer] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._count = 0

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """How many scripted answers are still queued."""
        with self._lock:
            return len(self._script)

    def _push(self, answer: Answer) -> None:
        with self._lock:
            self._script.append(answer)

    def _next_answer(self) -> Answer | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _record(self, request: Request, body: Any, status: int, usage: dict[str, int] | None = None) -> None:
        record = RecordedRequest(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            status=status,
            usage=usage,
        )
        with self._lock:
            self._requests.append(record)
