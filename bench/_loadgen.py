"""A small load generator for SSE endpoints: raw HTTP/1.1 over keep-alive asyncio connections.

A module the bench scripts import, not a script (hence the underscore).

httpx costs the load generator more CPU per request than a bare uvicorn endpoint costs the server, so on
a two-core machine a load generator built on it measures itself. This client does only what the
benchmark needs — write a request, read the status line and headers, read a ``Content-Length`` or
chunked body — on one persistent connection per simulated user, and finds the first answer delta of an
SSE stream by scanning its frames. Both arms of a benchmark use the same client, so its own cost is the
same on both sides.

A server closes a keep-alive connection that stays idle too long (uvicorn: after 5 s). A request written to such
a connection finds it closed before any byte of the response arrives; the client then reconnects and sends the
request once more on the fresh connection (counted in :attr:`Connection.reconnects`, not as an error). Any other
failure — a closed connection after part of a response, or on a connection just opened — is an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

__all__ = ["Connection", "HttpError", "first_answer_delta"]


class HttpError(Exception):
    """A response the benchmark did not expect (status, framing, or a failed turn)."""


class _ClosedWhileIdleError(Exception):
    """The server had closed the connection before any byte of the response: the request may be sent again."""


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reconnects = 0
        """How many times a request found the connection closed by the server while idle and was sent again."""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect (before the measurement starts, so connecting is not what is measured)."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    async def close(self) -> None:
        """Close the connection."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):  # the server had reset it already
                await self._writer.wait_closed()
            self._writer = None

    async def request(
        self, method: str, path: str, body: object | None = None, *, accept: str | None = None
    ) -> dict[str, str]:
        """Send a request (``body`` as JSON) and read the response head; return its headers (lower-case).

        When the server had closed this (idle) connection before answering with any byte, reconnect and send the
        request once more on the fresh connection.
        """
        try:
            return await self._request(method, path, body, accept)
        except _ClosedWhileIdleError:
            self.reconnects += 1
            await self.close()
            await self.open()
        try:
            return await self._request(method, path, body, accept)
        except _ClosedWhileIdleError as closed:
            raise HttpError(f"{method} {path}: closed by the server on a fresh connection ({closed})") from None

    async def _request(self, method: str, path: str, body: object | None, accept: str | None) -> dict[str, str]:
        """One attempt of :meth:`request`; raise :class:`_ClosedWhileIdleError` when no byte of a response came."""
        assert self._reader is not None and self._writer is not None, "open() first"
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-length: {len(payload)}\r\n"
        if body is not None:
            head += "content-type: application/json\r\n"
        if accept is not None:
            head += f"accept: {accept}\r\n"
        try:
            self._writer.write(head.encode() + b"\r\n" + payload)
            await self._writer.drain()
            status_line = await self._reader.readline()
        except (ConnectionResetError, BrokenPipeError) as reset:
            raise _ClosedWhileIdleError(str(reset)) from None
        if not status_line:
            raise _ClosedWhileIdleError("end of stream before the status line")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HttpError(f"{method} {path}: no HTTP status line ({status_line[:80]!r})")
        headers: dict[str, str] = {}
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(parts[1])
        if status >= 400:
            raise HttpError(f"{method} {path}: HTTP {status}: {(await self.body(headers))[:200]!r}")
        return headers

    async def body(self, headers: dict[str, str]) -> bytes:
        """Read the whole body the response head announced."""
        return b"".join([chunk async for chunk in self.chunks(headers)])

    async def chunks(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        """Yield the body as it arrives (chunked transfer coding, or a ``Content-Length`` body)."""
        assert self._reader is not None
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self._reader.readline()).split(b";", 1)[0], 16)
                if size == 0:
                    await self._reader.readline()  # the blank line after the last chunk
                    return
                data = await self._reader.readexactly(size + 2)
                yield data[:-2]
        else:
            length = int(headers.get("content-length", "0"))
            if length:
                yield await self._reader.readexactly(length)


async def first_answer_delta(connection: Connection, headers: dict[str, str]) -> float | None:
    """Read an SSE response to its end; return when (``perf_counter``) its first answer delta arrived.

    Raises :class:`HttpError` for a ``turn.failed`` event.
    """
    first: float | None = None
    pending = b""
    async for chunk in connection.chunks(headers):
        pending += chunk
        *frames, pending = pending.split(b"\n\n")
        for frame in frames:
            if first is None and b"event: channel.delta" in frame:
                data = frame[frame.index(b"data: ") + 6 :]
                if json.loads(data).get("marker") == "answer":
                    first = time.perf_counter()
            elif b"event: turn.failed" in frame:
                raise HttpError(frame.decode(errors="replace"))
    return first
