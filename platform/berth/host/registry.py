"""The bundle registry: the serving generation of every bundle, and reload as a transaction (SPEC §3.3).

``reload`` imports and validates a new generation while the current one keeps serving, then swaps
atomically. Work that started on a generation is pinned to it (``async with registry.use(id)``); a
replaced generation is unloaded (``berth_on_unload``, module purge) when its last user ends. A failed
load leaves the serving generation in place and records the error for ``berth bundles list``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Literal

from berth.bundle.context import BundleContext, bundle_logger
from berth.config import ConfigError, Configuration, DescriptorError
from berth.host.errors import BundleLoadError, LoadError
from berth.host.generation import BundleGeneration
from berth.host.importer import bundle_entry_points, purge_modules
from berth.host.loader import load_generation
from berth.knowledge.service import KnowledgeService
from berth.tools.threads import ToolThreadPools

log = logging.getLogger(__name__)

BundleState = Literal["loaded", "failed", "not_loaded", "not_enabled"]
"""``not_enabled``: installed (a ``berth.bundles`` entry point) but named by no entry of ``bundles.yaml``."""


@dataclass(frozen=True)
class BundleStatus:
    """One row of ``berth bundles list``."""

    id: str
    version: str | None
    source: str
    generation: int | None
    state: BundleState
    error: LoadError | None
    tenants: tuple[str, ...]
    loaded_at: float | None
    failed_generation: int | None = None
    """The number of the generation whose load failed last (``error`` says why); while ``state`` is ``loaded``,
    the bundle still serves ``generation``, an older one."""


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload transaction did."""

    bundle_id: str
    ok: bool
    generation: int | None
    error: LoadError | None
    duration_s: float
    reason: str


ReloadListener = Callable[[ReloadOutcome], None]


class BundleRegistry:
    """Serving generations by bundle id, with transactional reload and generation pinning."""

    def __init__(
        self,
        config: Configuration,
        *,
        known_tool_packs: Collection[str] | None = None,
        load_timeout_s: float = 10.0,
        knowledge: KnowledgeService | None = None,
    ) -> None:
        self._config = config
        self.knowledge = knowledge or KnowledgeService.for_config(config)
        """Where the bundles' knowledge spaces keep their indexes (``platform.knowledge``)."""
        self._known_tool_packs = known_tool_packs
        self._load_timeout_s = load_timeout_s
        self._current: dict[str, BundleGeneration] = {}
        self._errors: dict[str, LoadError] = {}
        self._failed_numbers: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._retired: set[BundleGeneration] = set()
        self._listeners: list[ReloadListener] = []
        # Scoped contexts by (bundle, generation number, tenant, project): every turn asks for one.
        self._contexts: dict[tuple[str, int, str, str], BundleContext] = {}
        limits = config.settings_for().tool_threads
        self.tool_threads = ToolThreadPools(limits.size, limits.degraded_at)
        """Where the bundles' sync tools run, per bundle and tenant; every generation of a bundle shares its pools."""

    @property
    def config(self) -> Configuration:
        """The configuration the serving generations were validated against."""
        return self._config

    def add_listener(self, listener: ReloadListener) -> None:
        """Call ``listener`` after every reload transaction (successful or not)."""
        self._listeners.append(listener)

    async def start(self) -> list[ReloadOutcome]:
        """Load every bundle named in ``bundles.yaml``; failures are recorded, not raised."""
        return [
            await self.reload(bundle_id, reason="start")
            for bundle_id in sorted(self._config.descriptors.bundles.bundles)
        ]

    async def reload(self, bundle_id: str, *, reason: str = "manual") -> ReloadOutcome:
        """Load a new generation of ``bundle_id`` and swap it in if it validates."""
        entry = self._config.descriptors.bundles.bundles.get(bundle_id)
        if entry is None:
            known = ", ".join(sorted(self._config.descriptors.bundles.bundles)) or "none"
            raise ConfigError("bundle_unknown", f"bundle '{bundle_id}' is not in bundles.yaml (known: {known})")
        lock = self._locks.setdefault(bundle_id, asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            number = self._counters.get(bundle_id, 0) + 1
            self._counters[bundle_id] = number
            try:
                generation = await load_generation(
                    bundle_id,
                    number,
                    entry,
                    self._config,
                    known_tool_packs=self._known_tool_packs,
                    load_timeout_s=self._load_timeout_s,
                    knowledge=self.knowledge,
                )
            except BundleLoadError as exc:
                self._errors[bundle_id] = exc.error
                self._failed_numbers[bundle_id] = number
                log.error("bundle %s generation %d failed to load: %s", bundle_id, number, exc.error)
                outcome = ReloadOutcome(bundle_id, False, None, exc.error, time.perf_counter() - started, reason)
            else:
                generation.tool_threads = self.tool_threads
                previous = self._current.get(bundle_id)
                self._current[bundle_id] = generation
                self._errors.pop(bundle_id, None)
                self._failed_numbers.pop(bundle_id, None)
                if previous is not None:
                    await self._retire(previous)
                log.info("bundle %s generation %d serving (%s)", bundle_id, number, reason)
                outcome = ReloadOutcome(bundle_id, True, number, None, time.perf_counter() - started, reason)
        self._notify(outcome)
        return outcome

    def _notify(self, outcome: ReloadOutcome) -> None:
        for listener in self._listeners:
            try:
                listener(outcome)
            except Exception:
                log.exception("reload listener failed")

    async def apply_configuration(self, config: Configuration) -> list[ReloadOutcome]:
        """Adopt changed descriptors: props and secrets change without re-import; a bundle whose source
        changed, or that is new, is (re)loaded; a bundle no longer named is retired."""
        old_entries = self._config.descriptors.bundles.bundles
        new_entries = config.descriptors.bundles.bundles
        outcomes: list[ReloadOutcome] = []
        for bundle_id, generation in list(self._current.items()):
            if bundle_id in new_entries and new_entries[bundle_id].source == old_entries[bundle_id].source:
                try:
                    self._check_props(config, generation)
                except DescriptorError as exc:
                    error = LoadError("bundle_props_invalid", exc.render())
                    self._errors[bundle_id] = error
                    self._failed_numbers.pop(bundle_id, None)  # props, not a generation, failed
                    outcome = ReloadOutcome(bundle_id, False, generation.number, error, 0.0, "descriptors")
                    self._notify(outcome)
                    return [outcome]
        self._config = config
        self._contexts.clear()
        limits = config.settings_for().tool_threads
        self.tool_threads.configure(limits.size, limits.degraded_at)
        for bundle_id, generation in list(self._current.items()):
            if bundle_id not in new_entries:
                del self._current[bundle_id]
                await self._retire(generation)
            elif new_entries[bundle_id].source == old_entries[bundle_id].source:
                generation.context = self._rebuild_context(generation)
                outcome = ReloadOutcome(bundle_id, True, generation.number, None, 0.0, "descriptors")
                self._notify(outcome)
                outcomes.append(outcome)
        for bundle_id in sorted(new_entries):
            changed = bundle_id in old_entries and new_entries[bundle_id].source != old_entries[bundle_id].source
            if bundle_id not in self._current or changed:
                outcomes.append(await self.reload(bundle_id, reason="descriptors"))
        return outcomes

    def current(self, bundle_id: str) -> BundleGeneration:
        """The serving generation of ``bundle_id``; ``ConfigError(bundle_unavailable)`` if none."""
        generation = self._current.get(bundle_id)
        if generation is None:
            error = self._errors.get(bundle_id)
            # what a tenant's user may read: the code and a message without the host's file paths (an operator
            # finds file, line and traceback in GET /v1/admin/bundles)
            detail = f": [{error.code}] {error.public_message()}" if error else ""
            raise ConfigError("bundle_unavailable", f"bundle '{bundle_id}' has no loaded generation{detail}")
        return generation

    @asynccontextmanager
    async def use(self, bundle_id: str) -> AsyncIterator[BundleGeneration]:
        """Pin the serving generation for the duration of the block (a turn, a tool call)."""
        generation = self.current(bundle_id)
        generation.users += 1
        try:
            yield generation
        finally:
            generation.users -= 1
            if generation.retired and generation.users == 0:
                await self._unload(generation)

    def context_for(self, generation: BundleGeneration, tenant: str, project: str) -> BundleContext:
        """The context of ``generation`` bound to one tenant/project (scoped props, settings, secrets).

        Built once per generation and scope, until the descriptors change (contexts are immutable).
        """
        key = (generation.bundle_id, generation.number, tenant, project)
        context = self._contexts.get(key)
        if context is None:
            context = self._contexts[key] = self._scoped_context(generation, tenant, project)
        return context

    def _scoped_context(self, generation: BundleGeneration, tenant: str, project: str) -> BundleContext:
        config = self._config
        if generation.bundle_id not in config.descriptors.visible_bundles(tenant, project):
            raise ConfigError(
                "bundle_not_visible", f"bundle '{generation.bundle_id}' is not enabled for {tenant}/{project}"
            )
        return replace(
            generation.context,
            tenant=tenant,
            project=project,
            props=config.bundle_props(generation.bundle_id, generation.info.props_model, tenant, project),
            settings=config.settings_for(tenant, project),
            secret=config.secrets(tenant, project, generation.bundle_id),
            logger=bundle_logger(generation.bundle_id, generation.number, tenant, project),
        )

    def statuses(self) -> list[BundleStatus]:
        """Every bundle named in ``bundles.yaml`` with its serving generation and last error, then every
        installed bundle that ``bundles.yaml`` does not name (``not_enabled``), so an operator sees what they
        could enable."""
        rows = []
        descriptors = self._config.descriptors
        for bundle_id, entry in sorted(descriptors.bundles.bundles.items()):
            generation = self._current.get(bundle_id)
            error = self._errors.get(bundle_id)
            tenants = tuple(
                f"{t}/{p}" for t, p in descriptors.assembly.scopes() if bundle_id in descriptors.visible_bundles(t, p)
            )
            source = entry.source.entry_point and f"entry_point:{entry.source.entry_point}"
            rows.append(
                BundleStatus(
                    id=bundle_id,
                    version=generation.info.version if generation else None,
                    source=source or f"path:{entry.source.path}",
                    generation=generation.number if generation else None,
                    state="loaded" if generation else ("failed" if error else "not_loaded"),
                    error=error,
                    tenants=tenants,
                    loaded_at=generation.loaded_at if generation else None,
                    failed_generation=self._failed_numbers.get(bundle_id) if error else None,
                )
            )
        return rows + self._installed_but_not_enabled()

    def loaded_bundle_ids(self) -> list[str]:
        """The ids of the bundles in ``bundles.yaml`` that serve a generation, sorted: the ``loaded`` rows of
        :meth:`statuses`, without reading the installed entry points (``/readyz`` asks this on every probe)."""
        return sorted(bundle_id for bundle_id in self._config.descriptors.bundles.bundles if bundle_id in self._current)

    def _installed_but_not_enabled(self) -> list[BundleStatus]:
        entries = self._config.descriptors.bundles.bundles
        # an id in bundles.yaml (even one loaded from a folder) is the same bundle as the entry point of that name
        named = set(entries) | {entry.source.entry_point for entry in entries.values() if entry.source.entry_point}
        return [
            BundleStatus(
                id=name,
                version=point.dist.version if point.dist is not None else None,
                source=f"entry_point:{name}",
                generation=None,
                state="not_enabled",
                error=None,
                tenants=(),
                loaded_at=None,
            )
            for name, point in sorted(bundle_entry_points().items())
            if name not in named
        ]

    @property
    def retired_generations(self) -> list[BundleGeneration]:
        """Replaced generations still held by in-flight work."""
        return sorted(self._retired, key=lambda g: (g.bundle_id, g.number))

    async def close(self) -> None:
        """Unload every generation (at shutdown)."""
        for generation in [*self._current.values(), *self._retired]:
            generation.retired = True
            await self._unload(generation)
        self._current.clear()
        await self.knowledge.aclose()

    def _check_props(self, config: Configuration, generation: BundleGeneration) -> None:
        for tenant, project in [(None, None), *config.descriptors.assembly.scopes()]:
            if tenant is None or generation.bundle_id in config.descriptors.visible_bundles(tenant, project):
                config.bundle_props(generation.bundle_id, generation.info.props_model, tenant, project)

    def _rebuild_context(self, generation: BundleGeneration) -> BundleContext:
        config = self._config
        return replace(
            generation.context,
            props=config.bundle_props(generation.bundle_id, generation.info.props_model),
            settings=config.settings_for(),
            secret=config.secrets(None, None, generation.bundle_id),
        )

    async def _retire(self, generation: BundleGeneration) -> None:
        generation.retired = True
        for key in [k for k in self._contexts if k[:2] == (generation.bundle_id, generation.number)]:
            del self._contexts[key]
        if generation.users == 0:
            await self._unload(generation)
        else:
            self._retired.add(generation)

    async def _unload(self, generation: BundleGeneration) -> None:
        if generation.unloaded:
            return
        generation.unloaded = True
        self._retired.discard(generation)
        try:
            await generation.hooks.on_unload(generation.context)
        except Exception:
            log.exception("berth_on_unload of bundle %s generation %d failed", generation.bundle_id, generation.number)
        if generation.mcp is not None:
            await generation.mcp.aclose()
        for index in generation.knowledge.values():
            await index.aclose()
        await generation.loop.aclose()
        if generation.source_kind == "path":
            purge_modules(generation.package)
        log.info("bundle %s generation %d unloaded", generation.bundle_id, generation.number)
