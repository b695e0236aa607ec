"""Request body limits: ``gateway.yaml``'s ``max_body_bytes`` of the tenant a request is for, on every route.

A pure ASGI middleware, so the limit holds before any route reads a byte: a declared ``Content-Length``
over the limit is answered **413** at once; a body sent without one (chunked) is counted as it arrives, the
read that crosses the limit fails (so no route stores anything), and the client gets the same 413
``payload_too_large`` whatever the route made of the failed read.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from berth.api.errors import error_body
from berth.config.models.gateway import GatewayDescriptor
from berth.turns.errors import ServiceError

__all__ = ["BodyLimitMiddleware", "tenant_of_path"]

_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})


def tenant_of_path(path: str) -> str | None:
    """The tenant a request path is scoped to (``/v1/{tenant}/…``, ``/mcp/{tenant}/…``), else None."""
    parts = path.split("/", 4)
    if len(parts) >= 4 and parts[1] in ("v1", "mcp") and parts[2] not in ("admin", "me", ""):
        return parts[2]
    return None


def _too_large(size: int, limit: int, *, declared: bool) -> ServiceError:
    how = "declares" if declared else "has more than"
    return ServiceError(413, "payload_too_large", f"the request body {how} {size} bytes; the limit is {limit}")


class BodyLimitMiddleware:
    """Refuses request bodies over the tenant's ``limits.*.max_body_bytes`` (the default's elsewhere)."""

    def __init__(self, app: ASGIApp, gateway: Callable[[], GatewayDescriptor | None]) -> None:
        self.app = app
        self._gateway = gateway

    def limit_for(self, path: str) -> int | None:
        """The body limit of a request to ``path`` (None before the host has its configuration)."""
        gateway = self._gateway()
        if gateway is None:
            return None
        tenant = tenant_of_path(path)
        limits = gateway.limits.for_tenant(tenant) if tenant is not None else gateway.limits.default
        return limits.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with its body counted against the limit."""
        if scope["type"] != "http" or scope["method"] in _NO_BODY:
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            error = _too_large(declared, limit, declared=True)
            await JSONResponse(error_body(error.code, error.message), status_code=413)(scope, receive, send)
            return
        received = 0
        overflowed = False
        answered = False

        async def counted() -> Message:
            nonlocal received, overflowed
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    overflowed = True
                    raise _too_large(limit, limit, declared=False)
            return message

        async def refuse() -> None:
            nonlocal answered
            answered = True
            error = _too_large(limit, limit, declared=False)
            await JSONResponse(error_body(error.code, error.message), status_code=413)(scope, receive, send)

        async def guarded(message: Message) -> None:
            # Whatever the app makes of the failed read (FastAPI answers "error parsing the body", 400), the
            # client is told what happened: 413 payload_too_large.
            nonlocal answered
            if overflowed:
                if not answered and message["type"] == "http.response.start":
                    await refuse()
                return
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not overflowed or answered:
                raise
            await refuse()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None
