"""Where a knowledge space's index lives: the :class:`SpaceStore` protocol and what its implementations share.

* :class:`~berth.knowledge.sqlite_store.SqliteSpaceStore` — embedded: one SQLite database (FTS5) per space.
* ``berth_postgres.knowledge.PostgresSpaceStore`` — distributed (``plugins/postgres``): PostgreSQL tables
  (``tsvector``), shared by every host, locked with an advisory lock.

A store keeps each file's record (change key, content hash, status, reason), the chunks with their
embeddings, a lexical index over them and a few ``meta`` values (the version, the embedder, the last error,
a running refresh's progress). :meth:`SpaceStore.apply` writes one refresh in ONE transaction, so readers
keep the previous version until it commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from berth.knowledge.chunks import Chunk

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from berth.knowledge.filters import ChunkFilter

__all__ = [
    "BULKY_META",
    "ChunkRow",
    "FileRecord",
    "FileUpdate",
    "KnowledgeStoresFactory",
    "SpaceStore",
    "SpaceStoreFactory",
    "VectorMatrix",
    "identifier_words",
    "indexed_fields",
    "query_words",
]

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
"""A word as the lexical index tokenizes it: letters and digits (``snake_case`` is two words)."""
_QUERY_SEPARATORS: Final = re.compile(r"[\s\x00-\x1f\x7f!-/:-@\[-`{-~]+")
"""White space, control characters (NUL ends a string to SQLite) and ASCII punctuation."""
_CAMEL: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
"""The word parts of a camel-case identifier (``HTTPServerError`` → ``HTTP``, ``Server``, ``Error``); digits
are no part of their own (``w02870`` is not split)."""
_STOPWORDS: Final = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "in", "is",
     "it", "its", "me", "my", "of", "on", "or", "should", "so", "that", "the", "this", "to", "was", "what", "when",
     "where", "which", "who", "why", "will", "with", "you", "your"}
)  # fmt: skip


BULKY_META: Final = "dropped_keys"
"""The one ``meta`` value :meth:`SpaceStore.meta` leaves out (it can be large: searches read ``meta`` often);
:meth:`SpaceStore.meta_value` reads it."""


@dataclass(frozen=True, slots=True)
class FileRecord:
    """What the index knows about one file."""

    path: str
    stat: str
    sha: str
    status: str
    reason: str | None
    chunks: int


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """One file's new state for :meth:`SpaceStore.apply`: its record and chunks (with their vectors)."""

    record: FileRecord
    chunks: Sequence[Chunk] = ()
    vectors: Sequence[bytes | None] = ()


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A stored chunk."""

    id: int
    path: str
    anchor: str
    title: str
    text: str
    first_line: int
    last_line: int
    kind: str


@dataclass(frozen=True)
class VectorMatrix:
    """Every chunk's embedding of one index version, as one matrix of unit rows (float32)."""

    version: int
    ids: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32]

    @classmethod
    def build(cls, version: int, rows: Sequence[tuple[int, bytes]]) -> VectorMatrix:
        """From ``(chunk id, float32 bytes)`` rows."""
        import numpy as np  # with the first vector search: loading a space's index does not need numpy

        if not rows:
            return cls(version, np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32))
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        # one buffer of every row's bytes, viewed as the matrix: 3x faster than stacking a small array per row
        matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), -1)
        return cls(version, ids, matrix)

    def nearest(
        self, vector: npt.NDArray[np.float32], count: int, *, among: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``count`` rows most similar to ``vector``: (id, cosine), best first; only rows of the ids ``among``
        when given."""
        import numpy as np

        if self.matrix.size == 0 or vector.shape[0] != self.matrix.shape[1]:
            return []
        ids, matrix = self.ids, self.matrix
        if among is not None:
            kept = np.isin(ids, np.fromiter(among, dtype=np.int64, count=len(among)))
            ids, matrix = ids[kept], matrix[kept]
            if not len(ids):
                return []
        norm = float(np.linalg.norm(vector)) or 1.0
        scores = matrix @ (vector / norm)
        count = min(count, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return [(int(ids[i]), float(scores[i])) for i in top[np.argsort(-scores[top])]]


def camel_parts(word: str) -> list[str]:
    """The parts of a camel-case ``word`` of two letters or more (``KnowledgeIndex`` → ``Knowledge``,
    ``Index``); nothing for a word that is not camel case."""
    parts = [part for part in _CAMEL.findall(word) if len(part) > 1]
    return parts if len(parts) > 1 else []


def identifier_words(text: str) -> str:
    """The parts of the camel-case identifiers in ``text`` (``KnowledgeIndex`` → ``Knowledge Index``), so a
    lexical query in plain words finds them (``snake_case`` is split by the tokenizer already)."""
    # each word once, in the order of its first occurrence: a contentless index deletes a row by restating
    # exactly what it indexed, so this must not depend on set order (PYTHONHASHSEED)
    return " ".join(part for word in dict.fromkeys(_WORD.findall(text)) for part in camel_parts(word))


def query_words(query: str) -> list[str]:
    """The words a lexical query ORs together: split at white space and ASCII punctuation, lower-cased,
    stopwords dropped (unless nothing else is left), camel-case identifiers also split into their parts; each
    once, in order. Each is a phrase the index's own tokenizer splits further, exactly as it split the text
    (so accents, marks and scripts are handled one way on both sides)."""
    words = [word for word in _QUERY_SEPARATORS.split(query) if any(ch.isalnum() for ch in word)]
    kept = [w for w in words if w.lower() not in _STOPWORDS] or words
    expanded = [w.lower() for w in kept]
    for word in kept:
        expanded.extend(part.lower() for part in camel_parts(word))
    return list(dict.fromkeys(expanded))


def indexed_fields(title: str, path: str, text: str) -> tuple[str, str, str]:
    """What the lexical index holds of a chunk: its title, path and text with the parts of their camel-case
    identifiers (deterministic: the SQLite index deletes a row by restating exactly these values)."""
    return (
        title + " " + identifier_words(title),
        path_words(path),
        text + "\n" + identifier_words(title + " " + text),
    )


def path_words(path: str) -> str:
    """A file path as words for the lexical index (``store/sqlite_store.py`` → ``store sqlite store py``)."""
    return path.replace("/", " ").replace("_", " ").replace(".", " ").replace("-", " ")


class SpaceStore(Protocol):
    """The persistent index of one space."""

    async def meta(self) -> dict[str, str]:
        """Every ``meta`` value (``version``, ``embedder``, ``error``, ``indexed_at``, ``progress``) but
        :data:`BULKY_META`."""
        ...

    async def meta_value(self, key: str) -> str | None:
        """One ``meta`` value (None: not set), :data:`BULKY_META` included."""
        ...

    async def version(self) -> int:
        """The committed index version (0: never indexed)."""
        ...

    async def files(self) -> dict[str, FileRecord]:
        """Every file record, by path."""
        ...

    async def counts(self) -> dict[str, int]:
        """Files by status, and ``chunks``: the number of chunks."""
        ...

    async def skipped(self, limit: int = 50) -> list[tuple[str, str, str]]:
        """Files skipped or degraded, with their reasons: (path, status, reason), by path."""
        ...

    async def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks with these ids."""
        ...

    async def chunks_of(self, path: str) -> list[ChunkRow]:
        """The chunks of one file, in file order."""
        ...

    async def texts(self) -> list[tuple[str, str]]:
        """Every chunk's (path, text) (to find the chunks a refresh would add again)."""
        ...

    async def lexical(self, query: str, limit: int, *, within: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """Chunk ids ranked by a lexical score for ``query`` (title and path weigh more than text), best first;
        only chunks ``within`` lets through (:class:`~berth.knowledge.filters.ChunkFilter`), when given."""
        ...

    async def nearest(
        self, vector: npt.NDArray[np.float32], limit: int, *, within: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """Chunk ids ranked by cosine similarity to ``vector``: (id, cosine), best first; only chunks ``within``
        lets through, when given."""
        ...

    async def matching(self, within: ChunkFilter, limit: int) -> list[int]:
        """The ids of the chunks ``within`` lets through, at most ``limit`` (-1: all), in path and line order."""
        ...

    async def set_progress(self, progress: dict[str, Any] | None) -> None:
        """Record (or clear) a running refresh's progress, for ``berth knowledge status`` in other processes."""
        ...

    async def apply(
        self,
        updates: Sequence[FileUpdate],
        *,
        removed: Iterable[str],
        touched: Sequence[FileRecord],
        meta: dict[str, str],
    ) -> int:
        """Write one refresh atomically and return the new version.

        :param updates: files whose chunks are replaced (new or changed files, and skipped ones).
        :param removed: paths of files that are gone.
        :param touched: records whose change key changed but content did not (no chunk is touched).
        :param meta: ``meta`` values to set (e.g. the embedder's name; an empty value clears a key).
        """
        ...

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """Hold the space's refresh lock (across processes, and hosts where the store is shared)."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store may be opened again by using it."""
        ...


class SpaceStoreFactory(Protocol):
    """Opens the store of one space of one bundle (what a knowledge service is built with)."""

    def __call__(self, bundle_id: str, space: str, /) -> SpaceStore:
        """The (lazily connecting) store of ``space`` of ``bundle_id``."""
        ...


class KnowledgeStoresFactory(Protocol):
    """What ``berth_knowledge_stores()`` maps a storage kind to: builds the space stores of a deployment from its
    resolved connections (for ``distributed``: :class:`~berth.host.connections.DistributedConnections`)."""

    def __call__(self, connections: Any, /) -> SpaceStoreFactory:
        """The space-store factory (it may hold a pool: an ``aclose()`` it has is called at shutdown)."""
        ...
