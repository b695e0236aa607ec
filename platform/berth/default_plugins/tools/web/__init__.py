"""The ``web`` tool pack: ``web.fetch`` (read one page as text) and ``web.search`` (a pluggable backend).

A bundle enables it with ``ToolPack(id="web", options={...})`` in ``berth_tools``; the options are
described in ``docs/tools.md`` and :mod:`berth.default_plugins.tools.web.options`.
"""

from __future__ import annotations

from collections.abc import Mapping

from berth.default_plugins.tools.web.pack import (
    NO_SEARCH_BACKEND,
    PACK_ID,
    SEARCH_BACKENDS,
    build_web_tools,
    make_web_pack,
)
from berth.default_plugins.tools.web.search import SearchBackend, SearchBackendFactory, SearchHit
from berth.hooks import hookimpl
from berth.tools.packs import ToolPackFactory

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
