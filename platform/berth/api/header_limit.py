"""Request header limits: at most :data:`MAX_HEADERS` headers and :data:`MAX_HEADER_BYTES` in all.

The HTTP parser uvicorn uses with ``uvicorn[standard]`` (httptools) sets no limit of its own, so a client could
send a 200 KB header or 5,000 headers and have them parsed, copied into the ASGI scope and walked by every
middleware. :class:`~berth.api.edge.EdgeMiddleware`, the app's one middleware layer, checks them first and
answers such a request **431** ``headers_too_large`` before anything else sees it. The limits are those of common
front ends (nginx's default buffers hold 32 KB).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

MAX_HEADERS: Final = 100
MAX_HEADER_BYTES: Final = 32 * 1024
"""Names and values of all headers together."""


def headers_over_limit(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """What is wrong with ``headers`` (the ``headers_too_large`` message), or None when they are within limits."""
    if len(headers) <= MAX_HEADERS:
        size = 0
        for name, value in headers:
            size += len(name) + len(value)
        if size <= MAX_HEADER_BYTES:
            return None
    size = sum(len(name) + len(value) for name, value in headers)
    return (
        f"the request has {len(headers)} headers of {size} bytes in all; the limits are "
        f"{MAX_HEADERS} headers and {MAX_HEADER_BYTES} bytes"
    )
