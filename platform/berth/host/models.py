"""Model providers for a scope: the configured model of each role, built once through its plugin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth.config import ConfigError, Configuration
from berth.config.models.assembly import ModelRef
from berth.config.models.common import SecretSetting
from berth.config.secrets import Secret
from berth.config.settings import PlatformSettings
from berth.models.protocol import ModelProvider, ModelProviderFactory


class ModelPool:
    """Builds and caches one provider per distinct :class:`ModelRef`; closes them all at the end."""

    def __init__(self, config: Configuration, factories: Mapping[str, Any]) -> None:
        self._config = config
        self._factories: dict[str, ModelProviderFactory] = dict(factories)
        self._providers: dict[str, ModelProvider] = {}

    def resolver(self, settings: PlatformSettings) -> Any:
        """A :data:`berth.runtime.loop.ModelResolver` for one scope's settings."""

        def resolve(role: str | None) -> tuple[ModelRef, ModelProvider]:
            model_ref = settings.models.for_role(role)
            return model_ref, self.provider(model_ref)

        return resolve

    def provider(self, model_ref: ModelRef) -> ModelProvider:
        """The provider for ``model_ref`` (built on first use)."""
        key = model_ref.model_dump_json()
        provider = self._providers.get(key)
        if provider is None:
            factory = self._factories.get(model_ref.provider)
            if factory is None:
                known = ", ".join(sorted(self._factories)) or "none installed"
                raise ConfigError(
                    "model_provider_unknown", f"no model provider '{model_ref.provider}' (installed: {known})"
                )
            provider = factory(model_ref, self._secret)
            self._providers[key] = provider
        return provider

    def _secret(self, value: SecretSetting | str) -> Secret:
        return resolve_model_secret(self._config, value)

    async def aclose(self) -> None:
        """Close every provider built."""
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()


def resolve_model_secret(config: Configuration, value: SecretSetting | str) -> Secret:
    """The :data:`~berth.models.protocol.SecretLookup` model providers get: a model's ``api_key`` setting, or a
    platform secret by name."""
    resolver = config.secret_resolver
    if isinstance(value, SecretSetting):
        return resolver.resolve_setting(value, "models.api_key")
    return resolver.platform_secret(value)
