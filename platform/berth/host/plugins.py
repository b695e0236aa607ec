"""Platform plugins: discovery through the ``berth.plugins`` entry-point group, and a typed facade.

The default plugins in ``berth.default_plugins`` register through the same group as a third party's would.
``BERTH_PLUGINS`` (allow-list) and ``BERTH_DISABLE_PLUGINS`` (deny-list) choose which load; both are
comma-separated entry-point names.

A plugin that fails is reported and left out; the host goes on. It fails when its module raises on import
(``plugin_import_failed``), when its hooks do not match Berth's hookspecs (``plugin_invalid_hooks``: pluggy's
validation error, or a ``berth_*`` hook that does not exist), or when one of its hooks raises while the host
collects what it contributes (``plugin_hook_failed``). "Raises" means any exception, ``SystemExit``,
``GeneratorExit`` and the other base exceptions included (a plugin that calls ``sys.exit()`` on import does not end
the host): only a ``KeyboardInterrupt`` goes on up, since it is the user's, not the plugin's. Each failure is
logged once per process at WARNING with the entry point's name, its distribution and the error's file:line, and
listed by ``berth plugins list``, which calls every hook as the host would
(:meth:`PlatformPlugins.call_every_hook`), so a plugin whose hook fails is listed as failed, not loaded.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging
import re
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, cast

import pluggy
from importlib_metadata import EntryPoint, entry_points

from berth import hooks
from berth.config.environment import host_environment
from berth.config.errors import ConfigError
from berth.config.secrets import BUILTIN_PROVIDER_NAMES, SecretProviderFactory
from berth.host.errors import LoadError, load_error_from_exception

PLUGIN_GROUP = "berth.plugins"
PLUGIN_IMPORT_FAILED = "plugin_import_failed"
PLUGIN_INVALID_HOOKS = "plugin_invalid_hooks"
PLUGIN_HOOK_FAILED = "plugin_hook_failed"

PluginState = Literal["loaded", "failed", "disabled"]

logger = logging.getLogger(__name__)
_reported: set[tuple[str, str]] = set()
"""Failures already logged in this process (the host discovers plugins more than once)."""


class PluginConflictError(ConfigError):
    """Two plugins register the same backend name (or a plugin claims a built-in one)."""

    def __init__(self, message: str) -> None:
        super().__init__("plugin_conflict", message)


@dataclass(frozen=True)
class PluginRecord:
    """One platform plugin: its entry-point name, the distribution that ships it, and how loading it went."""

    name: str
    package: str
    version: str | None = None
    state: PluginState = "loaded"
    error: LoadError | None = None
    hooks: tuple[str, ...] = ()
    """The Berth hooks it implements (``berth_`` left off), for a loaded plugin."""


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
        """Register every selected plugin of the ``berth.plugins`` entry-point group; report the ones that fail."""
        plugins = cls()
        found = {point.name: point for point in entry_points(group=PLUGIN_GROUP)}
        selected = set(plugin_selection(sorted(found)))
        for name in sorted(found):
            point = found[name]
            package, version = _distribution_of(point)
            if name not in selected:
                plugins._records[name] = PluginRecord(name, package, version, state="disabled")
                continue
            try:
                module = point.load()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # a plugin's import may raise anything (sys.exit too); reported, never fatal
                error = load_error_from_exception(PLUGIN_IMPORT_FAILED, exc, _source_roots(point.module))
                plugins._fail(name, package, version, _with_location(error, exc))
                continue
            plugins.register(module, name=name, package=package, version=version)
        return plugins

    def register(self, plugin: object, *, name: str, package: str, version: str | None = None) -> None:
        """Register ``plugin`` (a module or object with ``@hookimpl`` functions); invalid hooks leave it out."""
        try:
            self._manager.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            self._fail(name, package, version, _invalid_hooks_error(plugin, str(exc)))
            return
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # listing its attributes ran its code (an object plugin's __dir__)
            if self._manager.get_plugin(name) is not None:
                self._manager.unregister(name=name)
            roots = _source_roots(type(plugin).__module__ if not isinstance(plugin, ModuleType) else plugin.__name__)
            error = load_error_from_exception(PLUGIN_INVALID_HOOKS, exc, roots, "reading its hooks")
            self._fail(name, package, version, _with_location(error, exc))
            return
        unknown = [caller.name for caller in self._manager.get_hookcallers(plugin) or [] if not caller.has_spec()]
        if unknown:
            self._manager.unregister(name=name)
            self._fail(name, package, version, _unknown_hooks_error(plugin, unknown))
            return
        implemented = tuple(
            sorted(caller.name.removeprefix("berth_") for caller in self._manager.get_hookcallers(plugin) or [])
        )
        self._records[name] = PluginRecord(name, package, version, hooks=implemented)

    def unregister(self, name: str) -> None:
        """Remove the plugin registered as ``name``."""
        if self._manager.get_plugin(name) is not None:
            self._manager.unregister(name=name)
        self._records.pop(name, None)

    def call_every_hook(self) -> list[PluginConflictError]:
        """Collect what every loaded plugin contributes, through every accessor, as a host would.

        A plugin whose hook raises is recorded as failed (and left out), so :attr:`records` then says which
        plugins a host would run. Returns the conflicts found (two plugins registering one name), which a host
        refuses to start with, instead of raising the first.
        """
        conflicts = []
        for accessor in (
            self.secret_providers,
            self.storage_backends,
            self.knowledge_stores,
            self.artifact_stores,
            self.storage_migrators,
            self.model_providers,
            self.exec_backends,
            self.tool_packs,
            self.embedders,
        ):
            try:
                accessor()
            except PluginConflictError as conflict:
                conflicts.append(conflict)
        return conflicts

    @property
    def records(self) -> list[PluginRecord]:
        """Every plugin found (loaded, failed or disabled), by name."""
        return sorted(self._records.values(), key=lambda record: record.name)

    def secret_providers(self) -> dict[str, SecretProviderFactory]:
        """Every plugin secret provider, by prefix."""
        merged = self._collect("berth_secret_providers", reserved=BUILTIN_PROVIDER_NAMES)
        return cast(dict[str, SecretProviderFactory], merged)

    def storage_backends(self) -> dict[str, Callable[..., Any]]:
        """Every storage backend factory, by kind."""
        return self._collect("berth_storage_backends")

    def knowledge_stores(self) -> dict[str, Callable[..., Any]]:
        """Every knowledge-store factory, by storage kind."""
        return self._collect("berth_knowledge_stores")

    def artifact_stores(self) -> dict[str, Callable[..., Any]]:
        """Every artifact store factory, by ``platform.storage.artifacts`` kind."""
        return self._collect("berth_artifact_stores")

    def storage_migrators(self) -> dict[str, Callable[..., Any]]:
        """Every storage migrator (``berth migrate``), by storage kind."""
        return self._collect("berth_storage_migrations")

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
        """Merge one mapping-returning hook across plugins, refusing duplicate names.

        A plugin whose hook raises is reported and left out (its other contributions too, from then on).
        """
        caller = getattr(self._manager.hook, hook_name)
        merged: dict[str, Any] = {}
        owners: dict[str, str] = {}
        reserved_names = set(reserved)
        for impl in caller.get_hookimpls():  # in registration order
            package = self._package_of(impl.plugin_name)
            try:
                contributed: Mapping[str, Any] = impl.function() or {}
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # a plugin's hook may raise anything (sys.exit too); reported, never fatal
                self._fail_loaded(impl.plugin_name, impl.function, exc)
                continue
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

    def _fail(self, name: str, package: str, version: str | None, error: LoadError) -> None:
        self._records[name] = PluginRecord(name, package, version, state="failed", error=error)
        key = (name, str(error))
        if key not in _reported:
            _reported.add(key)
            release = f" {version}" if version else ""
            logger.warning("platform plugin '%s' (%s%s) is left out: %s", name, package, release, error)

    def _fail_loaded(self, name: str, function: Callable[..., Any], exc: BaseException) -> None:
        record = self._records.get(name)
        package, version = (record.package, record.version) if record else (name, None)
        error = load_error_from_exception(PLUGIN_HOOK_FAILED, exc, _function_roots(function), function.__name__)
        self.unregister(name)
        self._fail(name, package, version, _with_location(error, exc))


_distributions: dict[str, tuple[str, str | None]] = {}
"""Name and version by distribution folder: each read of them parses the distribution's metadata file, and
every plugin's entry point would read them again (a new version installs into a folder of another name)."""


def _distribution_of(point: EntryPoint) -> tuple[str, str | None]:
    dist = point.dist
    if dist is None:
        return "unknown", None
    folder = str(getattr(dist, "_path", "")) or None
    known = _distributions.get(folder) if folder else None
    if known is None:
        known = (dist.name, dist.version)
        if folder:
            _distributions[folder] = known
    return known


def _source_roots(module_name: str) -> list[Path]:
    """The folder of the plugin's top-level package (or its module's file), to find the failing frame in."""
    try:
        spec = importlib.util.find_spec(module_name.partition(".")[0])
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(location) for location in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin else []


def _function_roots(function: Callable[..., Any]) -> list[Path]:
    module = getattr(function, "__module__", None)
    return _source_roots(module) if module else []


def _with_location(error: LoadError, exc: BaseException) -> LoadError:
    """Point at the frame that raised when no frame lies inside the plugin's own files."""
    if error.file is not None or exc.__traceback__ is None:
        return error
    frames = [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(exc.__traceback__)]
    located = [(file, line) for file, line in frames if not file.startswith("<")]
    if not located:
        return error
    file, line = located[-1]
    return LoadError(error.code, error.message, file, line, error.traceback)


_HOOK_IN_MESSAGE = re.compile(r"for hook '(?P<hook>\w+)'")


def _invalid_hooks_error(plugin: object, message: str) -> LoadError:
    """pluggy's validation message, pointing at the offending hook function."""
    match = _HOOK_IN_MESSAGE.search(message)
    function = getattr(plugin, match["hook"], None) if match else None
    file, line = _code_location(function)
    text = " ".join(message.split())
    return LoadError(PLUGIN_INVALID_HOOKS, f"PluginValidationError: {text}", file, line)


def _unknown_hooks_error(plugin: object, unknown: list[str]) -> LoadError:
    known = sorted(name for name in dir(hooks) if name.startswith("berth_"))
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    file, line = _code_location(getattr(plugin, unknown[0], None))
    return LoadError(PLUGIN_INVALID_HOOKS, f"unknown hook(s): {', '.join(parts)}", file, line)


def _code_location(function: object) -> tuple[str | None, int | None]:
    code = getattr(function, "__code__", None)
    if code is None:
        return None, None
    return code.co_filename, code.co_firstlineno
