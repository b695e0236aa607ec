"""Reload broadcast across host processes, and each process's report of its generations.

In embedded mode a reload stays in the process. In distributed mode a reload request is published on
Redis pub/sub (channel :data:`RELOAD_CHANNEL`) and every host process, the sender included, performs
the same transaction; each process keeps a report of its bundles' generations under
``berth:workers:<worker id>`` (refreshed after every reload and by a heartbeat, expiring when the
process is gone).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis

from berth.host.registry import BundleRegistry

log = logging.getLogger(__name__)

RELOAD_CHANNEL = "berth:bundles:reload"
WORKER_KEY_PREFIX = "berth:workers:"
REPORT_TTL_S = 30
HEARTBEAT_S = 10

ReloadHandler = Callable[[str], Awaitable[object]]


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
        """Handle queued requests until closed."""
        while (bundle_id := await self._queue.get()) is not None:
            await handler(bundle_id)

    async def close(self) -> None:
        """Stop :meth:`run`."""
        await self._queue.put(None)


class RedisReloadBus:
    """Reload requests over Redis pub/sub; every subscribed process receives every request."""

    def __init__(self, client: aioredis.Redis, origin: str) -> None:
        self._client = client
        self._origin = origin
        self._closed = asyncio.Event()

    async def publish(self, bundle_id: str) -> None:
        """Publish a reload request."""
        await self._client.publish(RELOAD_CHANNEL, json.dumps({"bundle_id": bundle_id, "origin": self._origin}))

    async def run(self, handler: ReloadHandler) -> None:
        """Subscribe and handle requests one at a time, in arrival order."""
        pubsub = self._client.pubsub()
        await pubsub.subscribe(RELOAD_CHANNEL)
        try:
            while not self._closed.is_set():
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if message is None:
                    continue
                try:
                    request = json.loads(message["data"])
                    bundle_id = str(request["bundle_id"])
                except (ValueError, KeyError, TypeError):
                    log.warning("ignoring a malformed reload request on %s", RELOAD_CHANNEL)
                    continue
                await handler(bundle_id)
        finally:
            await pubsub.unsubscribe(RELOAD_CHANNEL)
            await pubsub.aclose()  # type: ignore[no-untyped-call]

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
        """Refresh the report every :data:`HEARTBEAT_S` seconds until :meth:`close`."""
        while not self._closed.is_set():
            await self.publish()
            try:
                await asyncio.wait_for(self._closed.wait(), HEARTBEAT_S)
            except TimeoutError:
                continue
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
