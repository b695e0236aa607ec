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

:class:`~berth.api.edge.EdgeMiddleware` adds them to the response start (replacing any of the same name) and
touches nothing else.
"""

from __future__ import annotations

import re
from typing import Final

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


def with_security_headers(
    headers: list[tuple[bytes, bytes]], added: tuple[tuple[bytes, bytes], ...]
) -> list[tuple[bytes, bytes]]:
    """A response's ``headers`` with ``added`` (:func:`headers_for`) in place of any header of the same name."""
    names = {name for name, _ in added}
    return [*(header for header in headers if header[0].lower() not in names), *added]
