"""The ``web`` tool pack: ``web.fetch`` (read one page as text) and ``web.search`` (a pluggable backend).

A bundle enables it with ``ToolPack(id="web", options={...})`` in ``berth_tools``; the options are
described in ``docs/tools.md`` and :mod:`berth.default_plugins.tools.web.options`.

This module is the plugin the host loads at start-up: it imports nothing of the pack until a bundle builds it, and
offers the pack's and the search module's names on first use (PEP 562).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.default_plugins.tools.web.pack import (
        NO_SEARCH_BACKEND,
        PACK_ID,
        SEARCH_BACKENDS,
        build_web_tools,
        make_web_pack,
    )
    from berth.default_plugins.tools.web.search import SearchBackend, SearchBackendFactory, SearchHit
    from berth.tools.packs import PackContext, PackTools, ToolPackFactory

WEB_PACK_ID = "web"
""":data:`berth.default_plugins.tools.web.pack.PACK_ID` (named here: registering the pack imports nothing)."""

_LAZY_NAMES = {
    **dict.fromkeys(("SearchBackend", "SearchBackendFactory", "SearchHit"), "search"),
    **dict.fromkeys(("NO_SEARCH_BACKEND", "PACK_ID", "SEARCH_BACKENDS", "build_web_tools", "make_web_pack"), "pack"),
}


def __getattr__(name: str) -> Any:
    """The pack's and the search module's names, imported on first use."""
    module_name = _LAZY_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


__all__ = [
    "NO_SEARCH_BACKEND",
    "PACK_ID",
    "SEARCH_BACKENDS",
    "WEB_PACK_ID",
    "SearchBackend",
    "SearchBackendFactory",
    "SearchHit",
    "berth_tool_packs",
    "build_web_tools",
    "make_web_pack",
    "web_pack",
]


def web_pack(ctx: PackContext) -> PackTools:
    """The ``web`` pack's tools for one bundle generation and scope, with the shipped search backends (the pack's
    module, with httpx and trafilatura behind it, is imported by the first bundle that enables the pack)."""
    from berth.default_plugins.tools.web.pack import make_web_pack

    return make_web_pack()(ctx)


@hookimpl
def berth_tool_packs() -> Mapping[str, ToolPackFactory]:
    """Contribute the ``web`` pack."""
    return {WEB_PACK_ID: web_pack}
