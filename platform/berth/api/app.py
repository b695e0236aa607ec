"""``create_app``: the FastAPI application of a Berth host (SPEC §9) over the host services it stands on
(:func:`berth.turns.build.build_services`).

FastAPI, the routes and the middleware live in :mod:`berth.api.application`, which :func:`create_app` imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from berth.turns.build import build_services

if TYPE_CHECKING:
    from fastapi import FastAPI

    from berth.turns.services import HostServices


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
