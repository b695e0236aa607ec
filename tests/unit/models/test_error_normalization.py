"""Provider errors become the seam's errors with stable codes; transient ones are marked for retry."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest

from berth.default_plugins.models.anthropic import normalize_anthropic_error
from berth.default_plugins.models.openai_compatible import normalize_chat_error
from berth.models import (
    ModelContextOverflow,
    ModelProviderError,
    ModelRateLimited,
    ModelUnavailable,
    TransientModelError,
)

ERROR_CLASSES: dict[int, type[anthropic.APIStatusError]] = {
    200: anthropic.APIStatusError,
    400: anthropic.BadRequestError,
    401: anthropic.AuthenticationError,
    403: anthropic.PermissionDeniedError,
    404: anthropic.NotFoundError,
    429: anthropic.RateLimitError,
    500: anthropic.InternalServerError,
    529: anthropic.OverloadedError,
}


def anthropic_error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Any:
    """The SDK's own exception for an Anthropic error body (status 200 = an ``event: error`` mid-stream)."""
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx2.Response(status, request=request, headers=headers or {})
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return ERROR_CLASSES[status](f"Error code: {status} - {body}", response=response, body=body)


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(429, "rate_limit_error"), (529, "overloaded_error"), (200, "overloaded_error")],
)
def test_rate_limits_and_overload_are_retried_then_rate_limited(status: int, error_type: str) -> None:
    normalized = normalize_anthropic_error(anthropic_error(status, error_type, "slow down"))
    assert isinstance(normalized, TransientModelError)
    exhausted = normalized.exhausted(3)
    assert isinstance(exhausted, ModelRateLimited)
    assert exhausted.code == "rate_limited"
    assert exhausted.attempts == 3
    assert "slow down; gave up after 3 attempts, try again later" in exhausted.message


def test_retry_after_is_read_from_an_http_error_only() -> None:
    http = normalize_anthropic_error(anthropic_error(429, "rate_limit_error", "x", {"retry-after": "7"}))
    assert isinstance(http, TransientModelError)
    assert http.retry_after_s == 7.0
    event = normalize_anthropic_error(anthropic_error(200, "rate_limit_error", "x", {"retry-after": "7"}))
    assert isinstance(event, TransientModelError)
    assert event.retry_after_s is None


def test_server_errors_are_retried_then_unavailable() -> None:
    normalized = normalize_anthropic_error(anthropic_error(500, "api_error", "Internal server error"))
    assert isinstance(normalized, TransientModelError)
    assert isinstance(normalized.exhausted(1), ModelUnavailable)
    assert normalized.exhausted(1).code == "model_unavailable"
    assert normalized.exhausted(1).message.endswith("gave up after 1 attempt")


def test_prompt_too_long_is_a_context_overflow() -> None:
    exc = anthropic_error(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
    normalized = normalize_anthropic_error(exc)
    assert isinstance(normalized, ModelContextOverflow)
    assert normalized.code == "context_overflow"
    assert "208310 tokens" in normalized.message


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        (400, "invalid_request_error", "invalid_request"),
        (401, "authentication_error", "authentication_failed"),
        (403, "permission_error", "permission_denied"),
        (404, "not_found_error", "model_not_found"),
        (200, "invalid_request_error", "invalid_request"),
    ],
)
def test_other_errors_get_a_specific_code(status: int, error_type: str, code: str) -> None:
    normalized = normalize_anthropic_error(anthropic_error(status, error_type, "no"))
    assert isinstance(normalized, ModelProviderError)
    assert normalized.code == code
    assert error_type in normalized.message


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (429, {"error": {"message": "Rate limit reached", "type": "requests"}}, ModelRateLimited),
        (503, {"error": {"message": "busy", "type": "server_error"}}, ModelUnavailable),
        (502, "Bad Gateway", ModelUnavailable),
    ],
)
def test_chat_completions_transient_errors(status: int, body: Any, expected: type[Exception]) -> None:
    normalized = normalize_chat_error(status, body)
    assert isinstance(normalized, TransientModelError)
    assert isinstance(normalized.exhausted(4), expected)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "This model's maximum context length is 8192 tokens. However, you requested 9000"}},
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size",
                "type": "exceed_context_size_error",
            }
        },
        {"error": {"message": "too long", "code": "context_length_exceeded"}},
    ],
)
def test_chat_completions_context_overflow_from_vllm_llamacpp_and_openai(body: Any) -> None:
    assert isinstance(normalize_chat_error(400, body), ModelContextOverflow)


@pytest.mark.parametrize(
    ("status", "code"), [(401, "authentication_failed"), (404, "model_not_found"), (418, "provider_error")]
)
def test_chat_completions_other_errors(status: int, code: str) -> None:
    normalized = normalize_chat_error(status, {"detail": "nope"})
    assert isinstance(normalized, ModelProviderError)
    assert normalized.code == code
    assert "nope" in normalized.message


def test_error_messages_mask_registered_secret_values() -> None:
    from berth.config.secrets import Secret

    Secret("leaky", "sk-ant-very-secret-value")
    error = ModelProviderError("invalid_request", "server echoed sk-ant-very-secret-value back")
    assert "sk-ant-very-secret-value" not in str(error)
    assert "sk-ant-very-secret-value" not in repr(error)
