"""Request body limits: ``gateway.yaml``'s ``max_body_bytes`` of the tenant a request is for, on every route.

:class:`~berth.api.edge.EdgeMiddleware`, the app's one middleware layer, holds the limit before any route reads a
byte: a declared ``Content-Length`` over the limit is answered **413** at once; a body sent without one (chunked)
is counted as it arrives, the read that crosses the limit fails (so no route stores anything), and the client gets
the same 413 ``payload_too_large`` whatever the route made of the failed read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from berth.config.models.gateway import GatewayDescriptor
from berth.turns.errors import ServiceError

__all__ = ["NO_BODY", "BodyLimits", "content_length", "tenant_of_path", "too_large"]

NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods whose requests are not counted (they carry no body)."""


def tenant_of_path(path: str) -> str | None:
    """The tenant a request path is scoped to (``/v1/{tenant}/…``, ``/mcp/{tenant}/…``), else None."""
    parts = path.split("/", 4)
    if len(parts) >= 4 and parts[1] in ("v1", "mcp") and parts[2] not in ("admin", "me", ""):
        return parts[2]
    return None


def too_large(size: int, limit: int, *, declared: bool) -> ServiceError:
    """The 413 ``payload_too_large`` error of a body that declares (or has more than) ``size`` bytes."""
    how = "declares" if declared else "has more than"
    return ServiceError(413, "payload_too_large", f"the request body {how} {size} bytes; the limit is {limit}")


class BodyLimits:
    """The tenants' ``limits.*.max_body_bytes`` (the default's elsewhere), read from the host's current gateway."""

    def __init__(self, gateway: Callable[[], GatewayDescriptor | None]) -> None:
        self._gateway = gateway

    def limit_for(self, path: str) -> int | None:
        """The body limit of a request to ``path`` (None before the host has its configuration)."""
        gateway = self._gateway()
        if gateway is None:
            return None
        tenant = tenant_of_path(path)
        limits = gateway.limits.for_tenant(tenant) if tenant is not None else gateway.limits.default
        return limits.max_body_bytes


def content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    """The request's declared ``Content-Length`` (None: none, or not a number)."""
    for name, value in headers:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None
