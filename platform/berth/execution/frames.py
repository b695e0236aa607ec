"""Reading the executor's frames within a run's allowance: what a hostile program can make the host hold.

The supervisor runs inside the host process, so everything it reads from a run's socket is the host's memory.
Here every byte is read only when a frame needs it (never more than the frame's declared length, never ahead),
into a buffer that grows as bytes arrive; a frame's body is read only once the run's :class:`ByteAllowance` has
room for all of it; and a frame that has started must end before its deadline, so a half-sent frame cannot hold
memory or a connection forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from berth_exec.wire import HEADER, WireError, check_length, decode_body

CHUNK: Final = 256 * 1024
"""The most one read asks the kernel for."""


class ByteAllowance:
    """The bytes the frames of one run may hold together, across its connections.

    A frame waits for room before its body is read (its bytes stay in the kernel's socket buffer meanwhile, which
    the sender's socket accounts for), and holds it until the supervisor has answered it.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def holding(self, size: int) -> AsyncIterator[None]:
        """Hold ``size`` bytes of the allowance for the block, waiting until they fit."""
        if size > self.limit:
            raise WireError("payload_too_large", f"frame of {size} bytes is over the run's {self.limit} bytes")
        async with self._freed:
            await self._freed.wait_for(lambda: self.held + size <= self.limit)
            self.held += size
        try:
            yield
        finally:
            async with self._freed:
                self.held -= size
                self._freed.notify_all()


async def receive_exactly(connection: socket.socket, size: int, deadline: float | None) -> bytearray:
    """Exactly ``size`` bytes from a non-blocking socket, by the loop time ``deadline`` (None: no deadline).

    :class:`EOFError` when the peer closed before the first byte, :class:`WireError` ``bad_frame`` when it closed
    after, :class:`TimeoutError` at the deadline.
    """
    loop = asyncio.get_running_loop()
    received = bytearray()
    async with asyncio.timeout_at(deadline):
        while len(received) < size:
            chunk = await loop.sock_recv(connection, min(size - len(received), CHUNK))
            if not chunk:
                if not received:
                    raise EOFError("the peer closed the connection")
                raise WireError("bad_frame", f"the connection closed inside a frame ({len(received)} of {size} bytes)")
            received += chunk
    return received


async def receive_length(connection: socket.socket, max_frame: int, deadline: float | None, timeout_s: float) -> int:
    """The length of the next frame, checked against ``max_frame`` before its body is read.

    Waiting for the frame's first byte ends at ``deadline`` (None: an authenticated connection may idle); once it
    came, the rest of the header must come within ``timeout_s``.
    """
    first = await receive_exactly(connection, 1, deadline)
    try:
        rest = await receive_exactly(connection, HEADER.size - 1, asyncio.get_running_loop().time() + timeout_s)
    except EOFError:
        raise WireError("bad_frame", "the connection closed inside a frame header") from None
    (length,) = HEADER.unpack(bytes(first + rest))
    check_length(length, max_frame)
    return int(length)


async def receive_body(connection: socket.socket, length: int, timeout_s: float) -> dict[str, Any]:
    """The JSON object of a frame's body of ``length`` bytes, which must all come within ``timeout_s``."""
    return decode_body(await receive_raw_body(connection, length, timeout_s))


async def receive_raw_body(connection: socket.socket, length: int, timeout_s: float) -> bytearray:
    """A frame's body of ``length`` bytes, undecoded, which must all come within ``timeout_s``."""
    try:
        return await receive_exactly(connection, length, asyncio.get_running_loop().time() + timeout_s)
    except EOFError:
        raise WireError("bad_frame", f"the connection closed before the body of a frame of {length} bytes") from None


class DecodePacer:
    """Keeps a run's decoding of large frames to a share of the host's event loop.

    Decoding JSON holds the event loop (and the interpreter: a worker thread would not free it): a 1 MiB frame of
    small values takes ~20 ms of CPU, and a program that sent them back to back would take the host from every other
    run and request. So the run's frames over :attr:`small` bytes are decoded one at a time, and after each the run
    waits ``(1 - share) / share`` times the CPU time the decoding took before its next large frame is decoded:
    whatever it sends, its decoding takes at most ``share`` of the loop, in stalls no longer than one frame's.
    """

    def __init__(self, share: float = 0.2, small: int = 64 * 1024) -> None:
        self.pause_factor = (1.0 - share) / share
        self.small = small
        self._turn = asyncio.Lock()

    async def decode(self, body: bytearray) -> dict[str, Any]:
        """``body``'s JSON object, paced if it is large."""
        if len(body) <= self.small:
            return decode_body(body)
        async with self._turn:
            started = time.thread_time()
            try:
                return decode_body(body)
            finally:
                await asyncio.sleep((time.thread_time() - started) * self.pause_factor)
