"""``build_services``: the host services of one process (API server, worker or ``berth chat``) over a descriptors
folder with the installed plugins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from berth.config import Configuration, find_descriptors_dir
from berth.host.plugins import PlatformPlugins
from berth.host.runtime import HostRuntime
from berth.turns.services import HostServices

__all__ = ["build_services"]


def build_services(
    descriptors: Path | None = None,
    *,
    var_root: Path | None = None,
    watch: bool = False,
    platform_overrides: dict[str, Any] | None = None,
    worker_id: str | None = None,
    plugins: PlatformPlugins | None = None,
) -> HostServices:
    """Host services over a descriptors folder (default location when None) with the installed plugins.

    :param worker_id: this process's name in reload reports (default: host-pid).
    :param plugins: the platform plugins when the caller discovered them already (``berth run --demo`` builds the
        services twice: the second time with overrides read from the first's configuration).
    """
    plugins = plugins or PlatformPlugins.discover()
    root = find_descriptors_dir(descriptors)

    def load() -> Configuration:
        return Configuration.load(
            root, secret_providers=plugins.secret_providers(), platform_overrides=platform_overrides
        )

    runtime = HostRuntime(load, plugins, watch=watch, worker_id=worker_id, var_root=var_root)
    services = HostServices(runtime, plugins, var_root=var_root)
    services.initial_config = load()  # descriptor errors surface before the server starts
    return services
