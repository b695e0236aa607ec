"""A bundle generation: one loaded, validated copy of a bundle's code, with its own plugin manager."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pluggy

from berth import hooks
from berth.bundle.context import BundleContext
from berth.bundle.info import AgentSpec, BundleInfo
from berth.bundle.skills import Skill
from berth.bundle.widgets import Widget
from berth.host.bundle_loop import BundleLoop
from berth.knowledge.space import SpaceIndex
from berth.tools.catalog import ToolCatalog
from berth.tools.mcp import McpToolManager
from berth.tools.packs import ToolPackFactory
from berth.tools.scoped import ScopedTools, tools_in_scope
from berth.tools.threads import ToolThreadPools

SourceKind = Literal["entry_point", "path"]


class BundleHooks:
    """Typed calls into one generation's plugin manager (core code never calls hooks by string)."""

    def __init__(self, manager: pluggy.PluginManager, loop: BundleLoop) -> None:
        self._hook = manager.hook
        self._loop = loop

    def bundle(self) -> Any:
        """``berth_bundle()`` (firstresult)."""
        return self._hook.berth_bundle()

    def agent(self, ctx: BundleContext) -> Any:
        """``berth_agent(ctx)`` (firstresult)."""
        return self._hook.berth_agent(ctx=ctx)

    def tools(self, ctx: BundleContext) -> list[Any]:
        """``berth_tools(ctx)``: every implementation's result, in registration order."""
        return list(reversed(self._hook.berth_tools(ctx=ctx)))

    def skills(self, ctx: BundleContext) -> list[Any]:
        """``berth_skills(ctx)`` results concatenated."""
        return _flatten(reversed(self._hook.berth_skills(ctx=ctx)))

    def knowledge(self, ctx: BundleContext) -> list[Any]:
        """``berth_knowledge(ctx)`` results concatenated."""
        return _flatten(reversed(self._hook.berth_knowledge(ctx=ctx)))

    def widgets(self, ctx: BundleContext) -> list[Any]:
        """``berth_widgets(ctx)`` results concatenated."""
        return _flatten(reversed(self._hook.berth_widgets(ctx=ctx)))

    def routes(self, ctx: BundleContext) -> Any:
        """``berth_routes(ctx)`` (firstresult)."""
        return self._hook.berth_routes(ctx=ctx)

    async def on_load(self, ctx: BundleContext) -> None:
        """Await every ``berth_on_load(ctx)`` implementation (sync ones are simply called)."""
        await _await_all(reversed(self._hook.berth_on_load(ctx=ctx)), self._loop)

    async def on_unload(self, ctx: BundleContext) -> None:
        """Await every ``berth_on_unload(ctx)`` implementation."""
        await _await_all(reversed(self._hook.berth_on_unload(ctx=ctx)), self._loop)

    async def before_turn(self, ctx: BundleContext, turn: object) -> None:
        """Await every ``berth_before_turn`` implementation; the first error vetoes the turn."""
        await _await_all(reversed(self._hook.berth_before_turn(ctx=ctx, turn=turn)), self._loop)

    async def after_turn(self, ctx: BundleContext, turn: object, result: object) -> None:
        """Await every ``berth_after_turn`` implementation."""
        await _await_all(reversed(self._hook.berth_after_turn(ctx=ctx, turn=turn, result=result)), self._loop)


def new_bundle_manager(plugin: object, name: str) -> pluggy.PluginManager:
    """A plugin manager holding only ``plugin`` (the bundle's module or object) and the hookspecs.

    Raises ``pluggy.PluginValidationError`` for an implementation whose signature does not match its
    spec, or a ``berth_*`` function that is no hook (a typo'd hook name).
    """
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    manager.register(plugin, name=name)
    manager.check_pending()
    return manager


@dataclass(eq=False)
class BundleGeneration:
    """One loaded generation. ``users`` counts in-flight work pinned to it; once ``retired`` (a newer
    generation serves) it is unloaded when ``users`` reaches zero."""

    bundle_id: str
    number: int
    source_kind: SourceKind
    source: str
    package: str
    module_names: tuple[str, ...]
    manager: pluggy.PluginManager
    info: BundleInfo
    context: BundleContext
    agent: AgentSpec | None
    catalog: ToolCatalog
    skills: dict[str, Skill]
    knowledge: dict[str, SpaceIndex]
    """The indexes of the bundle's knowledge spaces, by name (refreshed in the background)."""
    widgets: dict[str, Widget]
    mcp: McpToolManager | None = None
    loop: BundleLoop = field(default_factory=lambda: BundleLoop("a bundle"))
    """Where the generation's coroutines run (its async tools and hooks), never the host's loop."""
    tool_threads: ToolThreadPools = field(default_factory=ToolThreadPools)
    """Where its sync tools run, per tenant: the registry's pools, shared by the bundle's generations (a reload
    frees no stuck thread)."""
    loaded_at: float = field(default_factory=time.time)
    users: int = 0
    retired: bool = False
    unloaded: bool = False

    @property
    def hooks(self) -> BundleHooks:
        """Typed hook calls on this generation."""
        return BundleHooks(self.manager, self.loop)

    def tools_in(self, context: BundleContext, tool_packs: Mapping[str, ToolPackFactory]) -> ScopedTools:
        """The bundle's callable tools in ``context``'s scope: async ones run on the generation's loop, sync ones
        in the bundle's tool threads for the scope's tenant."""
        threads = self.tool_threads.pool(self.bundle_id, context.tenant or "-")  # "-": outside any scope
        return tools_in_scope(
            self.bundle_id, self.hooks.tools(context), context, tool_packs, self.loop.run, threads.run
        )


def _flatten(results: Iterable[Any]) -> list[Any]:
    flat: list[Any] = []
    for result in results:
        if result is None:
            continue
        if isinstance(result, list | tuple):
            flat.extend(result)
        else:
            flat.append(result)
    return flat


async def _await_all(results: Iterable[Any], loop: BundleLoop) -> None:
    """Await the hook results that are awaitable, in order; coroutines run on the generation's loop."""
    pending: list[Awaitable[Any]] = [result for result in results if inspect.isawaitable(result)]
    for awaitable in pending:
        if inspect.iscoroutine(awaitable):
            await loop.run(awaitable, what=f"hook {awaitable.__qualname__}")
        else:
            await asyncio.ensure_future(awaitable)
