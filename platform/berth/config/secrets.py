"""Secrets: where values come from, how they are resolved (lazily, once per process), who may read them.

A secret source (a value in ``secrets.yaml`` or ``bundles.secrets.yaml``) is one of:

* ``env:NAME`` — the environment variable ``NAME``;
* ``file:PATH`` — the file's content without its trailing newline (relative to the descriptors folder);
* ``<provider>:<ref>`` — a secret-provider plugin (``aws-sm:prod/db#password``);
* ``literal:VALUE`` — ``VALUE`` itself, even if it contains a colon;
* ``withheld:`` — a secret kept back from a supervisor away from the host: reading it is an error;
* anything else — the literal value (``redis://127.0.0.1:6379/0`` is a literal: a ``scheme://`` is
  never taken for a provider).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

from berth.config.errors import ConfigError
from berth.config.models.common import SecretSetting, is_valid_secret_name
from berth.config.models.secrets import BundlesSecretsDescriptor
from berth.config.redaction import MASK, register_secret_value

_PROVIDER_PREFIX = re.compile(r"^([a-z][a-z0-9-]{0,31}):(?!//)(.*)$", re.DOTALL)
BUNDLE_SECRET_PREFIX = "b:"


class Secret:
    """A resolved secret value that never shows itself by accident.

    ``str()``, ``repr()``, ``format()`` and serialization give ``***``; pickling is refused. Call
    :meth:`reveal` at the one place that needs the value (an HTTP header, a connection string).
    """

    __slots__ = ("_value", "name")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self._value = value
        register_secret_value(value)

    def reveal(self) -> str:
        """The secret value itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r}, {MASK})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, format_spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self.name))

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled; pass its name and resolve it where it is needed")


class SecretProvider(Protocol):
    """A source of secret values (built-in ``env``/``file``, or a plugin such as ``aws-sm``)."""

    def resolve(self, ref: str) -> str:
        """Return the value for ``ref``; raise :class:`ConfigError` naming ``ref`` (never a value)."""
        ...


SecretProviderFactory = Callable[[Mapping[str, Any]], SecretProvider]
"""Builds a provider from its options (``platform.secret_providers.<name>`` in ``assembly.yaml``)."""


class EnvSecretProvider:
    """``env:NAME``: the value of an environment variable."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def resolve(self, ref: str) -> str:
        """Read the environment variable ``ref``."""
        value = self._environ.get(ref)
        if value is None or value == "":
            raise ConfigError("secret_missing", f"environment variable {ref} is not set")
        return value


class FileSecretProvider:
    """``file:PATH``: a file's content (trailing newline removed); relative to ``base_dir``."""

    def __init__(self, base_dir: Path) -> None:
        self._base_dir = base_dir

    def resolve(self, ref: str) -> str:
        """Read the file ``ref``."""
        path = Path(ref) if Path(ref).is_absolute() else self._base_dir / ref
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError("secret_missing", f"secret file {path} cannot be read: {exc.strerror}") from None


class LiteralSecretProvider:
    """``literal:VALUE``: the value itself."""

    def resolve(self, ref: str) -> str:
        """Return ``ref``."""
        return ref


class WithheldSecretProvider:
    """``withheld:``: a secret the host kept back from a supervisor away from it (its bundle did not declare it in
    ``bundles.yaml``; :mod:`berth.execution.payload`). The name stays, so references to it still validate."""

    def resolve(self, ref: str) -> str:
        """Refuse: the value never left the host."""
        raise ConfigError(
            "secret_withheld",
            "withheld from this run's supervisor: list it under the bundle's 'secrets' in bundles.yaml",
        )


BUILTIN_PROVIDER_NAMES = ("env", "file", "literal", "withheld")


@dataclass(frozen=True)
class SecretSource:
    """A parsed secret source: a provider name and its reference, or a literal (``provider`` None)."""

    provider: str | None
    ref: str

    @property
    def display(self) -> str:
        """Safe to show: ``env:NAME`` / ``file:PATH`` / ``aws-sm:REF``; literals as ``***``."""
        if self.provider is None or self.provider == "literal":
            return MASK
        return f"{self.provider}:{self.ref}"


def parse_secret_source(source: str, known_providers: Iterable[str]) -> SecretSource:
    """Split a secret source into provider and reference.

    Raises :class:`ConfigError` (``secret_provider_unknown``) when it looks like ``name:ref`` but
    ``name`` is no known provider, since a typo'd provider must not silently become a literal.
    """
    match = _PROVIDER_PREFIX.match(source)
    if match is None:
        return SecretSource(None, source)
    provider, ref = match.group(1), match.group(2)
    known = set(known_providers) | set(BUILTIN_PROVIDER_NAMES)
    if provider in known:
        return SecretSource(provider, ref)
    if not ref or ref[0].isdigit():  # host:port and the like are literals
        return SecretSource(None, source)
    raise ConfigError(
        "secret_provider_unknown",
        f"unknown secret provider '{provider}' (known: {', '.join(sorted(known))}); "
        f"write 'literal:...' for a literal value containing ':'",
    )


class SecretResolver:
    """Resolves secrets lazily and caches each value for the life of the process.

    ``platform_sources`` is ``secrets.yaml``; ``bundle_sources`` is ``bundles.secrets.yaml``;
    ``providers`` maps plugin provider names to factories, built on first use with their options.
    """

    def __init__(
        self,
        platform_sources: Mapping[str, str],
        bundle_sources: BundlesSecretsDescriptor,
        *,
        base_dir: Path,
        providers: Mapping[str, SecretProviderFactory] | None = None,
        provider_options: Mapping[str, Mapping[str, Any]] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._platform_sources = dict(platform_sources)
        self._bundle_sources = bundle_sources
        self._factories = dict(providers or {})
        self._options = dict(provider_options or {})
        self._instances: dict[str, SecretProvider] = {
            "env": EnvSecretProvider(environ),
            "file": FileSecretProvider(base_dir),
            "literal": LiteralSecretProvider(),
            "withheld": WithheldSecretProvider(),
        }
        self._cache: dict[SecretSource, str] = {}
        self._lock = threading.Lock()

    @property
    def provider_names(self) -> list[str]:
        """Every provider a source may name."""
        return sorted(set(BUILTIN_PROVIDER_NAMES) | set(self._factories))

    def platform_secret(self, name: str) -> Secret:
        """Resolve the platform secret ``name`` from ``secrets.yaml``."""
        source = self._platform_sources.get(name)
        if source is None:
            raise ConfigError("secret_unknown", f"secret '{name}' is not declared in secrets.yaml")
        return Secret(name, self._resolve(name, source))

    def bundle_secret(self, bundle_id: str, name: str, tenant: str | None, project: str | None) -> Secret:
        """Resolve bundle ``bundle_id``'s own secret ``name``: project, then tenant, then bundle-wide."""
        for scope in _scope_keys(tenant, project):
            source = self._bundle_sources.tenants.get(scope, {}).get(bundle_id, {}).get(name)
            if source is not None:
                return Secret(f"b:{name}", self._resolve(f"b:{name}", source))
        source = self._bundle_sources.bundles.get(bundle_id, {}).get(name)
        if source is None:
            raise ConfigError(
                "secret_unknown",
                f"bundle secret 'b:{name}' of bundle '{bundle_id}' is not declared in bundles.secrets.yaml",
            )
        return Secret(f"b:{name}", self._resolve(f"b:{name}", source))

    def resolve_setting(self, setting: SecretSetting, label: str = "setting") -> Secret:
        """Resolve a :class:`SecretSetting`: a ``secret:NAME`` reference or its literal value."""
        if setting.ref_name is not None:
            return self.platform_secret(setting.ref_name)
        return Secret(label, setting.literal_value())

    def scope(self, tenant: str | None, project: str | None, bundle_id: str | None) -> SecretScope:
        """A reader bound to one tenant/project and (optionally) one bundle's ``b:`` secrets."""
        return SecretScope(self, tenant, project, bundle_id)

    def _resolve(self, label: str, source: str) -> str:
        parsed = parse_secret_source(source, self._factories)
        if parsed.provider is None:
            return parsed.ref
        with self._lock:
            cached = self._cache.get(parsed)
            if cached is not None:
                return cached
            provider = self._provider(parsed.provider)
            try:
                value = provider.resolve(parsed.ref)
            except ConfigError as exc:
                raise ConfigError(exc.code, f"secret '{label}' ({parsed.display}): {exc}") from None
            self._cache[parsed] = value
            return value

    def _provider(self, name: str) -> SecretProvider:
        instance = self._instances.get(name)
        if instance is None:
            factory = self._factories.get(name)
            if factory is None:
                raise ConfigError("secret_provider_unknown", f"no secret provider named '{name}'")
            instance = factory(self._options.get(name, {}))
            self._instances[name] = instance
        return instance


class SecretScope:
    """``ctx.secret(...)`` for one tenant/project/bundle.

    ``secret("name")`` reads a platform secret; ``secret("b:name")`` reads the bound bundle's own
    secret (tenant/project override first). There is no syntax to name another bundle's secrets.
    """

    def __init__(
        self, resolver: SecretResolver, tenant: str | None, project: str | None, bundle_id: str | None
    ) -> None:
        self._resolver = resolver
        self._tenant = tenant
        self._project = project
        self._bundle_id = bundle_id

    def __call__(self, name: str) -> Secret:
        """Resolve ``name`` (``"name"`` or ``"b:name"``)."""
        if name.startswith(BUNDLE_SECRET_PREFIX):
            own = name[len(BUNDLE_SECRET_PREFIX) :]
            if self._bundle_id is None:
                raise ConfigError("secret_forbidden", f"'{name}' can only be read by a bundle")
            if not is_valid_secret_name(own):
                raise ConfigError(
                    "secret_forbidden",
                    f"'{name}' is not a secret name; a bundle reads only its own b: secrets",
                )
            return self._resolver.bundle_secret(self._bundle_id, own, self._tenant, self._project)
        return self._resolver.platform_secret(name)


def _scope_keys(tenant: str | None, project: str | None) -> list[str]:
    keys = []
    if tenant is not None and project is not None:
        keys.append(f"{tenant}/{project}")
    if tenant is not None:
        keys.append(tenant)
    return keys
