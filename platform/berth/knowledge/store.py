"""The persistent index of one knowledge space: a SQLite database (WAL) per space.

Tables: ``files`` (each file's stat key, content hash, status and the reason it was skipped), ``chunks``
(text, line range and embedding as float32 bytes), ``chunks_fts`` (FTS5, Porter-stemmed, over title and
text) and ``meta`` (the index version, the embedder that made the vectors, progress of a running index).

A refresh writes everything it changed in ONE transaction (:meth:`SpaceStore.apply`): readers keep
seeing the previous version until it commits, so a space stays searchable while it re-indexes.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from berth.knowledge.chunks import Chunk

__all__ = ["ChunkRow", "FileRecord", "FileUpdate", "SpaceStore", "VectorMatrix", "fts_query", "identifier_words"]

SCHEMA_VERSION: Final = 1
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    stat TEXT NOT NULL,
    sha TEXT NOT NULL,
    status TEXT NOT NULL,           -- indexed | degraded | skipped
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    anchor TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    first_line INTEGER NOT NULL,
    last_line INTEGER NOT NULL,
    kind TEXT NOT NULL,
    vector BLOB,
    UNIQUE (path, anchor)
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path, first_line);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(title, path, body, tokenize = 'porter unicode61');
"""
_COLUMNS: Final = "id, path, anchor, title, text, first_line, last_line, kind"
_WORD: Final = re.compile(r"\w+", re.UNICODE)
_CAMEL: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "should",
        "so",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


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
    """Every chunk's embedding of one index version, as one normalized float32 matrix."""

    version: int
    ids: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32]


def identifier_words(text: str) -> str:
    """The parts of the code identifiers in ``text`` (``KnowledgeIndex`` → ``Knowledge Index``), so a
    lexical query in plain words finds them; words already plain are not repeated."""
    parts = []
    for word in set(_WORD.findall(text)):
        pieces = _CAMEL.findall(word)
        if len(pieces) > 1:
            parts.extend(pieces)
    return " ".join(parts)


def fts_query(query: str) -> str | None:
    """An FTS5 expression for a free-text query: its words (stopwords dropped unless nothing else is
    left), each quoted, joined by OR; None when the query has no word at all."""
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in _STOPWORDS] or words
    for word in list(kept):
        kept.extend(p.lower() for p in _CAMEL.findall(word) if p.lower() != word)
    if not kept:
        return None
    unique = list(dict.fromkeys(kept))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in unique)


class SpaceStore:
    """The SQLite index of one space at ``path`` (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._vectors: VectorMatrix | None = None

    @property
    def _reader(self) -> sqlite3.Connection:
        """The reading connection, opened (and the schema made) on first use."""
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.executescript(_SCHEMA)
        return connection

    def close(self) -> None:
        """Close the reading connection."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # -- reading -------------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        """Every ``meta`` value."""
        with self._lock:
            return dict(self._reader.execute("SELECT key, value FROM meta").fetchall())

    def version(self) -> int:
        """The committed index version (0: never indexed)."""
        return int(self.meta().get("version", "0"))

    def files(self) -> dict[str, FileRecord]:
        """Every file record, by path."""
        with self._lock:
            rows = self._reader.execute("SELECT path, stat, sha, status, reason, chunks FROM files").fetchall()
        return {row[0]: FileRecord(*row) for row in rows}

    def counts(self) -> dict[str, int]:
        """Files by status and the number of chunks."""
        with self._lock:
            by_status = dict(self._reader.execute("SELECT status, count(*) FROM files GROUP BY status").fetchall())
            (chunks,) = self._reader.execute("SELECT count(*) FROM chunks").fetchone()
        return {**by_status, "chunks": chunks}

    def skipped(self, limit: int = 50) -> list[tuple[str, str, str]]:
        """Files skipped or degraded, with their reasons: (path, status, reason)."""
        with self._lock:
            rows = self._reader.execute(
                "SELECT path, status, reason FROM files WHERE status != 'indexed' ORDER BY path LIMIT ?", (limit,)
            ).fetchall()
        return [(p, s, r or "") for p, s, r in rows]

    def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks with these ids."""
        wanted = list(ids)
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        with self._lock:
            query = f"SELECT {_COLUMNS} FROM chunks WHERE id IN ({marks})"  # noqa: S608 - '?' marks only
            rows = self._reader.execute(query, wanted).fetchall()
        return {row[0]: ChunkRow(*row) for row in rows}

    def chunks_of(self, path: str) -> list[ChunkRow]:
        """The chunks of one file, in file order."""
        with self._lock:
            query = f"SELECT {_COLUMNS} FROM chunks WHERE path = ? ORDER BY first_line, id"  # noqa: S608
            rows = self._reader.execute(query, (path,)).fetchall()
        return [ChunkRow(*row) for row in rows]

    def lexical(self, query: str, limit: int) -> list[tuple[int, float]]:
        """Chunk ids ranked by BM25 over title (weighted 3), path (2) and text: (id, score), best first."""
        expression = fts_query(query)
        if expression is None:
            return []
        with self._lock:
            rows = self._reader.execute(
                "SELECT rowid, -bm25(chunks_fts, 3.0, 2.0, 1.0) AS score FROM chunks_fts WHERE chunks_fts MATCH ? "
                "ORDER BY bm25(chunks_fts, 3.0, 2.0, 1.0) LIMIT ?",
                (expression, limit),
            ).fetchall()
        return [(int(rowid), float(score)) for rowid, score in rows]

    def vectors(self) -> VectorMatrix:
        """The embeddings of the committed version (loaded once per version, then kept)."""
        version = self.version()
        cached = self._vectors
        if cached is not None and cached.version == version:
            return cached
        with self._lock:
            rows = self._reader.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL").fetchall()
        if rows:
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            matrix = np.vstack([np.frombuffer(row[1], dtype=np.float32) for row in rows])
        else:
            ids, matrix = np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        self._vectors = VectorMatrix(version, ids, matrix)
        return self._vectors

    # -- writing -------------------------------------------------------------------------------------

    def set_progress(self, progress: dict[str, Any] | None) -> None:
        """Record (or clear) the progress of a running index, for ``berth knowledge status`` elsewhere."""
        with self._lock:
            if progress is None:
                self._reader.execute("DELETE FROM meta WHERE key = 'progress'")
            else:
                self._reader.execute(
                    "INSERT INTO meta (key, value) VALUES ('progress', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (json.dumps(progress),),
                )

    def apply(
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
        :param touched: records whose stat key changed but content did not (no chunk is touched).
        :param meta: ``meta`` values to set (e.g. the embedder's name).
        """
        writer = self._connect()
        try:
            writer.execute("BEGIN IMMEDIATE")
            now = time.time()
            for path in [*removed, *(u.record.path for u in updates)]:
                self._delete_file(writer, path)
            for update in updates:
                self._insert_file(writer, update, now)
            writer.executemany(
                "UPDATE files SET stat = ? WHERE path = ?", [(record.stat, record.path) for record in touched]
            )
            (version,) = writer.execute(
                "SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM meta WHERE key = 'version'"
            ).fetchone()
            new_version = int(version) + 1
            values = {**meta, "version": str(new_version), "indexed_at": str(now), "schema": str(SCHEMA_VERSION)}
            writer.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )
            writer.execute("COMMIT")
            return new_version
        except BaseException:
            if writer.in_transaction:
                writer.execute("ROLLBACK")
            raise
        finally:
            writer.close()

    @staticmethod
    def _delete_file(writer: sqlite3.Connection, path: str) -> None:
        ids = [row[0] for row in writer.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        writer.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(i,) for i in ids])
        writer.execute("DELETE FROM chunks WHERE path = ?", (path,))
        writer.execute("DELETE FROM files WHERE path = ?", (path,))

    @staticmethod
    def _insert_file(writer: sqlite3.Connection, update: FileUpdate, now: float) -> None:
        record = update.record
        writer.execute(
            "INSERT INTO files (path, stat, sha, status, reason, chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (record.path, record.stat, record.sha, record.status, record.reason, len(update.chunks), now),
        )
        vectors = list(update.vectors) or [None] * len(update.chunks)
        for chunk, vector in zip(update.chunks, vectors, strict=True):
            cursor = writer.execute(
                "INSERT INTO chunks (path, anchor, title, text, first_line, last_line, kind, vector) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (chunk.path, chunk.anchor, chunk.title, chunk.text, chunk.first_line, chunk.last_line, chunk.kind,
                 vector),
            )  # fmt: skip
            body = chunk.text + "\n" + identifier_words(chunk.title + " " + chunk.text)
            path_words = chunk.path.replace("/", " ").replace("_", " ").replace(".", " ")
            writer.execute(
                "INSERT INTO chunks_fts (rowid, title, path, body) VALUES (?, ?, ?, ?)",
                (cursor.lastrowid, chunk.title + " " + identifier_words(chunk.title), path_words, body),
            )
