"""What a bundle contributes, as typed records (re-exported from :mod:`berth` for bundle authors)."""

from berth.bundle.context import BundleContext
from berth.bundle.info import AgentSpec, BundleInfo
from berth.bundle.knowledge import (
    DocumentFolder,
    GitRepository,
    KnowledgeDocument,
    KnowledgeSpace,
    MarkdownFolder,
    SourceTree,
)
from berth.bundle.skills import Skill
from berth.bundle.widgets import Widget

__all__ = [
    "AgentSpec",
    "BundleContext",
    "BundleInfo",
    "DocumentFolder",
    "GitRepository",
    "KnowledgeDocument",
    "KnowledgeSpace",
    "MarkdownFolder",
    "Skill",
    "SourceTree",
    "Widget",
]
