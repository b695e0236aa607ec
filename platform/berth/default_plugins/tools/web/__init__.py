"""The ``web`` tool pack: ``web.fetch`` (read one page as text) and ``web.search`` (a pluggable backend).

A bundle enables it with ``ToolPack(id="web", options={...})`` in ``berth_tools``; the options are
described in ``docs/tools.md`` and :mod:`berth.default_plugins.tools.web.options`.

This module is the plugin the host loads at start-up: the search types are imported on first use (PEP 562).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from berth.default_plugins.tools.web.pack import (
    NO_SEARCH_BACKEND,
    PACK_ID,
    SEARCH_BACKENDS,
    build_web_tools,
    make_web_pack,
)
from berth.hooks import hookimpl
from berth.tools.packs import ToolPackFactory

if TYPE_CHECKING:
    from berth.default_plugins.tools.web.search import SearchBackend, SearchBackendFactory, SearchHit

_SEARCH_NAMES = frozenset({"SearchBackend", "SearchBackendFactory", "SearchHit"})


def __getattr__(name: str) -> Any:
    """The search types, from :mod:`berth.default_plugins.tools.web.search` on first use."""
    if name not in _SEARCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from berth.default_plugins.tools.web import search

    value = getattr(search, name)
    globals()[name] = value
    return value


__all__ = [
    "NO_SEARCH_BACKEND",
    "PACK_ID",
    "SEARCH_BACKENDS",
    "SearchBackend",
    "SearchBackendFactory",
    "SearchHit",
    "berth_tool_packs",
    "build_web_tools",
    "make_web_pack",
]


@hookimpl
def berth_tool_packs() -> Mapping[str, ToolPackFactory]:
    """Contribute the ``web`` pack."""
    return {PACK_ID: make_web_pack()}
