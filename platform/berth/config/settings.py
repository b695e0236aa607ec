"""Effective platform settings for a tenant/project, resolved by precedence (SPEC §2.1).

Lowest to highest: built-in default < ``assembly.yaml`` ``platform`` < ``tenants.<t>`` <
``tenants.<t>.projects.<p>`` < environment variable ``BERTH_PLATFORM__<SECTION>__<FIELD>``
(``__`` nests; e.g. ``BERTH_PLATFORM__REACT__MAX_ITERATIONS=30``). Mappings merge key by key; lists
and scalars are replaced. Resolution is built on pydantic-settings: the merged descriptor layers
are the init source and the environment source ranks above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from berth.config.environment import PLATFORM_ENV_PREFIX, platform_override_variables
from berth.config.errors import ConfigError, DescriptorError, DescriptorProblem
from berth.config.layers import Layer, problems_in_layers
from berth.config.merge import deep_merge
from berth.config.models.assembly import OVERRIDABLE_SECTIONS, PlatformConfig
from berth.config.yamlsource import LineMap, YamlDocument

ENVIRONMENT_FILE = "environment"
COMMAND_LINE_FILE = "command line"


class PlatformSettings(BaseSettings, PlatformConfig):
    """The effective ``platform`` settings of one scope (immutable)."""

    model_config = SettingsConfigDict(
        env_prefix=PLATFORM_ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment variables rank above the merged descriptor layers; no dotenv, no secrets dir."""
        return (env_settings, init_settings)


def scope_layers(assembly: YamlDocument, tenant: str | None = None, project: str | None = None) -> list[Layer]:
    """The descriptor layers of a scope, lowest first: platform, tenant, project."""
    data = assembly.data if isinstance(assembly.data, dict) else {}
    layers = [Layer(assembly.file, ("platform",), data.get("platform") or {}, assembly.lines)]
    if tenant is not None:
        tenant_data = (data.get("tenants") or {}).get(tenant) or {}
        layers.append(Layer(assembly.file, ("tenants", tenant), _sections(tenant_data), assembly.lines))
        if project is not None:
            project_data = (tenant_data.get("projects") or {}).get(project) or {}
            layers.append(
                Layer(
                    assembly.file,
                    ("tenants", tenant, "projects", project),
                    _sections(project_data),
                    assembly.lines,
                )
            )
    return layers


def resolve_platform_settings(
    assembly: YamlDocument,
    tenant: str | None = None,
    project: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> PlatformSettings:
    """Resolve the effective settings of ``tenant``/``project`` (``None`` = platform level).

    ``overrides`` (from the command line, e.g. ``berth run --demo``) rank above the project and
    below the environment.

    Raises :class:`DescriptorError` whose problems name the layer (file and line, or environment
    variable) that set each invalid value.
    """
    layers = scope_layers(assembly, tenant, project)
    if overrides:
        layers.append(Layer(COMMAND_LINE_FILE, (), overrides))
    merged = deep_merge(*(layer.data for layer in layers))
    try:
        return PlatformSettings(**merged)
    except ValidationError as exc:
        environment = Layer(ENVIRONMENT_FILE, (), _environment_tree(), LineMap(), env_prefix=PLATFORM_ENV_PREFIX)
        problems = problems_in_layers(exc, PlatformSettings, [*layers, environment])
        raise DescriptorError(problems) from None


def unknown_override_variables() -> list[DescriptorProblem]:
    """``BERTH_PLATFORM__…`` variables whose first section is not a platform setting (typos)."""
    sections = set(PlatformSettings.model_fields)
    problems = []
    for name in sorted(platform_override_variables()):
        section = name[len(PLATFORM_ENV_PREFIX) :].split("__", 1)[0].lower()
        if section not in sections:
            problems.append(
                DescriptorProblem(
                    ENVIRONMENT_FILE,
                    None,
                    name,
                    f"unknown platform section '{section}' (known: {', '.join(sorted(sections))})",
                )
            )
    return problems


def require_scope(declared: dict[str, Any], tenant: str, project: str | None) -> None:
    """Raise ``ConfigError(unknown_scope)`` unless ``tenant``/``project`` is declared in ``assembly.yaml``."""
    tenant_config = declared.get(tenant)
    if tenant_config is None:
        raise ConfigError(
            "unknown_scope",
            f"tenant '{tenant}' is not declared in assembly.yaml (known: {', '.join(sorted(declared))})",
        )
    if project is not None and project not in tenant_config.projects:
        raise ConfigError("unknown_scope", f"project '{tenant}/{project}' is not declared in assembly.yaml")


def _sections(scope_data: Any) -> dict[str, Any]:
    if not isinstance(scope_data, dict):
        return {}
    return {key: scope_data[key] for key in OVERRIDABLE_SECTIONS if scope_data.get(key) is not None}


def _environment_tree() -> dict[str, Any]:
    """The override variables as a nested mapping (lower-cased path), to attribute errors to them."""
    tree: dict[str, Any] = {}
    for name in platform_override_variables():
        parts = name[len(PLATFORM_ENV_PREFIX) :].lower().split("__")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = True
    return tree
