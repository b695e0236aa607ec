"""The model-provider seam (SPEC §4.10): request and event types, the provider protocol, normalized errors.

:mod:`~berth.models.protocol` holds :class:`ModelProvider`, :class:`ModelRequest` and the events,
:mod:`~berth.models.errors` the errors with stable codes, :mod:`~berth.models.retry` the shared
backoff. The providers themselves (``anthropic``, ``openai-compatible``, ``scripted``) are platform
plugins in :mod:`berth.default_plugins.models`.
"""

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
