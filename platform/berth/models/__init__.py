"""The model-provider seam (SPEC §4.10): request and event types, the provider protocol, normalized errors.

:mod:`~berth.models.protocol` holds :class:`ModelProvider`, :class:`ModelRequest` and (from
:mod:`~berth.models.events`) the events, :mod:`~berth.models.errors` the errors with stable codes,
:mod:`~berth.models.retry` the shared backoff. The providers themselves (``anthropic``, ``openai-compatible``,
``scripted``) are platform plugins in :mod:`berth.default_plugins.models`.

The names below are imported on first use (PEP 562): ``from berth.models.errors import …`` in a provider plugin,
which the host loads at start-up, does not import the request type and with it the runtime's renderer.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from berth.models.errors import (
        ModelContextOverflow,
        ModelError,
        ModelProviderError,
        ModelRateLimited,
        ModelUnavailable,
        ProviderErrorCode,
    )
    from berth.models.protocol import (
        DEFAULT_MAX_OUTPUT_TOKENS,
        ModelCompleted,
        ModelEvent,
        ModelProvider,
        ModelProviderFactory,
        ModelRequest,
        SecretLookup,
        StopReason,
        TextDelta,
        Usage,
        resolve_api_key,
    )
    from berth.models.retry import RetryPolicy, Sleep, TransientModelError, stream_with_retries

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "ModelContextOverflow",
            "ModelError",
            "ModelProviderError",
            "ModelRateLimited",
            "ModelUnavailable",
            "ProviderErrorCode",
        ),
        "berth.models.errors",
    ),
    **dict.fromkeys(
        (
            "DEFAULT_MAX_OUTPUT_TOKENS",
            "ModelCompleted",
            "ModelEvent",
            "ModelProvider",
            "ModelProviderFactory",
            "ModelRequest",
            "SecretLookup",
            "StopReason",
            "TextDelta",
            "Usage",
            "resolve_api_key",
        ),
        "berth.models.protocol",
    ),
    **dict.fromkeys(("RetryPolicy", "Sleep", "TransientModelError", "stream_with_retries"), "berth.models.retry"),
}
"""Each re-exported name and the module it comes from."""


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use and keep it in the module."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ModelCompleted",
    "ModelContextOverflow",
    "ModelError",
    "ModelEvent",
    "ModelProvider",
    "ModelProviderError",
    "ModelProviderFactory",
    "ModelRateLimited",
    "ModelRequest",
    "ModelUnavailable",
    "ProviderErrorCode",
    "RetryPolicy",
    "SecretLookup",
    "Sleep",
    "StopReason",
    "TextDelta",
    "TransientModelError",
    "Usage",
    "resolve_api_key",
    "stream_with_retries",
]
