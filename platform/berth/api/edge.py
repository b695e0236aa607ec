"""The app's one middleware layer: what every HTTP request goes through before a route, done once per request.

In order, as the separate layers did it (outermost first):

1. **header limits** (:mod:`berth.api.header_limit`): too many or too large headers are answered 431 at once,
   with nothing added (not even a latency sample);
2. **hardening headers** (:mod:`berth.api.security_headers`) on every other response's start;
3. **CORS** (``gateway.yaml``'s ``cors.allow_origins``): a request with an ``Origin`` header goes through
   Starlette's ``CORSMiddleware`` (preflights are answered there, before the latency sample); one without gets
   what that middleware adds to it, ``Vary: Origin``;
4. **latency** (``berth_http_request_duration_seconds`` by method, route template and status; 413s included);
5. **body limits** (:mod:`berth.api.body_limit`): a declared ``Content-Length`` over the tenant's limit is
   answered 413 at once; a chunked body is counted as it arrives and the read that crosses the limit fails, and
   the client gets 413 ``payload_too_large`` whatever the route made of the failed read.

Why one layer: five pure ASGI layers each wrapped ``send``, so every frame of a streamed turn went through four
coroutine calls before uvicorn's own, and every request through five ``__call__``\\ s. Here a request costs one
call, one pass over its headers and one ``send`` wrapper, whose only work on a body frame is one comparison
(measured on ``bench/api_load.py``: see docs/api.md, "What a tool turn costs").
"""

from __future__ import annotations

import functools
import time

from fastapi.responses import JSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from berth.api.body_limit import NO_BODY, BodyLimits, content_length, too_large
from berth.api.errors import error_body
from berth.api.header_limit import headers_over_limit
from berth.api.security_headers import headers_for, with_security_headers
from berth.turns.services import HostServices

__all__ = ["EdgeMiddleware"]

_NO_HEADERS: tuple[tuple[bytes, bytes], ...] = ()


class EdgeMiddleware:
    """Header limits, hardening headers, CORS, latency and body limits in one pure ASGI layer (see the module's
    text); streaming responses and client disconnects pass through untouched."""

    def __init__(self, app: ASGIApp, services: HostServices, cors_origins: list[str]) -> None:
        self.app = app
        self._services = services
        self._limits = BodyLimits(services.current_gateway)
        self._cors: CORSMiddleware | None = None
        if cors_origins:
            inner = functools.partial(self._measured, added=_NO_HEADERS, vary=False)
            self._cors = CORSMiddleware(inner, allow_origins=cors_origins, allow_methods=["*"], allow_headers=["*"])

    @property
    def body_limits(self) -> BodyLimits:
        """The body limits this layer holds requests to."""
        return self._limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (other scopes, lifespan and websockets, pass through)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", ())
        problem = headers_over_limit(headers)
        if problem is not None:
            response = JSONResponse(error_body("headers_too_large", problem), status_code=431)
            await response(scope, receive, send)
            return
        added = headers_for(scope["path"])
        if self._cors is None:
            await self._measured(scope, receive, send, added=added, vary=False)
            return
        if not any(name == b"origin" for name, _ in headers):
            await self._measured(scope, receive, send, added=added, vary=True)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_security_headers(list(message.get("headers", ())), added)}
            await send(message)

        await self._cors(scope, receive, secured)

    async def _measured(
        self, scope: Scope, receive: Receive, send: Send, *, added: tuple[tuple[bytes, bytes], ...], vary: bool
    ) -> None:
        """Latency and body limits around the app; ``added`` (hardening headers) and ``vary`` (``Vary: Origin``)
        go on the response's start."""
        started = time.perf_counter()
        status = 500
        limit = None if scope["method"] in NO_BODY else self._limits.limit_for(scope["path"])
        received = 0
        overflowed = False
        answered = False

        def decorated(message: Message) -> Message:
            nonlocal status
            status = int(message["status"])
            if not added and not vary:
                return message
            headers = list(message.get("headers", ()))
            if vary:
                headers = _vary_on_origin(headers)
            return {**message, "headers": with_security_headers(headers, added) if added else headers}

        async def outward(message: Message) -> None:
            await send(decorated(message) if message["type"] == "http.response.start" else message)

        async def refuse() -> None:
            nonlocal answered
            answered = True
            assert limit is not None
            error = too_large(limit, limit, declared=False)
            await JSONResponse(error_body(error.code, error.message), status_code=413)(scope, receive, outward)

        async def counted() -> Message:
            nonlocal received, overflowed
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if limit is not None and received > limit:
                    overflowed = True
                    raise too_large(limit, limit, declared=False)
            return message

        async def edge_send(message: Message) -> None:
            # Whatever the app makes of a failed read (FastAPI answers "error parsing the body", 400), the client
            # is told what happened: 413 payload_too_large.
            nonlocal answered
            if message["type"] != "http.response.start":
                if not overflowed:
                    await send(message)
                return
            if overflowed:
                if not answered:
                    await refuse()
                return
            answered = True
            await send(decorated(message))

        try:
            if limit is None:
                await self.app(scope, receive, edge_send)
                return
            declared = content_length(scope.get("headers", ()))
            if declared is not None and declared > limit:
                error = too_large(declared, limit, declared=True)
                await JSONResponse(error_body(error.code, error.message), status_code=413)(scope, receive, outward)
                return
            try:
                await self.app(scope, counted, edge_send)
            except Exception:
                if not overflowed or answered:
                    raise
                await refuse()
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self._services.metrics.http.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - started
            )


def _vary_on_origin(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``Origin`` added to ``Vary`` (one header), as ``CORSMiddleware`` answers a request
    without an ``Origin``."""
    values = [value for name, value in headers if name == b"vary"]
    merged = (b"vary", b", ".join([*values, b"Origin"]))
    if not values:
        return [*headers, merged]
    out: list[tuple[bytes, bytes]] = []
    merged_in = False
    for header in headers:
        if header[0] != b"vary":
            out.append(header)
        elif not merged_in:
            out.append(merged)
            merged_in = True
    return out
