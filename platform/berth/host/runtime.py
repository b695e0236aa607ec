"""A host process's bundle side: configuration, platform plugins, the registry and its reload triggers.

The API server (``berth run``) and turn workers (``berth worker``) both run one :class:`HostRuntime`.
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
from berth.distributed.connections import DistributedConnections
from berth.host.broadcast import LocalReloadBus, RedisReloadBus, RedisWorkerReporter, ReloadBus
from berth.host.plugins import PlatformPlugins
from berth.host.registry import BundleRegistry, ReloadOutcome
from berth.host.watcher import BundleWatcher, DescriptorWatcher
from berth.knowledge.service import KnowledgeService
from berth.knowledge.store import SpaceStoreFactory

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    """``<hostname>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def redis_client_for(config: Configuration) -> aioredis.Redis | None:
    """A Redis client when the platform storage is distributed, else None."""
    storage = config.settings_for().storage
    if storage.kind != "distributed":
        return None
    url = config.secret_resolver.resolve_setting(storage.redis.url, "storage.redis.url").reveal()
    client: aioredis.Redis = aioredis.from_url(url)
    return client


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
        self._tasks: list[asyncio.Task[object]] = []
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
        if self._redis is not None:
            self.bus = RedisReloadBus(self._redis, self.worker_id)
            self._reporter = RedisWorkerReporter(self._redis, self.worker_id, registry)
            registry.add_listener(lambda outcome: self._spawn(self._reporter.publish()) if self._reporter else None)
            self._spawn(self._reporter.run())
        else:
            self.bus = LocalReloadBus()
        self._spawn(self.bus.run(lambda bundle_id: registry.reload(bundle_id, reason="broadcast")))
        if self._watch:
            self._watchers = [BundleWatcher(registry), DescriptorWatcher(registry, self._load_configuration)]
            for watcher in self._watchers:
                self._spawn(watcher.run())
        return outcomes

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
        for watcher in self._watchers:
            watcher.stop()
        if self.bus is not None:
            await self.bus.close()
        if self._reporter is not None:
            await self._reporter.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for task in self._tasks:
            task.cancel()
        if self.registry is not None:
            await self.registry.close()
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()

    def _spawn(self, coroutine: Coroutine[Any, Any, object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coroutine)
        self._tasks.append(task)
        task.add_done_callback(self._log_failure)

    def _log_failure(self, task: asyncio.Task[object]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("host background task failed", exc_info=task.exception())
