"""Berth: a host for AI agent bundles.

This module re-exports what bundle authors use; everything else lives in the subpackages named in
``docs/architecture.md``. The names are imported on first use (PEP 562), so ``import berth`` (and with it
every ``berth.*`` import, such as the ``berth`` command's) does not pay for pydantic and the bundle API.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from berth.bundle import (
        AgentSpec,
        BundleContext,
        BundleInfo,
        DocumentFolder,
        GitRepository,
        KnowledgeDocument,
        KnowledgeSpace,
        MarkdownFolder,
        Skill,
        SourceTree,
        Widget,
    )
    from berth.hooks import hookimpl
    from berth.tools.calls import ToolCall, current_call
    from berth.tools.contributions import BundleTools, McpServer, ToolPack
    from berth.tools.spec import tool

_EXPORTS: dict[str, str] = {
    "AgentSpec": "berth.bundle",
    "BundleContext": "berth.bundle",
    "BundleInfo": "berth.bundle",
    "DocumentFolder": "berth.bundle",
    "GitRepository": "berth.bundle",
    "KnowledgeDocument": "berth.bundle",
    "KnowledgeSpace": "berth.bundle",
    "MarkdownFolder": "berth.bundle",
    "Skill": "berth.bundle",
    "SourceTree": "berth.bundle",
    "Widget": "berth.bundle",
    "hookimpl": "berth.hooks",
    "ToolCall": "berth.tools.calls",
    "current_call": "berth.tools.calls",
    "BundleTools": "berth.tools.contributions",
    "McpServer": "berth.tools.contributions",
    "ToolPack": "berth.tools.contributions",
    "tool": "berth.tools.spec",
}
"""Each re-exported name and the module it comes from."""


def _installed_version() -> str:
    """The installed distribution's version, read on first use (the backport the plugin discovery uses: by the
    time a host asks, its path caches are warm and the lookup costs a millisecond, the standard library's tens)."""
    from importlib_metadata import PackageNotFoundError, version

    try:
        return version("berth-platform")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    """Import a re-exported name (or read ``__version__``) on first use and keep it in the module."""
    if name == "__version__":
        value: Any = _installed_version()
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazily imported ones included."""
    return sorted({*globals(), *_EXPORTS, "__version__"})


__all__ = [
    "AgentSpec",
    "BundleContext",
    "BundleInfo",
    "BundleTools",
    "DocumentFolder",
    "GitRepository",
    "KnowledgeDocument",
    "KnowledgeSpace",
    "MarkdownFolder",
    "McpServer",
    "Skill",
    "SourceTree",
    "ToolCall",
    "ToolPack",
    "Widget",
    "__version__",
    "current_call",
    "hookimpl",
    "tool",
]
