"""Tool packs: platform plugins that contribute tools a bundle enables by id (``ToolPack(id="web")``).

A plugin's ``berth_tool_packs()`` returns ``{pack_id: factory}``; the runtime calls
``factory(PackContext)`` per bundle generation and scope and gets the pack's tool specs. A pack's tool
ids are ``<pack_id>.<tool name>``. A tool that cannot work in this scope (no backend configured) is
listed in ``inactive`` with the reason, so ANNOUNCE can tell the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.config.secrets import Secret
from berth.tools.spec import ToolSpec


@dataclass(frozen=True)
class PackContext:
    """What a pack factory gets: its options from the bundle's ``ToolPack(id, options)``, the scope's
    settings and secret reader."""

    pack_id: str
    options: Mapping[str, Any]
    bundle_id: str
    tenant: str | None
    project: str | None
    settings: Any
    secret: Callable[[str], Secret] = field(repr=False)


@dataclass(frozen=True)
class PackTools:
    """The tools a pack offers in one scope, and the ones it lists as inactive (id → reason)."""

    tools: list[ToolSpec]
    inactive: dict[str, str] = field(default_factory=dict)


ToolPackFactory = Callable[[PackContext], PackTools]

EXEC_PACK = "exec"
RUNTIME_PACKS = frozenset({EXEC_PACK})
"""Packs the runtime provides itself, because their tools need the running turn (``exec``: ``exec.python``
runs the ``code`` channel's program). No plugin registers them; a bundle enables them like any pack."""
