"""Whether a host process is ready to serve: what ``/readyz`` of an API process and of a worker's health port
report."""

from __future__ import annotations

from typing import Any

from berth.api.services import HostServices
from berth.distributed.probes import probe_backend

__all__ = ["readiness", "refresh_queue_depth"]


async def readiness(host: HostServices) -> tuple[bool, dict[str, Any]]:
    """Storage open, bus running and at least one bundle loaded; in distributed mode, PostgreSQL, Redis and the
    artifact store answering (``checks.services`` says which does not). Returns (ready, checks)."""
    checks: dict[str, Any] = {"storage": host.started and host.store is not None, "bus": host.runtime.bus is not None}
    loaded = [s.id for s in host.registry.statuses() if s.state == "loaded"] if host.runtime.registry else []
    checks["bundles"] = loaded
    ready = bool(checks["storage"] and checks["bus"] and loaded)
    if host.distributed is not None and host.storage is not None:  # the services every process shares
        probes = await probe_backend(host.storage, host.distributed.redis)
        checks["services"] = {probe.service: {"ok": probe.ok, "detail": probe.detail} for probe in probes}
        ready = ready and all(probe.ok for probe in probes)
    return ready, checks


async def refresh_queue_depth(host: HostServices) -> None:
    """Set ``berth_turn_queue_depth`` from the shared turn queue (distributed mode; a no-op otherwise)."""
    if host.distributed is not None:
        host.metrics.turn_queue_depth.set(await host.distributed.queue.depth())
