"""The ``anthropic`` platform plugin: registers the provider without importing the SDK.

The SDK takes about two seconds to import; every ``berth`` command and host process loads the installed plugins,
and most never call Anthropic (a worker on another provider, ``berth descriptors check``). The provider module
(:mod:`berth.default_plugins.models.anthropic`) is imported when a model reference first needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.default_plugins.models.anthropic_names import PROVIDER_NAME
from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.config.models.assembly import ModelRef
    from berth.models.protocol import ModelProvider, ModelProviderFactory, SecretLookup

__all__ = ["berth_model_providers", "create_provider"]


def create_provider(model_ref: ModelRef, secrets: SecretLookup) -> ModelProvider:
    """Build the provider for ``model_ref`` (importing the SDK on first use); see
    :func:`berth.default_plugins.models.anthropic.create_anthropic_provider`."""
    from berth.default_plugins.models.anthropic import create_anthropic_provider

    return create_anthropic_provider(model_ref, secrets)


@hookimpl
def berth_model_providers() -> dict[str, ModelProviderFactory]:
    """Contribute the ``anthropic`` provider."""
    return {PROVIDER_NAME: create_provider}
