"""Loading one generation of a bundle: import, then validate everything, then hand it over (SPEC §3.3).

Validation covers: ``berth_bundle`` present, well-formed and naming the configured id; props valid in
every scope that uses the bundle; the tool catalog builds; skills parse; widgets' files exist;
knowledge spaces index; ``berth_on_load`` succeeds within the timeout. Any failure raises
:class:`BundleLoadError` with a stable code and, where it came from the bundle's code, file and line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pluggy
from pydantic import ValidationError

from berth.bundle.context import BundleContext, bundle_logger
from berth.bundle.info import AgentSpec, BundleInfo
from berth.bundle.knowledge import KnowledgeSpace
from berth.bundle.skills import Skill, SkillError
from berth.bundle.widgets import Widget
from berth.config import Configuration, DescriptorError
from berth.config.models.bundles import BundleEntry
from berth.host.bundle_loop import BundleLoop
from berth.host.errors import BundleLoadError, LoadError, load_error_from_exception
from berth.host.generation import BundleGeneration, BundleHooks, new_bundle_manager
from berth.host.importer import (
    ImportedBundle,
    bundle_entry_points,
    entry_point_roots,
    import_entry_point_bundle,
    import_folder_bundle,
    purge_modules,
)
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.tools.catalog import CatalogError, build_catalog
from berth.tools.contributions import merge_tool_contributions
from berth.tools.mcp import McpToolManager


def bundle_folder(config: Configuration, entry: BundleEntry) -> Path:
    """The folder of a path-sourced bundle, relative paths starting at the descriptors folder."""
    assert entry.source.path is not None
    path = Path(entry.source.path)
    return path if path.is_absolute() else (config.descriptors.base_dir / path).resolve()


_USERS_OWN: tuple[type[BaseException], ...] = (KeyboardInterrupt, asyncio.CancelledError)
"""What goes on up from a bundle's import and hooks: the user's interrupt and a cancelled task. Anything else a
bundle raises, ``SystemExit`` and ``GeneratorExit`` included, fails its load with a coded error."""


def watched_folder(config: Configuration, entry: BundleEntry) -> Path:
    """The folder to watch for changes of a path-sourced bundle (its package folder)."""
    folder = bundle_folder(config, entry)
    return folder / entry.source.module.replace(".", "/") if entry.source.module else folder


def import_bundle(bundle_id: str, number: int, entry: BundleEntry, config: Configuration) -> ImportedBundle:
    """Import the bundle's code for generation ``number``; raise :class:`BundleLoadError` on failure."""
    if entry.source.path is not None:
        folder = bundle_folder(config, entry)
        try:
            return import_folder_bundle(bundle_id, number, folder, entry.source.module)
        except _USERS_OWN:
            raise
        except BaseException as exc:  # SystemExit too: a bundle that exits on import must not end the host
            raise BundleLoadError(load_error_from_exception("bundle_import_failed", exc, [folder])) from None
    points = bundle_entry_points()
    point = points.get(entry.source.entry_point or "")
    if point is None:
        known = ", ".join(sorted(points)) or "none installed"
        raise BundleLoadError(
            LoadError(
                "bundle_not_installed",
                f"no entry point '{entry.source.entry_point}' in group berth.bundles (installed: {known}); "
                "pip install the bundle's package",
            )
        )
    try:
        return import_entry_point_bundle(point)
    except _USERS_OWN:
        raise
    except BaseException as exc:  # SystemExit too
        roots = entry_point_roots(point) if point.module else []
        raise BundleLoadError(load_error_from_exception("bundle_import_failed", exc, roots)) from None


async def load_generation(
    bundle_id: str,
    number: int,
    entry: BundleEntry,
    config: Configuration,
    *,
    known_tool_packs: Collection[str] | None = None,
    load_timeout_s: float = 10.0,
    knowledge: KnowledgeService | None = None,
) -> BundleGeneration:
    """Import and validate generation ``number`` of ``bundle_id``; the caller swaps it in."""
    imported = import_bundle(bundle_id, number, entry, config)
    loop = BundleLoop(f"bundle {bundle_id} generation {number}")
    try:
        manager = _bundle_manager(bundle_id, number, imported)
        return await _validate(
            bundle_id,
            number,
            entry,
            config,
            imported,
            known_tool_packs,
            load_timeout_s,
            manager,
            loop,
            knowledge or KnowledgeService.for_config(config),
        )
    except BaseException:
        await loop.aclose()
        if entry.source.path is not None:
            purge_modules(imported.package)
        raise


def _bundle_manager(bundle_id: str, number: int, imported: ImportedBundle) -> pluggy.PluginManager:
    """The generation's own plugin manager with the bundle registered (its hooks validated)."""
    try:
        return new_bundle_manager(imported.plugin, f"{bundle_id}.g{number}")
    except (pluggy.PluginValidationError, ValueError) as exc:
        error = load_error_from_exception(
            "bundle_hooks_invalid", exc, list(imported.roots), "hook implementations do not match berth's hookspecs"
        )
        raise BundleLoadError(error) from None


async def _validate(
    bundle_id: str,
    number: int,
    entry: BundleEntry,
    config: Configuration,
    imported: ImportedBundle,
    known_tool_packs: Collection[str] | None,
    load_timeout_s: float,
    manager: pluggy.PluginManager,
    loop: BundleLoop,
    service: KnowledgeService,
) -> BundleGeneration:
    roots = list(imported.roots)

    def failure(code: str, exc: BaseException, context: str) -> BundleLoadError:
        return BundleLoadError(load_error_from_exception(code, exc, roots, context))

    hooks = BundleHooks(manager, loop)
    info = _call(lambda: hooks.bundle(), failure, "bundle_info_invalid", "berth_bundle()")
    if not isinstance(info, BundleInfo):
        raise BundleLoadError(
            LoadError("bundle_info_invalid", f"berth_bundle() must return a BundleInfo, got {type(info).__name__}")
        )
    if info.id != bundle_id:
        raise BundleLoadError(
            LoadError(
                "bundle_id_mismatch",
                f"berth_bundle() says id '{info.id}' but bundles.yaml names this bundle '{bundle_id}'",
            )
        )
    context = _bundle_context(bundle_id, number, info, config, roots)
    for tenant, project in _scopes_using(config, bundle_id):
        try:
            config.bundle_props(bundle_id, info.props_model, tenant, project)
        except DescriptorError as exc:
            raise BundleLoadError(LoadError("bundle_props_invalid", exc.render())) from None
    agent = _call(lambda: hooks.agent(context), failure, "bundle_agent_invalid", "berth_agent(ctx)")
    if agent is not None and not isinstance(agent, AgentSpec):
        raise BundleLoadError(
            LoadError("bundle_agent_invalid", f"berth_agent(ctx) must return an AgentSpec, got {type(agent).__name__}")
        )
    contributions = _call(lambda: hooks.tools(context), failure, "bundle_tools_invalid", "berth_tools(ctx)")
    try:
        catalog = build_catalog(bundle_id, merge_tool_contributions(contributions), known_tool_packs)
    except (CatalogError, ValidationError) as exc:
        raise BundleLoadError(LoadError("bundle_tools_invalid", f"tool catalog: {exc}")) from None
    skills = _skills(
        _call(lambda: hooks.skills(context), failure, "bundle_skills_invalid", "berth_skills(ctx)"), context
    )
    widgets = _widgets(_call(lambda: hooks.widgets(context), failure, "bundle_widgets_invalid", "berth_widgets(ctx)"))
    spaces = _call(lambda: hooks.knowledge(context), failure, "bundle_knowledge_invalid", "berth_knowledge(ctx)")
    knowledge = _knowledge(bundle_id, spaces, service, failure)
    for skill in skills.values():
        unknown = [space for space in skill.knowledge if space not in knowledge]
        if unknown:
            await _close(knowledge)
            known = ", ".join(sorted(knowledge)) or "none"
            raise BundleLoadError(
                LoadError(
                    "bundle_skill_invalid",
                    f"skill '{skill.id}' names knowledge space '{unknown[0]}', which the bundle does not have "
                    f"(spaces: {known})",
                )
            )
    try:
        await asyncio.wait_for(hooks.on_load(context), timeout=load_timeout_s)
    except TimeoutError:
        await _close(knowledge)
        raise BundleLoadError(
            LoadError("bundle_on_load_timeout", f"berth_on_load did not finish within {load_timeout_s:g} s")
        ) from None
    except Exception as exc:
        await _close(knowledge)
        raise failure("bundle_on_load_failed", exc, "berth_on_load(ctx)") from None
    for index in knowledge.values() if service.auto_refresh else ():
        index.refresh_in_background()  # the stored version serves meanwhile; a first index is awaited by searches
        index.warm_in_background()  # the embedder's model and the vectors, loaded before the first search asks
    source = entry.source.entry_point or str(bundle_folder(config, entry))
    servers = [e.server for e in catalog if e.server is not None]
    mcp = McpToolManager(servers, context.secret) if servers else None
    if mcp is not None:
        mcp.start_loading()  # list the servers' tools in the background; turns wait at most a connect timeout
    return BundleGeneration(
        bundle_id=bundle_id,
        number=number,
        source_kind="path" if entry.source.path is not None else "entry_point",
        source=source,
        package=imported.package,
        module_names=imported.module_names,
        manager=manager,
        info=info,
        context=context,
        agent=agent,
        catalog=catalog,
        skills=skills,
        knowledge=knowledge,
        widgets=widgets,
        mcp=mcp,
        loop=loop,
    )


def _call(function: Any, failure: Any, code: str, context: str) -> Any:
    try:
        return function()
    except BundleLoadError:
        raise
    except _USERS_OWN:
        raise
    except BaseException as exc:  # a hook that calls sys.exit() fails the load, not the host
        raise failure(code, exc, context) from None


def _scopes_using(config: Configuration, bundle_id: str) -> list[tuple[str | None, str | None]]:
    scopes: list[tuple[str | None, str | None]] = [(None, None)]
    for tenant, project in config.descriptors.assembly.scopes():
        if bundle_id in config.descriptors.visible_bundles(tenant, project):
            scopes.append((tenant, project))
    return scopes


def _bundle_context(
    bundle_id: str, number: int, info: BundleInfo, config: Configuration, roots: list[Path]
) -> BundleContext:
    try:
        props = config.bundle_props(bundle_id, info.props_model)
    except DescriptorError as exc:
        raise BundleLoadError(LoadError("bundle_props_invalid", exc.render())) from None
    return BundleContext(
        bundle_id=bundle_id,
        generation=number,
        tenant=None,
        project=None,
        props=props,
        settings=config.settings_for(),
        secret=config.secrets(None, None, bundle_id),
        root=roots[0] if roots else config.descriptors.base_dir,
        logger=bundle_logger(bundle_id, number, None, None),
    )


def _skills(items: list[Any], context: BundleContext) -> dict[str, Skill]:
    skills: dict[str, Skill] = {}
    for item in items:
        try:
            skill = item if isinstance(item, Skill) else Skill.from_folder(context.path(item))
        except SkillError as exc:
            raise BundleLoadError(LoadError("bundle_skill_invalid", str(exc))) from None
        if skill.id in skills:
            raise BundleLoadError(LoadError("bundle_skill_invalid", f"skill id '{skill.id}' is contributed twice"))
        skills[skill.id] = skill
    return skills


def _widgets(items: list[Any]) -> dict[str, Widget]:
    widgets: dict[str, Widget] = {}
    for item in items:
        if not isinstance(item, Widget):
            raise BundleLoadError(
                LoadError("bundle_widget_invalid", f"berth_widgets returned {type(item).__name__}, not a Widget")
            )
        problems = item.problems()
        if problems:
            raise BundleLoadError(LoadError("bundle_widget_invalid", "; ".join(problems)))
        if item.alias in widgets:
            raise BundleLoadError(LoadError("bundle_widget_invalid", f"widget alias '{item.alias}' is used twice"))
        widgets[item.alias] = item
    return widgets


def _knowledge(bundle_id: str, items: list[Any], service: KnowledgeService, failure: Any) -> dict[str, SpaceIndex]:
    """Open the index of every contributed space (refreshed once the generation validates; a store connects on
    first use, so nothing needs closing when a later space fails)."""
    spaces: dict[str, SpaceIndex] = {}
    for item in items:
        if not isinstance(item, KnowledgeSpace):
            raise BundleLoadError(
                LoadError("bundle_knowledge_invalid", f"berth_knowledge returned {type(item).__name__}")
            )
        if item.name in spaces:
            raise BundleLoadError(
                LoadError("bundle_knowledge_invalid", f"knowledge space '{item.name}' is contributed twice")
            )
        try:
            spaces[item.name] = service.open(bundle_id, item)
        except Exception as exc:
            raise failure("bundle_knowledge_invalid", exc, f"opening knowledge space '{item.name}'") from None
    return spaces


async def _close(spaces: dict[str, SpaceIndex]) -> None:
    for index in spaces.values():
        await index.aclose()
