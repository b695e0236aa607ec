"""Every Berth hookspec (SPEC §3.1): platform-plugin hooks and bundle hooks.

Hook names start with ``berth_``. Platform plugins (entry-point group ``berth.plugins``) are registered
on the host's plugin manager at start-up; each returns ``{name: factory}`` for the backends it adds,
and two plugins that register the same name are refused at start-up, naming both packages.

Bundle hooks are called on a plugin manager of the bundle's own generation (see
:mod:`berth.host.generation`), never on the host's, so bundles never see each other's results. Core
code calls them through the typed facade :class:`berth.host.generation.BundleHooks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

PROJECT_NAME = "berth"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from fastapi import APIRouter

    from berth.bundle.context import BundleContext
    from berth.bundle.info import AgentSpec, BundleInfo
    from berth.bundle.knowledge import KnowledgeSpace
    from berth.bundle.skills import Skill
    from berth.bundle.widgets import Widget
    from berth.config.secrets import SecretProviderFactory
    from berth.storage.backend import StorageMigrator
    from berth.tools.contributions import BundleTools


# -- platform plugin hooks ---------------------------------------------------------------------


@hookspec
def berth_secret_providers() -> Mapping[str, SecretProviderFactory]:
    """Contribute secret providers: ``{prefix: factory}``.

    A secret source ``<prefix>:<ref>`` in ``secrets.yaml`` or ``bundles.secrets.yaml`` is resolved by
    ``factory(options).resolve(ref)``, where ``options`` is ``platform.secret_providers.<prefix>`` of
    ``assembly.yaml``. ``env``, ``file`` and ``literal`` are built in and cannot be replaced.

    :return: a mapping of provider prefix to factory.

    Called once at host start-up, and by ``berth descriptors check`` to know the valid prefixes.
    Not firstresult: every plugin's mapping is collected.
    """
    raise NotImplementedError


@hookspec
def berth_storage_backends() -> Mapping[str, Callable[..., Any]]:
    """Contribute storage backends (conversation store, artifact store, bus): ``{kind: factory}``.

    :return: a mapping of backend name to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_knowledge_stores() -> Mapping[str, Callable[..., Any]]:
    """Contribute where knowledge spaces keep their indexes for a storage kind: ``{kind: factory}``.

    ``factory(connections)`` gets the kind's resolved connections (``distributed``:
    :class:`~berth.host.connections.DistributedConnections`) and returns a
    :class:`~berth.knowledge.store.SpaceStoreFactory` (``(bundle_id, space) -> SpaceStore``). Without one for
    the configured kind, indexes are SQLite files under ``platform.knowledge.root``.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_artifact_stores() -> Mapping[str, Callable[..., Any]]:
    """Contribute artifact stores for distributed storage: ``{kind: factory}``, the ``kind`` of
    ``platform.storage.artifacts`` (``local``, ``s3``).

    ``factory(settings)`` gets that section's model and returns an (unopened)
    :class:`~berth.storage.artifacts.ArtifactStore`.

    Called once at host start-up in distributed mode. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_storage_migrations() -> Mapping[str, StorageMigrator]:
    """Contribute schema migrations for storage kinds whose stores live in a database server: ``{kind: migrate}``.

    ``migrate(dsn, progress)`` (a :class:`~berth.storage.backend.StorageMigrator`) connects to the kind's database,
    applies every pending migration in order, calls ``progress(version, status)`` for each step and returns the
    versions it applied (none when the schema was current). It raises ``ConnectionError`` (or a subclass) with a
    message naming the server, never its password, when the server cannot be reached.

    :return: a mapping of storage kind (``platform.storage.kind``) to its migrator.

    Called by ``berth migrate``; a kind without a migrator (``embedded``) has nothing to migrate. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_model_providers() -> Mapping[str, Callable[..., Any]]:
    """Contribute model providers (``anthropic``, ``openai-compatible``, ``scripted``): ``{name: factory}``.

    :return: a mapping of provider name (as used in ``models.*.provider``) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_exec_backends() -> Mapping[str, Callable[..., Any]]:
    """Contribute isolated-execution backends (``local``, ``docker``, ``fargate``): ``{name: factory}``.

    :return: a mapping of backend name (as used in exec profiles) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_tool_packs() -> Mapping[str, Callable[..., Any]]:
    """Contribute tool packs that bundles enable by id (``web``, ``exec``): ``{pack_id: factory}``.

    :return: a mapping of pack id to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


@hookspec
def berth_embedders() -> Mapping[str, Callable[..., Any]]:
    """Contribute embedders for memory search: ``{name: factory}``.

    :return: a mapping of embedder name (``platform.embedder.provider``) to factory.

    Called once at host start-up. Not firstresult.
    """
    raise NotImplementedError


# -- bundle hooks ------------------------------------------------------------------------------


@hookspec(firstresult=True)
def berth_bundle() -> BundleInfo:
    """Say who the bundle is: ``BundleInfo(id, version, title, description, props_model)``.

    Required. ``id`` must equal the bundle's id in ``bundles.yaml``.

    :return: the bundle's :class:`~berth.BundleInfo`.

    firstresult. Called first when a generation is loaded, before any other bundle hook.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def berth_agent(ctx: BundleContext) -> AgentSpec | None:
    """Define the bundle's agent: instructions, model role, react overrides, channels, allowed tools.

    :param ctx: the bundle context of the scope the agent serves.
    :return: an :class:`~berth.AgentSpec`; a bundle without it serves no chat.

    firstresult. Called when a generation is validated and when a turn starts.
    """
    raise NotImplementedError


@hookspec
def berth_tools(ctx: BundleContext) -> Sequence[object] | BundleTools:
    """Contribute the bundle's tools descriptor.

    Items are ``@tool`` functions (ids ``<alias>.<function>``, the alias being the bundle id unless a
    :class:`~berth.tools.contributions.BundleTools` names another), ``ToolPack(id="web")`` references and
    ``McpServer(...)`` configurations.

    :param ctx: the bundle context (props may enable or configure tools).
    :return: a list of items, or ``BundleTools(alias=..., items=[...])``.

    Called when a generation is validated (the catalog must build) and per scope at turn time. Results
    of several implementations in one bundle are concatenated.
    """
    raise NotImplementedError


@hookspec
def berth_skills(ctx: BundleContext) -> Sequence[Skill | str]:
    """Contribute skills: :class:`~berth.Skill` objects or folders holding a ``SKILL.md``.

    :param ctx: the bundle context; relative folders are resolved with ``ctx.path``.
    :return: skills addressed as ``sk:<skill id>``.

    Called when a generation is validated (every skill must parse). Results are concatenated.
    """
    raise NotImplementedError


@hookspec
def berth_knowledge(ctx: BundleContext) -> Sequence[KnowledgeSpace]:
    """Contribute knowledge spaces, indexed on load and re-indexed when their inputs change.

    :param ctx: the bundle context.
    :return: :class:`~berth.KnowledgeSpace` objects, read as ``ks:<space>/<path>``.

    Called when a generation is validated. Results are concatenated.
    """
    raise NotImplementedError


@hookspec
def berth_widgets(ctx: BundleContext) -> Sequence[Widget]:
    """Contribute UI widgets, served under ``/v1/{tenant}/{project}/bundles/{bundle}/widgets/{alias}/…``.

    :param ctx: the bundle context.
    :return: :class:`~berth.Widget` objects; their files must exist.

    Called when a generation is validated. Results are concatenated.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def berth_routes(ctx: BundleContext) -> APIRouter | None:
    """Contribute authenticated HTTP routes, mounted under ``/v1/{tenant}/{project}/bundles/{bundle}/ops/``.

    :param ctx: the bundle context.
    :return: a FastAPI ``APIRouter``.

    firstresult. Called when the API mounts the bundle's current generation.
    """
    raise NotImplementedError


@hookspec
async def berth_on_load(ctx: BundleContext) -> None:
    """Prepare the generation (open clients, warm caches). A failure aborts the generation.

    :param ctx: the bundle-wide context (no tenant/project).

    Awaited during validation, bounded by the host's load timeout; the previous generation keeps
    serving if it raises or times out.
    """
    raise NotImplementedError


@hookspec
async def berth_on_unload(ctx: BundleContext) -> None:
    """Release what ``berth_on_load`` acquired.

    :param ctx: the bundle-wide context.

    Awaited when a replaced generation's last in-flight turn ends (or at shutdown). Errors are logged.
    """
    raise NotImplementedError


@hookspec
async def berth_before_turn(ctx: BundleContext, turn: object) -> None:
    """Look at (or add blocks to) a turn before its first round; raise to veto it with a clear error.

    :param ctx: the context of the turn's scope.
    :param turn: the turn being started.

    Awaited by the runtime at the start of every turn served by this generation.
    """
    raise NotImplementedError


@hookspec
async def berth_after_turn(ctx: BundleContext, turn: object, result: object) -> None:
    """Observe a finished turn (feedback, metrics, follow-up work).

    :param ctx: the context of the turn's scope.
    :param turn: the finished turn.
    :param result: its result.

    Awaited by the runtime after a turn is persisted. Errors are logged, never fail the turn.
    """
    raise NotImplementedError
