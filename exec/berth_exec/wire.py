"""The supervisor-executor wire protocol: length-prefixed JSON frames over a Unix socket.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object). The first frame of
every connection is the executor's hello, which carries the run's token and may be at most
:data:`HELLO_MAX_FRAME` (4 KiB): the supervisor reads nothing larger from a peer it has not authenticated. Then the
executor sends a request and reads one response on the same connection; a connection may carry many calls, one at
a time.

Hello (answered ``{"id": null, "ok": true, "result": {"v": 2, "max_frame": 1048576}}``, or an error and the end of
the connection)::

    {"v": 2, "op": "hello", "token": "<run token>"}

Request::

    {"v": 2, "id": 7, "op": "call", "tool_id": "web.fetch", "params": {...}}
    {"v": 2, "id": 8, "op": "read", "path": "fi:turn_3.files/report.md"}

Response::

    {"id": 7, "ok": true, "result": <JSON>}
    {"id": 7, "ok": false, "error": {"code": "tool_not_allowed", "message": "..."}}

The supervisor refuses a frame over its payload cap before reading it (``payload_too_large``), a wrong token
(``unauthorized``), a peer of another uid (``unauthorized``), a frame nested deeper than :data:`MAX_DEPTH`
(``bad_request``, found without recursing), a tool outside the bundle's catalog (``tool_not_allowed``) and a call
over its time limit (``tool_timeout``). Version 1 carried the token in every request and had no hello: a
supervisor of either version answers the other's first frame with ``bad_request`` naming both versions.
"""

from __future__ import annotations

import array
import gc
import itertools
import json
import socket
import struct
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the executor side never needs asyncio, and importing it costs ~30 ms per run
    import asyncio

PROTOCOL_VERSION: Final = 2
HEADER: Final = struct.Struct(">I")
DEFAULT_MAX_FRAME: Final = 8 * 1024 * 1024
"""Frames larger than this (8 MiB) are refused unless a side sets another cap."""
HELLO_MAX_FRAME: Final = 4096
"""The cap on a connection's first frame, the hello: what a peer that has not shown the token can make a reader hold."""
MAX_DEPTH: Final = 64
"""How deeply a frame's JSON may nest (the frame object itself is level 1)."""

_BRACKETS_ONLY: Final = bytes(byte for byte in range(256) if byte not in b"[]{}")
_FOLD_BRACES: Final = bytes.maketrans(b"{}", b"[]")
_STEPS: Final = bytes.maketrans(b"[]", b"\x01\xff")  # +1 and -1 as signed bytes


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


def decode_body(body: bytes | bytearray, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The JSON object of a frame's body; :class:`WireError` ``bad_frame`` when it is not one, ``bad_request`` when
    it nests deeper than ``max_depth`` (checked before decoding, see :func:`nests_deeper_than`)."""
    if nests_deeper_than(body, max_depth):
        raise WireError("bad_request", f"frame nests deeper than {max_depth} levels")
    collecting = gc.isenabled()
    gc.disable()  # a JSON document has no cycles: collections while decoding one only cost time (up to 8x)
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("bad_frame", f"frame is not UTF-8 JSON: {exc}") from None
    except RecursionError:  # unreachable after the depth check; kept so no input can end a reader by recursion
        raise WireError("bad_request", f"frame nests deeper than {max_depth} levels") from None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(message, dict):
        raise WireError("bad_frame", f"frame holds a JSON {type(message).__name__}, not an object")
    return message


def nests_deeper_than(body: bytes | bytearray, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` levels deep, found in linear time
    without recursing (a run of ``limit + 1`` opening brackets, the common attack, is found by one search).

    Brackets inside strings do not count: escaped backslashes and quotes are dropped first, so every quote left
    opens or closes a string. For a text that is not JSON the answer counts up to where a decoder stops, or more.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    run = b"[" * (limit + 1)
    first = body.find(run)
    if first >= 0 and body.find(b"\\", 0, first) < 0 and body.count(b'"', 0, first) % 2 == 0:
        return True  # a run outside any string: the usual attack, found without copying the frame
    text = bytes(body).replace(b"\\\\", b"").replace(b'\\"', b"")
    if b'"' in text:
        text = b"".join(text.split(b'"')[::2])
    brackets = text.translate(_FOLD_BRACES, _BRACKETS_ONLY)
    if run in brackets:
        return True
    return len(brackets) > limit and max(itertools.accumulate(array.array("b", brackets.translate(_STEPS)))) > limit


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
