"""Berth: a host for AI agent bundles.

This module re-exports what bundle authors use; everything else lives in the subpackages named in
``docs/architecture.md``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("berth-platform")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

from berth.bundle import (
    AgentSpec,
    BundleContext,
    BundleInfo,
    KnowledgeDocument,
    KnowledgeSpace,
    MarkdownFolder,
    Skill,
    Widget,
)
from berth.hooks import hookimpl
from berth.tools.contributions import BundleTools, McpServer, ToolPack
from berth.tools.spec import tool

__all__ = [
    "AgentSpec",
    "BundleContext",
    "BundleInfo",
    "BundleTools",
    "KnowledgeDocument",
    "KnowledgeSpace",
    "MarkdownFolder",
    "McpServer",
    "Skill",
    "ToolPack",
    "Widget",
    "__version__",
    "hookimpl",
    "tool",
]
