"""Configuration: descriptors, effective settings, bundle props and secrets (SPEC §2).

This package is the only place Berth reads the process environment. Code asks it for typed values:

>>> config = Configuration.load(None)          # embedded defaults, no files needed
>>> config.settings_for("default", "default").react.max_iterations
15
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from berth.config.configuration import Configuration, find_descriptors_dir
    from berth.config.descriptors import DescriptorSet
    from berth.config.errors import ConfigError, DescriptorError, DescriptorProblem
    from berth.config.secrets import Secret, SecretScope
    from berth.config.settings import PlatformSettings

_EXPORTS: dict[str, str] = {
    "Configuration": "berth.config.configuration",
    "DEFAULT_DESCRIPTORS_DIR": "berth.config.configuration",
    "PropsModel": "berth.config.configuration",
    "find_descriptors_dir": "berth.config.configuration",
    "DescriptorSet": "berth.config.descriptors",
    "ConfigError": "berth.config.errors",
    "DescriptorError": "berth.config.errors",
    "DescriptorProblem": "berth.config.errors",
    "Secret": "berth.config.secrets",
    "SecretScope": "berth.config.secrets",
    "PlatformSettings": "berth.config.settings",
}
"""Each name the package offers and the module it comes from: imported on first use (PEP 562), so importing one
light module of the package (``berth.config.errors``, ``berth.config.environment``) does not load the descriptor
models."""


def __getattr__(name: str) -> Any:
    """Import an offered name on first use and keep it in the package."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "Configuration",
    "DescriptorError",
    "DescriptorProblem",
    "DescriptorSet",
    "PlatformSettings",
    "Secret",
    "SecretScope",
    "find_descriptors_dir",
]
