"""Normalized model-provider errors: one small hierarchy with stable codes, whatever the provider.

=====================  ====================================================================
error                  what the runtime does
=====================  ====================================================================
ModelRateLimited       retries were exhausted on 429 / 529 / overload: end the turn with a
                       ``rate_limited`` error event (the user may try again later)
ModelContextOverflow   the prompt exceeds the model's context: compact, then retry once
ModelUnavailable       the provider could not be reached (connection, timeout, 5xx) after retries
ModelProviderError     anything else, with a specific ``code`` (see :data:`ProviderErrorCode`)
=====================  ====================================================================

Messages never contain secrets: they are built from status codes and the provider's own error text,
and pass through :func:`berth.config.redaction.redact` as a second line of defence.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from berth.config.redaction import redact

__all__ = [
    "ModelContextOverflow",
    "ModelError",
    "ModelProviderError",
    "ModelRateLimited",
    "ModelUnavailable",
    "ProviderErrorCode",
]

ProviderErrorCode: TypeAlias = Literal[
    "authentication_failed",
    "permission_denied",
    "model_not_found",
    "invalid_request",
    "request_too_large",
    "payment_required",
    "provider_error",
    "stream_interrupted",
    "invalid_response",
    "invalid_prompt",
    "script_exhausted",
    "script_invalid",
]
"""The codes of :class:`ModelProviderError`."""


class ModelError(Exception):
    """Base of every normalized provider error: a stable ``code`` and a message safe to show."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = redact(message)
        super().__init__(f"{code}: {self.message}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ModelRateLimited(ModelError):  # noqa: N818 - the names are the seam's vocabulary (SPEC §4.10)
    """The provider kept refusing for load (429, 529, ``overloaded_error``) until retries ran out."""

    def __init__(self, message: str, *, attempts: int) -> None:
        self.attempts = attempts
        super().__init__("rate_limited", message)


class ModelContextOverflow(ModelError):  # noqa: N818
    """The prompt does not fit the model's context window; the caller compacts and retries once."""

    def __init__(self, message: str) -> None:
        super().__init__("context_overflow", message)


class ModelUnavailable(ModelError):  # noqa: N818
    """The provider could not be reached or kept failing with server errors until retries ran out."""

    def __init__(self, message: str, *, attempts: int) -> None:
        self.attempts = attempts
        super().__init__("model_unavailable", message)


class ModelProviderError(ModelError):
    """Any other provider failure; ``code`` says which (see :data:`ProviderErrorCode`)."""

    code: ProviderErrorCode

    def __init__(self, code: ProviderErrorCode, message: str) -> None:
        super().__init__(code, message)
