"""The indexers a bundle's ``berth_knowledge`` returns: what files a space has and how each is chunked.

* :class:`DocumentFolder` — markdown, text, HTML and PDF files, chunked by headings (pages for PDF).
* :class:`MarkdownFolder` — a :class:`DocumentFolder` of ``*.md`` files only.
* :class:`SourceTree` — a code base: source files chunked by definitions (tree-sitter), documents by
  headings, any other text file by line windows.
* :class:`GitRepository` — a :class:`SourceTree` (or documents) of a git repository at a ref, checked out
  once into a cache shared by every process on the machine.

Any object with ``files()`` and ``chunk(file, data)`` is an indexer (:class:`KnowledgeIndexer`). An
older-style indexer with ``documents()`` and ``fingerprint()`` (:class:`DocumentIndexer`) still works:
each document becomes a file chunked as markdown (:class:`DocumentsAsFiles`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from berth.knowledge.chunks import Chunk
from berth.knowledge.code import chunk_code
from berth.knowledge.git import Checkout, GitError, checkout
from berth.knowledge.sources import Exclusion, FileTree, SourceFile
from berth.knowledge.text import DOCUMENT_SUFFIXES, chunk_document, chunk_markdown, decode_text

__all__ = [
    "DOCUMENT_PATTERNS",
    "DocumentFolder",
    "DocumentIndexer",
    "DocumentsAsFiles",
    "FolderIndexer",
    "GitRepository",
    "KnowledgeDocument",
    "KnowledgeIndexer",
    "ListingError",
    "MarkdownFolder",
    "SourceTree",
    "as_indexer",
]

DOCUMENT_PATTERNS: tuple[str, ...] = tuple(f"*{suffix}" for suffix in DOCUMENT_SUFFIXES)

ChunkResult = tuple[list[Chunk], str | None]
"""A file's chunks and an optional note (why it was indexed in a degraded way, e.g. a parser failed)."""


class ListingError(Exception):
    """An indexer could not list its files at all (a missing folder, repository or ref); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class KnowledgeDocument:
    """One document of an older-style indexer: its path inside the space, title and text."""

    path: str
    title: str
    text: str


@runtime_checkable
class KnowledgeIndexer(Protocol):
    """Lists a space's files and chunks one file at a time."""

    def files(self) -> Iterable[SourceFile]:
        """Every file of the space (raise :class:`ListingError` when there is nothing to list)."""
        ...

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """``file``'s chunks from its bytes; raise :class:`~berth.knowledge.chunks.SkipFile` to skip it."""
        ...


@runtime_checkable
class DocumentIndexer(Protocol):
    """The older indexer shape: whole documents and a fingerprint of all of them."""

    def documents(self) -> Iterable[KnowledgeDocument]:
        """Every document of the space."""
        ...

    def fingerprint(self) -> str:
        """A value that changes whenever the documents would."""
        ...


class FolderIndexer:
    """The files of ``folder`` (recursively) matching ``include`` minus ``exclude``; subclasses chunk them.

    :param include: glob patterns of the files to index (on the relative path, or the name without a '/').
    :param exclude: glob patterns to leave out (``.git``, ``node_modules``, caches and build output always are).
    :param max_file_bytes: larger files are skipped with a recorded reason (default: ``platform.knowledge``'s).
    """

    default_include: tuple[str, ...] = ("*",)

    def __init__(
        self,
        folder: Path | str,
        *,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        max_file_bytes: int | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.tree = FileTree(self.folder, tuple(include or self.default_include), tuple(exclude))
        self.max_file_bytes = max_file_bytes
        self.exclusions: list[Exclusion] = []
        """What the last listing left out (folders with their file counts, other reasons with counts)."""

    def files(self) -> Iterator[SourceFile]:
        """Every matching file, sorted by path."""
        if not self.folder.is_dir():
            raise ListingError(f"folder {self.folder} does not exist")
        found, self.exclusions = self.tree.listing()
        return iter(found)

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """The file's chunks (each subclass says how)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.folder)!r})"


class DocumentFolder(FolderIndexer):
    """Markdown, text, HTML and PDF files under ``folder`` (recursively), chunked by headings (PDF: by page)."""

    default_include = DOCUMENT_PATTERNS

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """Sections of a document (pages of a PDF)."""
        return chunk_document(file.path, data), None


class MarkdownFolder(DocumentFolder):
    """The ``*.md`` files of a folder (recursively), chunked by headings."""

    def __init__(self, folder: Path | str, *, max_file_bytes: int | None = None) -> None:
        super().__init__(folder, include=("*.md",), max_file_bytes=max_file_bytes)

    def documents(self) -> Iterator[KnowledgeDocument]:
        """Every markdown file as one whole document (title: its first heading), sorted by path."""
        for file in self.files():
            text = decode_text(file.read(), file.path)
            title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), file.path)
            yield KnowledgeDocument(file.path, title, text)


class SourceTree(FolderIndexer):
    """A code base under ``folder``: code by definitions, documents by headings, other text by line windows
    (every file that is not hidden, unless ``include`` says otherwise)."""

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """Definitions of a source file, sections of a document, line windows of anything else."""
        return chunk_source_file(file.path, data)


def chunk_source_file(path: str, data: bytes) -> ChunkResult:
    """Chunk one file of a code base by its kind (a binary or undecodable file raises SkipFile)."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in DOCUMENT_SUFFIXES:
        return chunk_document(path, data), None
    text = decode_text(data, path)
    return chunk_code(path, text)


class GitRepository:
    """A git repository at ``ref`` (branch, tag or commit), indexed like a :class:`SourceTree`.

    The repository is fetched into a bare mirror and the commit exported once into
    ``<cache>/trees/<url key>/<commit>/``, under file locks, so several host processes index it once.
    ``cache_dir`` defaults to the host's knowledge folder (``<knowledge root>/git``).

    :param subdir: index only this folder of the repository.
    :param documents_only: chunk only documents (like :class:`DocumentFolder`), not code.
    :param fetch_interval_s: a refresh within this long of the last fetch lists the checkout it has (searches
        check their space every few seconds; the remote is asked at most this often).
    """

    def __init__(
        self,
        url: str,
        ref: str = "HEAD",
        *,
        subdir: str = "",
        include: Sequence[str] = ("*",),
        exclude: Sequence[str] = (),
        documents_only: bool = False,
        cache_dir: Path | str | None = None,
        max_file_bytes: int | None = None,
        fetch_interval_s: float = 300.0,
    ) -> None:
        self.url = url
        self.fetch_interval_s = fetch_interval_s
        self._fetched_at = float("-inf")
        self.ref = ref
        self.subdir = subdir.strip("/")
        self.include = tuple(DOCUMENT_PATTERNS if documents_only and include == ("*",) else include)
        self.exclude = tuple(exclude)
        self.documents_only = documents_only
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_file_bytes = max_file_bytes
        self.progress: Callable[[str], None] | None = None
        self.checked_out: Checkout | None = None
        self.exclusions: list[Exclusion] = []
        """What the last listing left out (folders with their file counts, other reasons with counts)."""

    def use_cache(self, cache_dir: Path) -> None:
        """Set the cache folder when the bundle did not choose one (the host calls this)."""
        if self.cache_dir is None:
            self.cache_dir = cache_dir

    def files(self) -> Iterator[SourceFile]:
        """Check the ref out (once per commit, machine-wide), then list its files."""
        if self.cache_dir is None:
            raise ListingError(f"git repository {self.url}: no cache folder (GitRepository(cache_dir=...))")
        if self.checked_out is None or time.monotonic() - self._fetched_at >= self.fetch_interval_s:
            try:
                self.checked_out = checkout(self.url, self.ref, self.cache_dir, progress=self.progress)
            except GitError as error:
                raise ListingError(error.reason) from None
            self._fetched_at = time.monotonic()
        root = self.checked_out.root / self.subdir if self.subdir else self.checked_out.root
        if not root.is_dir():
            raise ListingError(f"git repository {self.url}@{self.ref}: no folder '{self.subdir}'")
        found, self.exclusions = FileTree(root, self.include, self.exclude).listing()
        return iter(found)

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """As :class:`SourceTree` (or :class:`DocumentFolder` with ``documents_only``)."""
        if self.documents_only:
            return chunk_document(file.path, data), None
        return chunk_source_file(file.path, data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, {self.ref!r})"


class DocumentsAsFiles:
    """An older-style :class:`DocumentIndexer` seen as a :class:`KnowledgeIndexer`: one file per document,
    chunked as markdown (its stat key is the hash of its text, so changed documents re-index)."""

    def __init__(self, inner: DocumentIndexer) -> None:
        self.inner = inner

    def files(self) -> Iterator[SourceFile]:
        """One file per document."""
        for document in self.inner.documents():
            data = document.text.encode("utf-8")
            key = hashlib.sha256(data).hexdigest()[:32]
            yield SourceFile(document.path, key, len(data), data=data)

    def chunk(self, file: SourceFile, data: bytes) -> ChunkResult:
        """Sections of the document's markdown."""
        return chunk_markdown(file.path, decode_text(data, file.path)), None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


def as_indexer(candidate: object) -> KnowledgeIndexer:
    """``candidate`` as a :class:`KnowledgeIndexer` (wrapping an older-style one); TypeError otherwise."""
    if isinstance(candidate, KnowledgeIndexer):
        return candidate
    if isinstance(candidate, DocumentIndexer):
        return DocumentsAsFiles(candidate)
    raise TypeError(
        f"{type(candidate).__name__} is not a knowledge indexer: it needs files() and chunk(file, data) "
        "(or documents() and fingerprint())"
    )
