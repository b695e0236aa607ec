"""The ``anthropic`` platform plugin: registers the provider without importing the SDK.

The SDK takes about two seconds to import; every ``berth`` command and host process loads the installed plugins,
and most never call Anthropic (a worker on another provider, ``berth descriptors check``). The provider module
(:mod:`berth.default_plugins.models.anthropic`) is imported when a model reference first needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.config.models.assembly import ModelRef
    from berth.models.protocol import ModelProvider, ModelProviderFactory, SecretLookup

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_SECRET_NAME",
    "PROVIDER_NAME",
    "SDK_BASE_URL_VARIABLE",
    "SDK_KEY_VARIABLE",
    "berth_model_providers",
    "create_provider",
]

PROVIDER_NAME: Final = "anthropic"
DEFAULT_SECRET_NAME: Final = "anthropic_api_key"
"""The platform secret read when a model reference names no ``api_key``."""
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
SDK_KEY_VARIABLE: Final = "ANTHROPIC_API_KEY"
"""Read as the SDK would when neither the model nor ``secrets.yaml`` names a key."""
SDK_BASE_URL_VARIABLE: Final = "ANTHROPIC_BASE_URL"
"""Read as the SDK would when the model names no ``base_url``."""


def create_provider(model_ref: ModelRef, secrets: SecretLookup) -> ModelProvider:
    """Build the provider for ``model_ref`` (importing the SDK on first use); see
    :func:`berth.default_plugins.models.anthropic.create_anthropic_provider`."""
    from berth.default_plugins.models.anthropic import create_anthropic_provider

    return create_anthropic_provider(model_ref, secrets)


@hookimpl
def berth_model_providers() -> dict[str, ModelProviderFactory]:
    """Contribute the ``anthropic`` provider."""
    return {PROVIDER_NAME: create_provider}
