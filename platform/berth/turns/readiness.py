"""What ``/readyz`` and ``/metrics`` of an API process and of a worker's health port report: whether the process is
ready to serve, and its metrics. The HTTP routes (the API's, the worker health port's) answer what these return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from berth.tools.threads import ToolThreadsStatus
from berth.turns.callers import authenticate, require_admin
from berth.turns.errors import ServiceError
from berth.turns.probes import probe_backend, probe_embedded_storage

if TYPE_CHECKING:
    from berth.turns.services import HostServices

__all__ = ["METRICS_MEDIA_TYPE", "metrics_exposition", "readiness"]

METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition's content type."""


async def readiness(host: HostServices) -> tuple[bool, dict[str, Any]]:
    """Storage answering, bus running, no background task down and at least one bundle loaded; in distributed mode,
    PostgreSQL, Redis and the artifact store answering (``checks.services`` says which does not). Returns (ready,
    checks).

    Embedded storage is asked for a real round-trip (``checks.storage_probe``: a write and a read back through the
    store's own threads, within ``platform.readiness.storage_timeout_s``); an open store that does not answer is
    not ready.

    ``checks.background`` has one entry per supervised task of the process (the reload bus, the worker report,
    the watchers, ...): ``ok`` is false for a task that has been failing longer than its grace period or gave up,
    with its state, failure count, how long it has been failing and its last error.

    ``checks.tool_threads`` has one entry per loaded bundle: ``degraded`` when its sync tool threads are stuck for
    some tenant (how many tenants, never which: ``/readyz`` needs no key), with the stuck and busy threads. A
    degraded bundle leaves the process ready: it serves the other bundles and tenants at full speed."""
    checks: dict[str, Any] = {"storage": host.started and host.store is not None, "bus": host.runtime.bus is not None}
    if checks["storage"] and host.distributed is None:  # distributed mode: checks.services.postgres below
        settings = host.config.settings_for().readiness
        probe = await probe_embedded_storage([host.storage, host.meta], settings.storage_timeout_s)
        checks["storage_probe"] = {"ok": probe.ok, "detail": probe.detail}
        checks["storage"] = probe.ok
    loaded = host.registry.loaded_bundle_ids() if host.runtime.registry else []
    checks["bundles"] = loaded
    if host.runtime.registry is not None:
        checks["tool_threads"] = tool_thread_health(host.registry.tool_threads.statuses(), loaded)
    background = host.runtime.background.health()
    checks["background"] = {task.name: task.to_json() for task in background}
    ready = bool(checks["storage"] and checks["bus"] and loaded) and not any(task.down for task in background)
    if host.distributed is not None and host.storage is not None:  # the services every process shares
        probes = await probe_backend(host.storage, host.distributed.redis)
        checks["services"] = {probe.service: {"ok": probe.ok, "detail": probe.detail} for probe in probes}
        ready = ready and all(probe.ok for probe in probes)
    return ready, checks


def tool_thread_health(statuses: Sequence[ToolThreadsStatus], bundle_ids: Sequence[str]) -> dict[str, Any]:
    """Per bundle: ``degraded`` when its tool threads are stuck for a tenant, with counts and no tenant names."""
    health: dict[str, Any] = {}
    for bundle_id in bundle_ids:
        pools = [status for status in statuses if status.bundle_id == bundle_id]
        degraded = sum(1 for status in pools if status.degraded)
        health[bundle_id] = {
            "state": "degraded" if degraded else "ok",
            "degraded_tenants": degraded,
            "stuck": sum(status.stuck for status in pools),
            "busy": sum(status.busy for status in pools),
        }
    return health


async def metrics_exposition(headers: Mapping[str, str], host: HostServices) -> bytes:
    """The Prometheus text of ``host``'s metrics for a request with ``headers`` (``berth_turn_queue_depth`` read from
    the shared queue in distributed mode, the ``berth_tool_threads_*`` series from the bundles' tool threads). It
    names every tenant, so by default only an admin key reads it (``platform.metrics.access``): a global admin key
    every series, a tenant's admin key only the series of its tenant (labelled ``tenant``). Metrics are counted per
    tenant, not per project, so an admin key limited to some projects is refused. Raises
    :class:`~berth.turns.errors.ServiceError` 401/403 otherwise."""
    tenant = None
    if host.config.descriptors.assembly.platform.metrics.access != "open":
        caller = authenticate(headers, host.config.descriptors)
        require_admin(caller)
        if caller.projects is not None:
            raise ServiceError(
                403,
                "forbidden",
                "metrics are counted per tenant, not per project: this admin key covers only some projects",
            )
        tenant = None if caller.is_global else caller.tenant
    if host.distributed is not None:
        host.metrics.turn_queue_depth.set(await host.distributed.queue.depth())
    if host.runtime.registry is not None:
        host.metrics.observe_tool_threads(host.registry.tool_threads.statuses())
    resident = host.resident
    host.metrics.observe_resident(len(resident), resident.bytes, resident.budget_bytes, resident.dropped)
    return host.metrics.render(tenant)
