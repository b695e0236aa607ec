"""Knowledge spaces: files a bundle makes searchable (``react.search_knowledge``) and readable as
``ks:<space>/<path>[#<anchor>]``.

A bundle's ``berth_knowledge(ctx)`` returns :class:`KnowledgeSpace` objects, each naming an indexer:
:class:`~berth.knowledge.indexers.DocumentFolder`, :class:`~berth.knowledge.indexers.MarkdownFolder`,
:class:`~berth.knowledge.indexers.SourceTree`, :class:`~berth.knowledge.indexers.GitRepository`, or any
object with ``files()`` and ``chunk(file, data)`` (see :mod:`berth.knowledge.indexers`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from berth.knowledge.indexers import (
    DocumentFolder,
    DocumentIndexer,
    GitRepository,
    KnowledgeDocument,
    KnowledgeIndexer,
    MarkdownFolder,
    SourceTree,
    as_indexer,
)

__all__ = [
    "DocumentFolder",
    "DocumentIndexer",
    "GitRepository",
    "KnowledgeDocument",
    "KnowledgeIndexer",
    "KnowledgeSpace",
    "MarkdownFolder",
    "SourceTree",
]


class KnowledgeSpace(BaseModel):
    """A named knowledge space and the indexer that fills it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    indexer: Any
    description: str = ""

    @field_validator("indexer")
    @classmethod
    def _is_an_indexer(cls, value: Any) -> Any:
        try:
            as_indexer(value)
        except TypeError as error:
            raise ValueError(str(error)) from None
        return value
