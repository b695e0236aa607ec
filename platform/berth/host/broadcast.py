"""Reload broadcast across host processes, and each process's report of its generations.

In embedded mode a reload stays in the process. In distributed mode a reload request is published on
Redis pub/sub (channel :data:`RELOAD_CHANNEL`) and every host process, the sender included, performs
the same transaction and acknowledges it when the request carries an id (:mod:`berth.host.reload_acks`); each
process keeps a report of its bundles' generations under ``berth:workers:<worker id>`` (refreshed after every
reload, by a heartbeat and whenever its subscriber (re)connects, expiring when the process is gone).

Both loops end on a connection error: the host runs them as supervised tasks (:mod:`berth.host.supervised`),
which start them again with backoff, so a Redis restart costs a few seconds of reloads, never the process's bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis

from berth.host.registry import BundleRegistry
from berth.host.reload_acks import RELOAD_CHANNEL, ReloadAck, ReloadRequest, acknowledge

log = logging.getLogger(__name__)

__all__ = [
    "HEARTBEAT_S",
    "RELOAD_CHANNEL",
    "REPORT_TTL_S",
    "WORKER_KEY_PREFIX",
    "BundleReport",
    "LocalReloadBus",
    "RedisReloadBus",
    "RedisWorkerReporter",
    "ReloadBus",
    "ReloadHandler",
    "WorkerReport",
    "read_worker_reports",
    "report_of",
]

WORKER_KEY_PREFIX = "berth:workers:"
REPORT_TTL_S = 30
HEARTBEAT_S = 10

ReloadHandler = Callable[[str], Awaitable[ReloadAck]]
"""Reloads a bundle in this process and says what it did."""


class ReloadBus(Protocol):
    """Delivers reload requests to every host process."""

    async def publish(self, bundle_id: str) -> None:
        """Ask every process to reload ``bundle_id``."""
        ...

    async def run(self, handler: ReloadHandler) -> None:
        """Call ``handler(bundle_id)`` for every request until :meth:`close`."""
        ...

    async def close(self) -> None:
        """Stop delivering and release connections."""
        ...


class LocalReloadBus:
    """The embedded bus: requests go straight to this process's handler."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def publish(self, bundle_id: str) -> None:
        """Queue a reload of ``bundle_id`` for this process."""
        await self._queue.put(bundle_id)

    async def run(self, handler: ReloadHandler) -> None:
        """Handle queued requests until closed (a failed reload is logged; the next request is handled)."""
        while (bundle_id := await self._queue.get()) is not None:
            try:
                await handler(bundle_id)
            except Exception:
                log.exception("reload of %s failed", bundle_id)

    async def close(self) -> None:
        """Stop :meth:`run`."""
        await self._queue.put(None)


class RedisReloadBus:
    """Reload requests over Redis pub/sub; every subscribed process receives every request.

    :param on_subscribed: awaited each time Redis confirms the subscription: when :meth:`run` subscribes, and
        when the client has reconnected and subscribed again by itself after a connection dropped (the host
        writes its report again: a Redis that restarted empty knows no process until then).
    """

    def __init__(
        self, client: aioredis.Redis, origin: str, *, on_subscribed: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        self._client = client
        self._origin = origin
        self._on_subscribed = on_subscribed
        self._closed = asyncio.Event()

    async def publish(self, bundle_id: str) -> None:
        """Publish a reload request (nobody waits for acknowledgements: see
        :func:`~berth.host.reload_acks.broadcast_reload` for a request that does)."""
        await self._client.publish(RELOAD_CHANNEL, ReloadRequest(bundle_id, self._origin).to_json())

    async def run(self, handler: ReloadHandler) -> None:
        """Subscribe and handle requests one at a time, in arrival order, until :meth:`close`; acknowledge each
        request that carries an id. Raises when the connection fails (its supervisor subscribes again)."""
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(RELOAD_CHANNEL)
            while not self._closed.is_set():
                message = await pubsub.get_message(timeout=0.5)
                if message is not None:
                    await self._receive(message, handler)
        finally:
            with contextlib.suppress(Exception):  # the connection may be what failed
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _receive(self, message: dict[str, Any], handler: ReloadHandler) -> None:
        """Handle one pub/sub message: a subscription confirmed, or a reload request."""
        if message["type"] == "subscribe":  # subscribed, or subscribed again after the client reconnected by itself
            if self._on_subscribed is not None:
                await self._on_subscribed()
            return
        if message["type"] != "message":
            return
        try:
            request = ReloadRequest.parse(message["data"])
        except ValueError:
            log.warning("ignoring a malformed reload request on %s", RELOAD_CHANNEL)
            return
        ack = await self._handle(handler, request)
        if request.request_id is not None:
            await acknowledge(self._client, request.request_id, ack)

    async def _handle(self, handler: ReloadHandler, request: ReloadRequest) -> ReloadAck:
        """Run the handler; a failure of it (a bundle this process does not know) is acknowledged, not raised."""
        try:
            return await handler(request.bundle_id)
        except Exception as exc:
            log.exception("reload of %s requested by %s failed", request.bundle_id, request.origin)
            return ReloadAck(self._origin, request.bundle_id, False, None, "error", f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        """Stop :meth:`run` (within half a second)."""
        self._closed.set()


@dataclass(frozen=True)
class BundleReport:
    """One bundle as one process serves it."""

    generation: int | None
    version: str | None
    state: str
    error: str | None


@dataclass(frozen=True)
class WorkerReport:
    """What one host process serves, as last reported."""

    worker_id: str
    reported_at: float
    bundles: dict[str, BundleReport]

    def to_json(self) -> str:
        """Serialize for Redis."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerReport:
        """Parse what :meth:`to_json` wrote."""
        data: dict[str, Any] = json.loads(text)
        return cls(
            worker_id=data["worker_id"],
            reported_at=data["reported_at"],
            bundles={name: BundleReport(**row) for name, row in data["bundles"].items()},
        )


def report_of(worker_id: str, registry: BundleRegistry) -> WorkerReport:
    """The current report of this process."""
    return WorkerReport(
        worker_id=worker_id,
        reported_at=time.time(),
        bundles={
            status.id: BundleReport(
                status.generation, status.version, status.state, str(status.error) if status.error else None
            )
            for status in registry.statuses()
        },
    )


class RedisWorkerReporter:
    """Keeps this process's :class:`WorkerReport` in Redis."""

    def __init__(self, client: aioredis.Redis, worker_id: str, registry: BundleRegistry) -> None:
        self._client = client
        self._worker_id = worker_id
        self._registry = registry
        self._closed = asyncio.Event()

    async def publish(self) -> None:
        """Write the report now."""
        report = report_of(self._worker_id, self._registry)
        await self._client.set(WORKER_KEY_PREFIX + self._worker_id, report.to_json(), ex=REPORT_TTL_S)

    async def run(self) -> None:
        """Refresh the report every :data:`HEARTBEAT_S` seconds until :meth:`close`, then remove it. Raises when
        Redis fails (its supervisor starts it again, which writes the report at once)."""
        while not self._closed.is_set():
            await self.publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), HEARTBEAT_S)
        await self._client.delete(WORKER_KEY_PREFIX + self._worker_id)

    async def close(self) -> None:
        """Stop :meth:`run` and remove the report."""
        self._closed.set()


async def read_worker_reports(client: aioredis.Redis) -> list[WorkerReport]:
    """Every live process's report, by worker id."""
    reports = []
    async for key in client.scan_iter(match=WORKER_KEY_PREFIX + "*"):
        value = await client.get(key)
        if value is not None:
            reports.append(WorkerReport.from_json(value))
    return sorted(reports, key=lambda report: report.worker_id)
