"""Platform plugins: discovery through the ``berth.plugins`` entry-point group, and a typed facade.

Built-in plugins in ``berth.plugins`` register through the same group as a third party's would.
``BERTH_PLUGINS`` (allow-list) and ``BERTH_DISABLE_PLUGINS`` (deny-list) choose which load; both are
comma-separated entry-point names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pluggy
from importlib_metadata import entry_points

from berth import hooks
from berth.config.environment import host_environment
from berth.config.errors import ConfigError
from berth.config.secrets import BUILTIN_PROVIDER_NAMES, SecretProviderFactory

PLUGIN_GROUP = "berth.plugins"


class PluginConflictError(ConfigError):
    """Two plugins register the same backend name (or a plugin claims a built-in one)."""

    def __init__(self, message: str) -> None:
        super().__init__("plugin_conflict", message)


@dataclass(frozen=True)
class PluginRecord:
    """One registered platform plugin: its entry-point name and the distribution that ships it."""

    name: str
    package: str


def plugin_selection(names: Iterable[str]) -> list[str]:
    """Filter entry-point ``names`` by ``BERTH_PLUGINS`` / ``BERTH_DISABLE_PLUGINS``."""
    environment = host_environment()
    allow = _names(environment.plugins)
    deny = _names(environment.disable_plugins)
    return [name for name in names if (allow is None or name in allow) and name not in (deny or set())]


def _names(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


class PlatformPlugins:
    """The host's plugin manager with typed accessors, so core code never calls hooks by string."""

    def __init__(self) -> None:
        self._manager = pluggy.PluginManager(hooks.PROJECT_NAME)
        self._manager.add_hookspecs(hooks)
        self._records: dict[str, PluginRecord] = {}

    @classmethod
    def discover(cls) -> PlatformPlugins:
        """Register every selected plugin of the ``berth.plugins`` entry-point group."""
        plugins = cls()
        found = {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}
        for name in plugin_selection(sorted(found)):
            point = found[name]
            package = point.dist.name if point.dist is not None else "unknown"
            plugins.register(point.load(), name=name, package=package)
        return plugins

    def register(self, plugin: object, *, name: str, package: str) -> None:
        """Register ``plugin`` (a module or object with ``@hookimpl`` functions)."""
        self._manager.register(plugin, name=name)
        self._records[name] = PluginRecord(name, package)

    def unregister(self, name: str) -> None:
        """Remove the plugin registered as ``name``."""
        self._manager.unregister(name=name)
        self._records.pop(name, None)

    @property
    def records(self) -> list[PluginRecord]:
        """Every registered plugin, by name."""
        return sorted(self._records.values(), key=lambda record: record.name)

    def secret_providers(self) -> dict[str, SecretProviderFactory]:
        """Every plugin secret provider, by prefix."""
        merged = self._collect("berth_secret_providers", reserved=BUILTIN_PROVIDER_NAMES)
        return cast(dict[str, SecretProviderFactory], merged)

    def storage_backends(self) -> dict[str, Callable[..., Any]]:
        """Every storage backend factory, by kind."""
        return self._collect("berth_storage_backends")

    def model_providers(self) -> dict[str, Callable[..., Any]]:
        """Every model provider factory, by name."""
        return self._collect("berth_model_providers")

    def exec_backends(self) -> dict[str, Callable[..., Any]]:
        """Every exec backend factory, by name."""
        return self._collect("berth_exec_backends")

    def tool_packs(self) -> dict[str, Callable[..., Any]]:
        """Every tool pack factory, by id."""
        return self._collect("berth_tool_packs")

    def embedders(self) -> dict[str, Callable[..., Any]]:
        """Every embedder factory, by name."""
        return self._collect("berth_embedders")

    def _collect(self, hook_name: str, reserved: Iterable[str] = ()) -> dict[str, Any]:
        """Merge one mapping-returning hook across plugins, refusing duplicate names."""
        caller = getattr(self._manager.hook, hook_name)
        merged: dict[str, Any] = {}
        owners: dict[str, str] = {}
        reserved_names = set(reserved)
        for impl in caller.get_hookimpls():  # in registration order
            package = self._package_of(impl.plugin_name)
            contributed: Mapping[str, Any] = impl.function() or {}
            for backend_name, factory in contributed.items():
                if backend_name in reserved_names:
                    raise PluginConflictError(
                        f"plugin package '{package}' registers '{backend_name}' for {hook_name}, a built-in name"
                    )
                if backend_name in merged:
                    raise PluginConflictError(
                        f"plugin packages '{owners[backend_name]}' and '{package}' both register "
                        f"'{backend_name}' for {hook_name}; uninstall one or disable it with BERTH_DISABLE_PLUGINS"
                    )
                merged[backend_name] = factory
                owners[backend_name] = package
        return merged

    def _package_of(self, plugin_name: str) -> str:
        record = self._records.get(plugin_name)
        return record.package if record is not None else plugin_name
