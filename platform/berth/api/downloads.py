"""How a conversation's file is served: with the type its bytes show (sniffed, never its name's), inline only when
a browser shows it without running anything of it (raster images, PDF), as an attachment otherwise.

An uploaded ``evil.html`` is text to Berth (it sniffs as ``text/plain``), so it comes back as ``text/plain``, to be
saved, never rendered as a page in the UI's origin. Every file response also carries ``Content-Security-Policy:
sandbox`` (:mod:`berth.api.security_headers`): even a file a browser does render runs in an opaque origin, away
from the UI's local storage where the API key is kept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

from berth.api.attachments import SNIFF_BYTES, sniff_mime
from berth.storage.downloads import content_disposition

INLINE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})
"""Types served ``inline``: a browser displays them and runs nothing of them (SVG, which can hold script, sniffs as
text and is an attachment)."""


def disposition(mime: str, filename: str) -> str:
    """The ``Content-Disposition`` of a file of sniffed type ``mime``: ``inline`` for :data:`INLINE_TYPES`,
    ``attachment`` otherwise, naming ``filename`` (ASCII, and UTF-8 per RFC 6266)."""
    return content_disposition(filename or "file", "inline" if mime in INLINE_TYPES else "attachment")


def content_type(mime: str) -> str:
    """The ``Content-Type`` header of a file of sniffed type ``mime`` (text is UTF-8: that is what sniffed it)."""
    return f"{mime}; charset=utf-8" if mime == "text/plain" else mime


async def sniffed_stream(chunks: AsyncIterator[bytes]) -> tuple[str, AsyncIterator[bytes]]:
    """The sniffed type of a streamed file and the whole stream again: its first :data:`SNIFF_BYTES` are read ahead
    and sent first."""
    ahead: list[bytes] = []
    size = 0
    iterator = aiter(chunks)
    async for chunk in iterator:
        ahead.append(chunk)
        size += len(chunk)
        if size >= SNIFF_BYTES:
            break
    head = b"".join(ahead)

    async def replay() -> AsyncIterator[bytes]:
        if head:
            yield head
        async for chunk in iterator:
            yield chunk

    return sniff_mime(head, complete=size < SNIFF_BYTES), replay()
