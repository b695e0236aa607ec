"""The callable tools of one bundle in one scope: its ``@tool`` functions and its tool packs' tools.

Both the runtime (a turn's catalog) and the MCP endpoint (a bundle served as an MCP server) start from
here, so a tool has the same id, schema and behaviour wherever it is called.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.bundle.context import BundleContext
from berth.tools.catalog import build_catalog
from berth.tools.contributions import McpServer, merge_tool_contributions
from berth.tools.packs import EXEC_PACK, RUNTIME_PACKS, PackContext, ToolPackFactory
from berth.tools.spec import CoroutineRunner, ThreadRunner, ToolSpec

__all__ = ["EXEC_PACK", "ScopedTools", "tools_in_scope"]


@dataclass(frozen=True)
class ScopedTools:
    """Tool specs by id, tools listed as inactive (id → reason), the MCP servers the bundle consumes, and the
    options of the runtime packs it enables."""

    specs: dict[str, ToolSpec] = field(default_factory=dict)
    inactive: dict[str, str] = field(default_factory=dict)
    servers: list[McpServer] = field(default_factory=list)
    runtime_packs: dict[str, dict[str, Any]] = field(default_factory=dict)


def tools_in_scope(
    bundle_id: str,
    contributions: Iterable[Any],
    context: BundleContext,
    tool_packs: Mapping[str, ToolPackFactory],
    runner: CoroutineRunner | None = None,
    threads: ThreadRunner | None = None,
) -> ScopedTools:
    """Build the catalog from ``berth_tools`` results and instantiate its tool packs for ``context``'s scope.

    ``runner`` runs the bundle's own async tools (its generation's loop); tool packs are host code and run on
    the caller's loop. ``threads`` runs every sync tool of the scope, the bundle's and its packs' (the bundle's
    tool threads for ``context``'s tenant, :mod:`berth.tools.threads`), never the default executor storage uses.
    """
    scoped = ScopedTools()
    for entry in build_catalog(bundle_id, merge_tool_contributions(contributions)):
        if entry.spec is not None:
            scoped.specs[entry.tool_id] = entry.spec.running_on(runner, threads)
        elif entry.server is not None:
            scoped.servers.append(entry.server)
        elif entry.pack is not None and entry.pack.id in RUNTIME_PACKS:
            scoped.runtime_packs[entry.pack.id] = dict(entry.pack.options)
        elif entry.pack is not None:
            factory = tool_packs.get(entry.pack.id)
            if factory is None:
                scoped.inactive[f"{entry.pack.id}.*"] = "tool pack not installed on this host"
                continue
            pack = factory(
                PackContext(
                    pack_id=entry.pack.id,
                    options=entry.pack.options,
                    bundle_id=bundle_id,
                    tenant=context.tenant,
                    project=context.project,
                    settings=context.settings,
                    secret=context.secret,
                )
            )
            scoped.specs.update({f"{entry.pack.id}.{spec.name}": spec.running_on(None, threads) for spec in pack.tools})
            scoped.inactive.update(pack.inactive)
    return scoped
