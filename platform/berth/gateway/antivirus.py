"""Attachments scanned by a ClamAV daemon before they are stored (``gateway.yaml`` ``attachments.antivirus``).

The client speaks clamd's documented ``INSTREAM`` protocol (``man clamd``) over a Unix socket or TCP: the command
``zINSTREAM\\0``, then the bytes in chunks, each preceded by its length as a 4-byte big-endian integer, then a
zero-length chunk; clamd answers ``stream: OK``, ``stream: <signature> FOUND`` or ``… ERROR``, NUL-terminated, and
closes. (``aioclamd``, the maintained async client, speaks TCP only and sends 1 KiB chunks through a thread each;
the protocol is small enough to speak here, over either transport.)
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Final

__all__ = ["AntivirusUnavailableError", "ClamdScanner", "ScanVerdict"]

CHUNK_BYTES: Final = 64 * 1024
"""Bytes per ``INSTREAM`` chunk (clamd's StreamMaxLength bounds the whole stream, not a chunk)."""
MAX_REPLY_BYTES: Final = 4096


class AntivirusUnavailableError(Exception):
    """clamd could not be reached, did not answer in time, or answered with an error (never a verdict)."""


@dataclass(frozen=True, slots=True)
class ScanVerdict:
    """What clamd found: ``signature`` is the name of what it matched (None: clean)."""

    signature: str | None

    @property
    def infected(self) -> bool:
        """Whether clamd matched a signature."""
        return self.signature is not None


class ClamdScanner:
    """Scans bytes with the clamd at ``address`` (``unix:///path`` or ``tcp://host:port``), one connection a scan."""

    def __init__(self, address: str, *, timeout_s: float = 30.0) -> None:
        self.address = address
        self.timeout_s = timeout_s

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.address.startswith("unix://"):
            return await asyncio.open_unix_connection(self.address.removeprefix("unix://"))
        host, _, port = self.address.removeprefix("tcp://").rpartition(":")
        return await asyncio.open_connection(host.strip("[]"), int(port))

    async def scan(self, data: bytes) -> ScanVerdict:
        """Scan ``data``; raise :class:`AntivirusUnavailableError` when no verdict can be had."""
        try:
            reply = await asyncio.wait_for(self._instream(data), self.timeout_s)
        except TimeoutError:
            late = f"clamd at {self.address} gave no verdict within {self.timeout_s:g} s"
            raise AntivirusUnavailableError(late) from None
        except OSError as error:
            unreachable = f"clamd at {self.address} is unreachable: {error.strerror or error}"
            raise AntivirusUnavailableError(unreachable) from None
        return parse_reply(reply, self.address)

    async def ping(self) -> bool:
        """Whether clamd answers ``PING`` with ``PONG``."""
        try:
            reader, writer = await asyncio.wait_for(self._connect(), self.timeout_s)
        except (OSError, TimeoutError):
            return False
        try:
            writer.write(b"zPING\0")
            await writer.drain()
            return (await asyncio.wait_for(reader.read(64), self.timeout_s)).rstrip(b"\0") == b"PONG"
        except (OSError, TimeoutError):
            return False
        finally:
            writer.close()

    async def _instream(self, data: bytes) -> str:
        reader, writer = await self._connect()
        try:
            writer.write(b"zINSTREAM\0")
            view = memoryview(data)
            for start in range(0, len(view), CHUNK_BYTES):
                chunk = view[start : start + CHUNK_BYTES]
                writer.write(struct.pack("!L", len(chunk)))
                writer.write(chunk)
                await writer.drain()
            writer.write(struct.pack("!L", 0))
            await writer.drain()
            reply = await reader.read(MAX_REPLY_BYTES)
        except ConnectionResetError:
            # clamd closes the stream early when it is over StreamMaxLength; its reply is then unreadable
            closed = f"clamd at {self.address} closed the stream (over its StreamMaxLength?)"
            raise AntivirusUnavailableError(closed) from None
        finally:
            writer.close()
        return reply.rstrip(b"\0\n").decode("utf-8", errors="replace")


def parse_reply(reply: str, address: str = "clamd") -> ScanVerdict:
    """The verdict in one ``INSTREAM`` reply (``stream: OK`` / ``stream: <signature> FOUND`` / ``… ERROR``)."""
    _, _, status = reply.partition(": ")
    if reply.endswith("ERROR") or not status:
        raise AntivirusUnavailableError(f"clamd at {address} could not scan: {reply or 'no reply'}")
    if status == "OK":
        return ScanVerdict(None)
    if status.endswith(" FOUND"):
        return ScanVerdict(status.removesuffix(" FOUND"))
    raise AntivirusUnavailableError(f"clamd at {address} answered {reply!r}")
