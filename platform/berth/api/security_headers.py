"""Browser hardening headers: a strict Content-Security-Policy on the web UI, a sandbox on every widget.

* The UI (``/`` and ``/static/…``) loads only its own script and style, talks only to its own origin, frames only
  its own widgets and is framed by nobody: ``default-src 'self'``, no inline script or style, ``object-src
  'none'``, ``base-uri 'none'``, ``frame-ancestors 'none'``; plus ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and ``X-Frame-Options: DENY`` for browsers without CSP level 2.
* A widget (``/v1/{tenant}/{project}/bundles/{bundle}/widgets/…``) is bundle code. Its responses carry
  ``Content-Security-Policy: sandbox allow-scripts allow-forms``: even opened directly (not in the UI's sandboxed
  iframe) it runs in an opaque origin, so it can never read the UI's local storage (where the API key is kept) or
  call the API as the user. It may be framed only by the UI (``frame-ancestors 'self'``).
* A conversation's file (``/v1/{tenant}/{project}/conversations/{id}/files/…``) is a user's upload or a tool's
  output: ``Content-Security-Policy: sandbox`` (no script, an opaque origin) whatever its type, and ``nosniff``
  (its type is the sniffed one: :mod:`berth.api.downloads`).
* Every other response gets ``X-Content-Type-Options: nosniff``.

A pure ASGI middleware: it adds headers to the response start and touches nothing else.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

UI_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "frame-src 'self'; frame-ancestors 'none'; object-src 'none'; base-uri 'none'; form-action 'self'"
)
WIDGET_POLICY: Final = "sandbox allow-scripts allow-forms; frame-ancestors 'self'; object-src 'none'; base-uri 'none'"

UI_HEADERS: Final = (
    (b"content-security-policy", UI_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
WIDGET_HEADERS: Final = (
    (b"content-security-policy", WIDGET_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
FILE_POLICY: Final = "sandbox"
FILE_HEADERS: Final = (
    (b"content-security-policy", FILE_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
OTHER_HEADERS: Final = ((b"x-content-type-options", b"nosniff"),)
_FILE_PATH: Final = re.compile(r"^/v1/[^/]+/[^/]+/conversations/[^/]+/files/")
_WIDGET_PATH: Final = re.compile(r"^/v1/[^/]+/[^/]+/bundles/[^/]+/widgets/")


def headers_for(path: str) -> tuple[tuple[bytes, bytes], ...]:
    """The hardening headers of a response to ``path``."""
    if path == "/" or path.startswith("/static/"):
        return UI_HEADERS
    if _WIDGET_PATH.match(path):
        return WIDGET_HEADERS
    if _FILE_PATH.match(path):
        return FILE_HEADERS
    return OTHER_HEADERS


class SecurityHeadersMiddleware:
    """Adds :func:`headers_for`'s headers to every HTTP response (replacing any of the same name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request; decorate the response's start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = headers_for(scope["path"])
        names = {name for name, _ in added}

        async def decorated(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(name, value) for name, value in message.get("headers", ()) if name.lower() not in names]
                message = {**message, "headers": [*kept, *added]}
            await send(message)

        await self.app(scope, receive, decorated)
