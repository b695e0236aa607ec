"""Knowledge spaces: documents a bundle makes readable as ``ks:<space>/<path>`` and searchable."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class KnowledgeDocument:
    """One indexed document: its path inside the space, title and text."""

    path: str
    title: str
    text: str


@runtime_checkable
class KnowledgeIndexer(Protocol):
    """Produces a space's documents; ``fingerprint`` changes when its inputs change."""

    def documents(self) -> Iterable[KnowledgeDocument]:
        """Every document of the space."""
        ...

    def fingerprint(self) -> str:
        """A value that changes whenever the documents would (to know when to re-index)."""
        ...


class MarkdownFolder:
    """An indexer over the ``*.md`` files of a folder (recursively); the title is the first heading."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)

    def documents(self) -> Iterable[KnowledgeDocument]:
        """Every markdown file, sorted by path."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"knowledge folder {self.folder} does not exist")
        for path in sorted(self.folder.rglob("*.md")):
            text = path.read_text(encoding="utf-8")
            title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), path.stem)
            yield KnowledgeDocument(path.relative_to(self.folder).as_posix(), title, text)

    def fingerprint(self) -> str:
        """Paths, sizes and modification times of the markdown files."""
        if not self.folder.is_dir():
            return "missing"
        parts = [
            f"{p.relative_to(self.folder)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
            for p in sorted(self.folder.rglob("*.md"))
        ]
        return "|".join(parts)


class KnowledgeSpace(BaseModel):
    """A named knowledge space and the indexer that fills it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    indexer: KnowledgeIndexer
    description: str = ""
