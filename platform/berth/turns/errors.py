"""The errors the turn service reports to whoever called it: a stable ``code``, a message and the HTTP status the
API answers with (the CLI prints the message; the worker's health port answers the status too)."""

from __future__ import annotations

from typing import Any

__all__ = ["ServiceError", "not_found"]


class ServiceError(Exception):
    """A request the service refuses or cannot serve: ``status`` (as HTTP names it), a stable ``code``, a message
    and details; ``headers`` for the HTTP answer (``Retry-After``, ``WWW-Authenticate``)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers
        super().__init__(message)


def not_found(what: str) -> ServiceError:
    """404 that says what was not found (the same for "exists elsewhere" and "does not exist")."""
    return ServiceError(404, "not_found", f"{what} not found")
