"""The host's configuration object: validated descriptors, lazily resolved secrets, settings cached per scope.

Imported as ``berth.config.Configuration`` (the package re-exports it on first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from berth.config.descriptors import DescriptorSet
from berth.config.environment import host_environment
from berth.config.loading import load_descriptor_set
from berth.config.props import effective_props
from berth.config.secrets import Secret, SecretProviderFactory, SecretResolver, SecretScope
from berth.config.settings import PlatformSettings, require_scope, resolve_platform_settings

PropsModel = TypeVar("PropsModel", bound=BaseModel)

DEFAULT_DESCRIPTORS_DIR = Path("descriptors")


def find_descriptors_dir(explicit: Path | None = None) -> Path | None:
    """Where the descriptors are: ``explicit`` (``--descriptors``), else ``$BERTH_DESCRIPTORS``,
    else ``./descriptors`` if it exists, else None (the embedded defaults)."""
    if explicit is not None:
        return explicit
    from_env = host_environment().descriptors
    if from_env is not None:
        return from_env
    return DEFAULT_DESCRIPTORS_DIR if DEFAULT_DESCRIPTORS_DIR.is_dir() else None


class Configuration:
    """The host's configuration: validated descriptors plus lazily resolved secrets.

    Effective settings are cached per scope; build a new :class:`Configuration` to pick up changed
    files or environment.
    """

    def __init__(
        self,
        descriptors: DescriptorSet,
        resolver: SecretResolver,
        platform_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.descriptors = descriptors
        self.secret_resolver = resolver
        self.platform_overrides = dict(platform_overrides or {})
        self._settings: dict[tuple[str | None, str | None], PlatformSettings] = {}

    @classmethod
    def load(
        cls,
        root: Path | None,
        *,
        secret_providers: Mapping[str, SecretProviderFactory] | None = None,
        display_root: str | None = None,
        platform_overrides: Mapping[str, Any] | None = None,
    ) -> Configuration:
        """Load and check the descriptor set in ``root`` (None = embedded defaults).

        ``platform_overrides`` is a layer of platform settings above every descriptor and below the
        environment (``berth run --demo`` uses it). Raises :class:`DescriptorError` listing every problem.
        """
        providers = dict(secret_providers or {})
        descriptors = load_descriptor_set(root, secret_providers=providers, display_root=display_root)
        resolver = SecretResolver(
            descriptors.secrets.root,
            descriptors.bundles_secrets,
            base_dir=descriptors.base_dir,
            providers=providers,
            provider_options=descriptors.assembly.platform.secret_providers,
        )
        config = cls(descriptors, resolver, platform_overrides)
        if platform_overrides:
            config.settings_for()  # an invalid override is reported now, not at first use
        return config

    def settings_for(self, tenant: str | None = None, project: str | None = None) -> PlatformSettings:
        """Effective platform settings of ``tenant``/``project`` (``None`` = platform level)."""
        key = (tenant, project)
        cached = self._settings.get(key)
        if cached is None:
            if tenant is not None:
                require_scope(self.descriptors.assembly.tenants, tenant, project)
            cached = resolve_platform_settings(
                self.descriptors.document("assembly.yaml"), tenant, project, self.platform_overrides
            )
            self._settings[key] = cached
        return cached

    def bundle_props(
        self,
        bundle_id: str,
        props_model: type[PropsModel],
        tenant: str | None = None,
        project: str | None = None,
    ) -> PropsModel:
        """A bundle's validated props for a scope (see :func:`berth.config.props.effective_props`)."""
        return effective_props(self.descriptors, bundle_id, props_model, tenant, project)

    def secrets(self, tenant: str | None, project: str | None, bundle_id: str | None = None) -> SecretScope:
        """The ``secret()`` reader of a scope; with ``bundle_id`` it also reads that bundle's ``b:`` secrets."""
        return self.secret_resolver.scope(tenant, project, bundle_id)

    def secret(self, name: str) -> Secret:
        """A platform secret from ``secrets.yaml``."""
        return self.secret_resolver.platform_secret(name)


__all__ = ["DEFAULT_DESCRIPTORS_DIR", "Configuration", "PropsModel", "find_descriptors_dir"]
