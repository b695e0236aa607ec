"""API errors: one JSON shape, ``{"error": {"code", "message", "details"}}``, never a stack trace.

The turn service raises :class:`~berth.turns.errors.ServiceError` (admission, callers, the host services a worker
runs on too); this module answers it over HTTP. FastAPI is imported only by :func:`install_error_handlers`, when an
app is built.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from berth.config.errors import ConfigError
from berth.config.redaction import redact
from berth.turns.errors import ServiceError

if TYPE_CHECKING:
    from fastapi import FastAPI, Request

    SCOPED_ERRORS: dict[int | str, dict[str, Any]]
    ADMIN_ERRORS: dict[int | str, dict[str, Any]]

log = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` documenting ``statuses`` as :class:`~berth.api.schemas.ErrorResponse` bodies."""
    from berth.api.schemas import ErrorResponse

    return {status: {"model": ErrorResponse, "description": _STATUS_CODES[status]} for status in statuses}


_DOCUMENTED_ERRORS: dict[str, tuple[int, ...]] = {
    "SCOPED_ERRORS": (400, 401, 404, 409, 413, 415, 422, 429, 503),
    "ADMIN_ERRORS": (401, 403, 404, 413, 422, 503),
}
"""``SCOPED_ERRORS``: what a route under ``/v1/{tenant}/{project}`` may answer besides its success;
``ADMIN_ERRORS``: what an admin route may. Built on first use (PEP 562): their bodies are the API's pydantic
schemas, which only the routes need."""


def __getattr__(name: str) -> Any:
    """``SCOPED_ERRORS`` and ``ADMIN_ERRORS`` (:func:`error_responses` of their statuses), made on first use."""
    statuses = _DOCUMENTED_ERRORS.get(name)
    if statuses is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = error_responses(*statuses)
    globals()[name] = value
    return value


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of an error."""
    return {"error": {"code": code, "message": redact(message), "details": details or {}}}


def invalid_request(errors: Sequence[Any]) -> ServiceError:
    """422 listing each problem of a request that failed validation (pydantic's or FastAPI's errors)."""
    problems = [
        {"field": ".".join(str(p) for p in error["loc"] if p != "body"), "message": error["msg"]} for error in errors
    ]
    message = "; ".join(f"{p['field'] or 'body'}: {p['message']}" for p in problems)
    return ServiceError(422, "invalid_request", message, {"problems": problems})


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error with the JSON shape above."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(ServiceError)
    async def api_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        invalid = invalid_request(exc.errors())
        return JSONResponse(error_body(invalid.code, invalid.message, invalid.details), status_code=invalid.status)

    @app.exception_handler(ConfigError)
    async def config_error(request: Request, exc: ConfigError) -> JSONResponse:
        status = 404 if exc.code in {"unknown_scope", "bundle_not_visible", "bundle_unknown"} else 503
        return JSONResponse(error_body(exc.code, str(exc)), status_code=status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", "the server failed; the error is logged"), status_code=500)
