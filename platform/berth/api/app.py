"""``create_app``: the FastAPI application of a Berth host (SPEC §9), and ``build_services``, what it stands on.

:func:`build_services` is what ``berth worker`` needs too, and a worker serves no API: FastAPI, the routes and the
middleware live in :mod:`berth.api.application`, which :func:`create_app` imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from berth.api.services import HostServices
from berth.config import Configuration, find_descriptors_dir
from berth.host.plugins import PlatformPlugins
from berth.host.runtime import HostRuntime

if TYPE_CHECKING:
    from fastapi import FastAPI

STATIC = Path(__file__).resolve().parent / "static"


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


def create_app(
    descriptors: Path | None = None,
    *,
    services: HostServices | None = None,
    govern_heap: bool = False,
    **options: Any,
) -> FastAPI:
    """The API app; ``services`` default to :func:`build_services` over ``descriptors``.

    :param govern_heap: keep the garbage collector's full passes short while serving
        (:class:`~berth.api.heap.HeapGovernor`: the startup heap and what survives full collections are
        frozen, everything is swept once an hour); a server process does this, a test's app not.
        Measured on ``bench/api_load.py --turns 12``: full-collection pauses of 60 to 190 ms every few seconds
        became rare sweeps, and the long run's added p99 first delta went from 76-126 ms to 4.5 ms.
    """
    from berth.api.application import build_app  # FastAPI and the routes: see berth.api.application

    return build_app(services or build_services(descriptors, **options), govern_heap=govern_heap)
