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
