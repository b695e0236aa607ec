"""The names of the ``anthropic`` provider: how model references name it, the secret and the SDK's environment
variables it reads. Shared by the plugin (:mod:`~berth.default_plugins.models.anthropic_plugin`, imported by every
process) and the provider (:mod:`~berth.default_plugins.models.anthropic`, imported on first use)."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_SECRET_NAME", "PROVIDER_NAME", "SDK_BASE_URL_VARIABLE", "SDK_KEY_VARIABLE"]

PROVIDER_NAME: Final = "anthropic"
DEFAULT_SECRET_NAME: Final = "anthropic_api_key"
"""The platform secret read when a model reference names no ``api_key``."""
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
SDK_KEY_VARIABLE: Final = "ANTHROPIC_API_KEY"
"""Read as the SDK would when neither the model nor ``secrets.yaml`` names a key."""
SDK_BASE_URL_VARIABLE: Final = "ANTHROPIC_BASE_URL"
"""Read as the SDK would when the model names no ``base_url``."""
