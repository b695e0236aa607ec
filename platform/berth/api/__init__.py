"""The HTTP API (SPEC §9): :func:`~berth.api.app.create_app` builds the FastAPI application over the host services
of :mod:`berth.turns`. Only HTTP lives here: routes, schemas, middleware, the MCP endpoint and SSE framing."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    """``create_app``, imported on first use (PEP 562): importing a module of the package stays cheap."""
    if name == "create_app":
        from berth.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
