"""Request header limits: at most :data:`MAX_HEADERS` headers and :data:`MAX_HEADER_BYTES` in all.

The HTTP parser uvicorn uses with ``uvicorn[standard]`` (httptools) sets no limit of its own, so a client could
send a 200 KB header or 5,000 headers and have them parsed, copied into the ASGI scope and walked by every
middleware. This pure ASGI middleware, outermost, answers such a request **431** ``headers_too_large`` before
anything else sees it. The limits are those of common front ends (nginx's default buffers hold 32 KB).
"""

from __future__ import annotations

from typing import Final

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from berth.api.errors import error_body

MAX_HEADERS: Final = 100
MAX_HEADER_BYTES: Final = 32 * 1024
"""Names and values of all headers together."""


class HeaderLimitMiddleware:
    """Refuses requests with more than :data:`MAX_HEADERS` headers or :data:`MAX_HEADER_BYTES` of them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request unless its headers are over a limit."""
        if scope["type"] == "http":
            headers = scope.get("headers", ())
            size = sum(len(name) + len(value) for name, value in headers)
            if len(headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
                message = (
                    f"the request has {len(headers)} headers of {size} bytes in all; the limits are "
                    f"{MAX_HEADERS} headers and {MAX_HEADER_BYTES} bytes"
                )
                response = JSONResponse(error_body("headers_too_large", message), status_code=431)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
