"""The supervisor-executor wire protocol: length-prefixed JSON frames over a Unix socket.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object). The executor sends
a request and reads one response on the same connection; a connection may carry many calls, one at a time.

Request::

    {"v": 1, "token": "<run token>", "id": 7, "op": "call", "tool_id": "web.fetch", "params": {...}}
    {"v": 1, "token": "<run token>", "id": 8, "op": "read", "path": "fi:turn_3.files/report.md"}

Response::

    {"id": 7, "ok": true, "result": <JSON>}
    {"id": 7, "ok": false, "error": {"code": "tool_not_allowed", "message": "..."}}

The supervisor refuses a frame over its payload cap before reading it (``payload_too_large``), a wrong token
(``unauthorized``), a peer of another uid (``unauthorized``), a tool outside the bundle's catalog
(``tool_not_allowed``) and a call over its time limit (``tool_timeout``).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the executor side never needs asyncio, and importing it costs ~30 ms per run
    import asyncio

PROTOCOL_VERSION: Final = 1
HEADER: Final = struct.Struct(">I")
DEFAULT_MAX_FRAME: Final = 8 * 1024 * 1024
"""Frames larger than this (8 MiB) are refused unless a side sets another cap."""


class WireError(Exception):
    """A frame that cannot be read: the connection closed mid-frame, too large, or not a JSON object."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


def encode_frame(message: dict[str, Any]) -> bytes:
    """The bytes of one frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a frame's body; :class:`WireError` ``bad_frame`` when it is not one."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("bad_frame", f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise WireError("bad_frame", f"frame holds a JSON {type(message).__name__}, not an object")
    return message


def check_length(length: int, max_frame: int) -> None:
    """Refuse a frame longer than ``max_frame`` before reading its body."""
    if length > max_frame:
        raise WireError("payload_too_large", f"frame of {length} bytes is over the cap of {max_frame} bytes")


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one frame to a blocking socket."""
    sock.sendall(encode_frame(message))


def receive_frame(sock: socket.socket, max_frame: int = DEFAULT_MAX_FRAME) -> dict[str, Any]:
    """Read one frame from a blocking socket."""
    (length,) = HEADER.unpack(_receive_exactly(sock, HEADER.size))
    check_length(length, max_frame)
    return decode_body(_receive_exactly(sock, length))


async def write_frame(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Write one frame to an asyncio stream and drain it."""
    writer.write(encode_frame(message))
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader, max_frame: int = DEFAULT_MAX_FRAME) -> dict[str, Any]:
    """Read one frame from an asyncio stream; :class:`EOFError` when the peer closed between frames."""
    import asyncio

    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise EOFError("the peer closed the connection") from None
        raise WireError("bad_frame", "the connection closed inside a frame header") from None
    (length,) = HEADER.unpack(header)
    check_length(length, max_frame)
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise WireError("bad_frame", f"the connection closed inside a frame of {length} bytes") from None
    return decode_body(body)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            if not chunks:
                raise EOFError("the peer closed the connection")
            raise WireError("bad_frame", "the connection closed inside a frame")
        chunks += chunk
    return bytes(chunks)
