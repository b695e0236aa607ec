"""A host process's bundle side: configuration, platform plugins, the registry and its reload triggers.

The API server (``berth run``) and turn workers (``berth worker``) both run one :class:`HostRuntime`. Its
long-lived loops (the reload bus, the worker report's heartbeat, the watchers) run as supervised tasks
(:attr:`HostRuntime.background`): a loop that fails is started again with backoff, and ``/readyz`` reports one
that stays down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from berth.config import ConfigError, Configuration, find_descriptors_dir
from berth.host.broadcast import LocalReloadBus, RedisReloadBus, RedisWorkerReporter, ReloadBus
from berth.host.connections import DistributedConnections
from berth.host.plugins import PlatformPlugins
from berth.host.registry import BundleRegistry, ReloadOutcome
from berth.host.reload_acks import ReloadAck
from berth.host.supervised import BackgroundTasks
from berth.host.watcher import BundleWatcher, DescriptorWatcher
from berth.knowledge.service import KnowledgeService
from berth.knowledge.store import SpaceStoreFactory
from berth.storage.redis_client import connect_redis

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    """``<hostname>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


BACKGROUND_REDIS_RETRIES = 3
"""Retries of a command of the bus and the reporter: enough to replace a connection a Redis restart closed, few
enough that a Redis that is down fails the loop within a second (its supervisor then backs off)."""


def redis_client_for(config: Configuration) -> aioredis.Redis | None:
    """A Redis client when the platform storage is distributed, else None."""
    storage = config.settings_for().storage
    if storage.kind != "distributed":
        return None
    url = config.secret_resolver.resolve_setting(storage.redis.url, "storage.redis.url").reveal()
    return connect_redis(url, retries=BACKGROUND_REDIS_RETRIES)


class HostRuntime:
    """Owns the bundle registry of one process and everything that triggers reloads in it."""

    def __init__(
        self,
        load_configuration: Callable[[], Configuration],
        plugins: PlatformPlugins,
        *,
        worker_id: str | None = None,
        watch: bool = True,
        load_timeout_s: float = 10.0,
        var_root: Path | None = None,
        refresh_knowledge: bool = True,
    ) -> None:
        """
        :param var_root: the storage root ``berth run --var`` names (the knowledge folder defaults under it).
        :param refresh_knowledge: index knowledge spaces as bundles load (a CLI that only reads them says no).
        """
        self._var_root = var_root
        self._refresh_knowledge = refresh_knowledge
        self._load_configuration = load_configuration
        self._plugins = plugins
        self.worker_id = worker_id or default_worker_id()
        self._watch = watch
        self._load_timeout_s = load_timeout_s
        self.background = BackgroundTasks()
        """The process's supervised loops (``checks.background`` of ``/readyz``); other parts may add theirs."""
        self._one_shots: set[asyncio.Task[object]] = set()
        self._redis: aioredis.Redis | None = None
        self._reporter: RedisWorkerReporter | None = None
        self._watchers: list[BundleWatcher | DescriptorWatcher] = []
        self.registry: BundleRegistry | None = None
        self.bus: ReloadBus | None = None

    @classmethod
    def for_descriptors(cls, directory: Path | None, **options: object) -> HostRuntime:
        """A runtime over the descriptors in ``directory`` (or the default location) with installed plugins."""
        plugins = PlatformPlugins.discover()
        root = find_descriptors_dir(directory)

        def load() -> Configuration:
            return Configuration.load(root, secret_providers=plugins.secret_providers())

        return cls(load, plugins, **options)  # type: ignore[arg-type]

    async def start(self) -> list[ReloadOutcome]:
        """Load the configuration and every bundle, then start the reload triggers."""
        config = self._load_configuration()
        registry = BundleRegistry(
            config,
            known_tool_packs=set(self._plugins.tool_packs()),
            load_timeout_s=self._load_timeout_s,
            knowledge=self._knowledge_service(config),
        )
        self.registry = registry
        outcomes = await registry.start()
        self._redis = redis_client_for(config)
        bus: ReloadBus
        if self._redis is not None:
            reporter = RedisWorkerReporter(self._redis, self.worker_id, registry)
            self._reporter = reporter
            bus = RedisReloadBus(self._redis, self.worker_id, on_subscribed=reporter.publish)
            registry.add_listener(lambda outcome: self._spawn_once(reporter.publish(), "publish the worker report"))
            self.background.spawn("worker report", reporter.run)
        else:
            bus = LocalReloadBus()
        self.bus = bus
        self.background.spawn("reload bus", lambda: bus.run(self._reload_for_bus))
        if self._watch:
            bundles, descriptors = BundleWatcher(registry), DescriptorWatcher(registry, self._load_configuration)
            self._watchers = [bundles, descriptors]
            self.background.spawn("bundle watcher", bundles.run)
            self.background.spawn("descriptor watcher", descriptors.run)
        return outcomes

    async def _reload_for_bus(self, bundle_id: str) -> ReloadAck:
        """Reload ``bundle_id`` as a broadcast asks; say what this process serves afterwards."""
        assert self.registry is not None
        outcome = await self.registry.reload(bundle_id, reason="broadcast")
        status = next((s for s in self.registry.statuses() if s.id == bundle_id), None)
        return ReloadAck(
            worker_id=self.worker_id,
            bundle_id=bundle_id,
            ok=outcome.ok,
            generation=status.generation if status is not None else outcome.generation,
            state=status.state if status is not None else ("loaded" if outcome.ok else "failed"),
            error=str(outcome.error) if outcome.error else None,
        )

    def _knowledge_service(self, config: Configuration) -> KnowledgeService:
        """The knowledge service with the platform's embedder (``platform.embedder``), built by its plugin."""
        settings = config.settings_for().embedder
        factory = self._plugins.embedders().get(settings.provider)
        if factory is None:
            known = ", ".join(sorted(self._plugins.embedders())) or "none"
            raise ConfigError(
                "embedder_unknown",
                f"platform.embedder.provider {settings.provider!r} is not installed (known: {known})",
            )
        service = KnowledgeService.for_config(
            config,
            var_root=self._var_root,
            embedder=factory(settings),
            embedder_name=settings.provider,
            stores=self._knowledge_stores(config),
        )
        service.auto_refresh = self._refresh_knowledge
        return service

    def _knowledge_stores(self, config: Configuration) -> SpaceStoreFactory | None:
        """The space stores a plugin registers for distributed storage (None: SQLite files, as embedded)."""
        if config.settings_for().storage.kind != "distributed":
            return None
        factory = self._plugins.knowledge_stores().get("distributed")
        if factory is None:
            log.warning("no plugin stores knowledge for distributed storage: each host keeps SQLite indexes")
            return None
        stores: SpaceStoreFactory = factory(DistributedConnections.resolve(config))
        return stores

    async def request_reload(self, bundle_id: str) -> None:
        """Reload ``bundle_id`` in every process of the deployment (the admin API and CLI use this)."""
        assert self.bus is not None, "start() first"
        await self.bus.publish(bundle_id)

    async def stop(self) -> None:
        """Stop the triggers and unload every generation."""
        self.background.request_stop()  # the loops' ends below are final: no restart
        for watcher in self._watchers:
            watcher.stop()
        if self.bus is not None:
            await self.bus.close()
        if self._reporter is not None:
            await self._reporter.close()
        await self.background.stop(timeout_s=5)
        for task in list(self._one_shots):
            task.cancel()
        if self.registry is not None:
            await self.registry.close()
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()

    def _spawn_once(self, coroutine: Coroutine[Any, Any, object], what: str) -> None:
        """Run a one-off coroutine in the background; a failure is logged (the next heartbeat makes up for it)."""
        task: asyncio.Task[object] = asyncio.ensure_future(coroutine)
        self._one_shots.add(task)

        def done(finished: asyncio.Task[object]) -> None:
            self._one_shots.discard(finished)
            if not finished.cancelled() and (error := finished.exception()) is not None:
                log.warning("could not %s: %s: %s", what, type(error).__name__, error)

        task.add_done_callback(done)
