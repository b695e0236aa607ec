"""The embedded :class:`~berth.knowledge.store.SpaceStore`: one SQLite database (WAL) per space.

Tables: ``files`` (each file's change key, content hash, status and reason), ``chunks`` (text, line range and
embedding as float32 bytes, when the embedder is semantic), ``chunks_fts`` (FTS5, Porter stemmer and unicode61,
over title, path and text; contentless, so each chunk's text is stored once) and ``meta``; ``PRAGMA user_version``
holds the layout's :data:`SCHEMA_VERSION` (an older database is upgraded in place when opened). Its refresh lock
is an ``flock`` on ``<space>.lock`` beside the database. Every call runs in a worker thread; the reading
connection is opened on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from berth.knowledge.filters import ChunkFilter
from berth.knowledge.fts_topk import FtsTopK
from berth.knowledge.store import (
    BULKY_META,
    ChunkRow,
    FileRecord,
    FileUpdate,
    VectorMatrix,
    indexed_fields,
    query_words,
)
from berth.knowledge.vector_files import META_KEY, open_vectors, prune_vectors, vectors_folder, write_vectors

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SCHEMA_VERSION", "TOKENIZER", "SqliteSpaceStore", "fts_query"]

SCHEMA_VERSION: Final = 3
"""The layout's version, kept in ``PRAGMA user_version``: a database of an older one is upgraded when opened
(3: ``chunks_by_name`` indexes definitions by name; 2: ``chunks_fts`` is contentless — the text is kept once, in
``chunks``; 1 kept a second copy in FTS5)."""
_NAME: Final = "substr(title, length(rtrim(title, replace(title, '.', ''))) + 1)"
"""A title's last dotted part (``BaseModel.model_validate`` → ``model_validate``; the whole title when it has no dot):
indexed (``chunks_by_name``), so a symbol look-up seeks it instead of scanning every title."""
TOKENIZER: Final = "porter unicode61 remove_diacritics 2"
"""FTS5's tokenizer: Porter stemming over Unicode words, diacritics removed (``café`` finds ``cafe``)."""
_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    stat TEXT NOT NULL,
    sha TEXT NOT NULL,
    status TEXT NOT NULL,           -- indexed | degraded | skipped
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    anchor TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    first_line INTEGER NOT NULL,
    last_line INTEGER NOT NULL,
    kind TEXT NOT NULL,
    vector BLOB,                    -- NULL when the space's embedder is not semantic (nothing ranks by it)
    UNIQUE (path, anchor)
)""",
    "CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path, first_line)",
    f"CREATE INDEX IF NOT EXISTS chunks_by_name ON chunks (kind, {_NAME} COLLATE NOCASE)",
)
_FTS: Final = f"CREATE VIRTUAL TABLE chunks_fts USING fts5(title, path, body, content = '', tokenize = '{TOKENIZER}')"
"""Contentless: FTS5 keeps only its index; a row is deleted by restating the values it indexed
(:func:`~berth.knowledge.store.indexed_fields` of the chunk's row, deterministic for this reason)."""
_INSERT_FTS: Final = "INSERT INTO chunks_fts (rowid, title, path, body) VALUES (?, ?, ?, ?)"
_DELETE_FTS: Final = "INSERT INTO chunks_fts (chunks_fts, rowid, title, path, body) VALUES ('delete', ?, ?, ?, ?)"
_COLUMNS: Final = "id, path, anchor, title, text, first_line, last_line, kind"
_WEIGHTS: Final = (3.0, 2.0, 1.0)
"""``bm25()``'s weights of title, path and text."""
_ALL: Final = -1
"""``LIMIT -1``: no limit."""
TERM_SCORES_KEY: Final = "term_scores"
"""The ``meta`` key naming the version the stored term scores (``chunks_fts_postings``) were built for: those of
another version are never read."""
_STAMPS: Final = f"SELECT key, value FROM meta WHERE key IN ('version', '{TERM_SCORES_KEY}')"  # noqa: S608
_SET_META: Final = "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


def fts_query(query: str) -> str | None:
    """An FTS5 expression for a free-text query: its words (:func:`~berth.knowledge.store.query_words`),
    each quoted, joined by OR; None when the query has no word at all."""
    words = query_words(query)
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class SqliteSpaceStore:
    """The SQLite index of one space at ``path`` (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._loading = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._vectors: VectorMatrix | None = None
        self._top = FtsTopK("chunks_fts", TOKENIZER, _WEIGHTS)
        self._term_scores_tried = ""
        self._storing_scores = threading.Lock()

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
        ((layout,),) = connection.execute("PRAGMA user_version").fetchall()
        if layout < SCHEMA_VERSION:
            _upgrade(connection)
        connection.create_function("regexp", 2, _regexp, deterministic=True)
        return connection

    def _read(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._reader.execute(sql, parameters).fetchall()

    async def aclose(self) -> None:
        """Close the reading connection."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Close the reading connection (synchronously)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # -- reading -------------------------------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        return dict(self._read("SELECT key, value FROM meta WHERE key <> ?", (BULKY_META,)))

    async def meta(self) -> dict[str, str]:
        """Every ``meta`` value."""
        return await asyncio.to_thread(self._meta)

    async def meta_value(self, key: str) -> str | None:
        """One ``meta`` value (None: not set), :data:`~berth.knowledge.store.BULKY_META` included."""
        rows = await asyncio.to_thread(self._read, "SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    async def version(self) -> int:
        """The committed index version (0: never indexed)."""
        return int((await self.meta()).get("version", "0"))

    async def files(self) -> dict[str, FileRecord]:
        """Every file record, by path."""
        rows = await asyncio.to_thread(self._read, "SELECT path, stat, sha, status, reason, chunks FROM files")
        return {row[0]: FileRecord(*row) for row in rows}

    def _counts(self) -> dict[str, int]:
        by_status = dict(self._read("SELECT status, count(*) FROM files GROUP BY status"))
        ((chunks,),) = self._read("SELECT count(*) FROM chunks")
        return {**by_status, "chunks": chunks}

    async def counts(self) -> dict[str, int]:
        """Files by status and the number of chunks."""
        return await asyncio.to_thread(self._counts)

    async def skipped(self, limit: int = 50) -> list[tuple[str, str, str]]:
        """Files skipped or degraded, with their reasons: (path, status, reason)."""
        rows = await asyncio.to_thread(
            self._read,
            "SELECT path, status, reason FROM files WHERE status != 'indexed' ORDER BY path LIMIT ?",
            (limit,),
        )
        return [(p, s, r or "") for p, s, r in rows]

    async def chunk_rows(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks with these ids."""
        wanted = list(ids)
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        query = f"SELECT {_COLUMNS} FROM chunks WHERE id IN ({marks})"  # noqa: S608 - '?' marks only
        rows = await asyncio.to_thread(self._read, query, wanted)
        return {row[0]: ChunkRow(*row) for row in rows}

    async def chunks_of(self, path: str) -> list[ChunkRow]:
        """The chunks of one file, in file order."""
        query = f"SELECT {_COLUMNS} FROM chunks WHERE path = ? ORDER BY first_line, id"  # noqa: S608
        return [ChunkRow(*row) for row in await asyncio.to_thread(self._read, query, (path,))]

    async def texts(self) -> list[tuple[str, str]]:
        """Every chunk's (path, text)."""
        return [
            (str(path), str(text))
            for path, text in await asyncio.to_thread(self._read, "SELECT path, text FROM chunks")
        ]

    async def lexical(self, query: str, limit: int, *, within: ChunkFilter | None = None) -> list[tuple[int, float]]:
        """Chunk ids ranked by BM25 over title (weighted 3), path (2) and text: (id, score), best first; only
        chunks ``within`` lets through."""
        expression = fts_query(query)
        if expression is None:
            return []
        if within is None or within.empty:
            pruned = await asyncio.to_thread(self._pruned, query, limit)
            if pruned is not None:
                return pruned
        where, parameters = _within_sql(within)
        rows = await asyncio.to_thread(
            self._read,
            "SELECT rowid, -bm25(chunks_fts, 3.0, 2.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "  # noqa: S608
            f"{where and f'AND rowid IN (SELECT id FROM chunks WHERE {where}) '}"  # noqa: S608 - '?' marks only
            "ORDER BY bm25(chunks_fts, 3.0, 2.0, 1.0) LIMIT ?",
            (expression, *parameters, limit),
        )
        return [(int(rowid), float(score)) for rowid, score in rows]

    def _pruned(self, query: str, limit: int) -> list[tuple[int, float]] | None:
        """The lexical ranking without scoring every matching row (:mod:`berth.knowledge.fts_topk`), or None.
        One read transaction: the stored term scores, their stamp and the index are of one version. An index
        without current ones (written before them) gets them here, once per version, when a query could use them."""
        with self._lock:
            reader = self._reader
            reader.execute("BEGIN")
            try:
                stamps = dict(reader.execute(_STAMPS).fetchall())
                version = stamps.get("version", "0")
                current = stamps.get(TERM_SCORES_KEY) == version
                found = self._top.search(reader, query_words(query), limit, stored=current)
            finally:
                reader.execute("COMMIT")
        if found is not None or current or version == "0" or self._term_scores_tried == version:
            return found
        if not self._storing_scores.acquire(blocking=False):
            return None  # a refresh (or another search) is storing them: the full query meanwhile, not a wait
        try:
            self._term_scores_tried = version
            with contextlib.suppress(OSError, sqlite3.Error):  # a read-only folder, a busy writer: the full query
                self._save_term_scores(int(version))
        finally:
            self._storing_scores.release()
        return self._pruned(query, limit)

    def save_term_scores(self, version: int) -> tuple[int, int]:
        """Store the common terms' scores of ``version`` (:mod:`berth.knowledge.term_postings`) and commit their
        stamp, unless a refresh committed another version meanwhile (it stores its own): (terms, rows) stored.
        A refresh that changes chunks calls it after committing; so does the first search that could use them
        (unless they are being stored meanwhile: one store at a time, and a search does not wait for it)."""
        with self._storing_scores:
            return self._save_term_scores(version)

    def _save_term_scores(self, version: int) -> tuple[int, int]:
        with self._write_transaction() as writer:
            committed = dict(writer.execute(_STAMPS).fetchall())
            if int(committed.get("version", "0")) != version:
                return 0, 0
            stored = self._top.build(writer)
            writer.execute(_SET_META, (TERM_SCORES_KEY, str(version)))
            return stored

    async def matching(self, within: ChunkFilter, limit: int) -> list[int]:
        """The ids of the chunks ``within`` lets through (at most ``limit``), in path and line order."""
        where, parameters = _within_sql(within)
        rows = await asyncio.to_thread(
            self._read,
            f"SELECT id FROM chunks {where and f'WHERE {where} '}ORDER BY path, first_line, id LIMIT ?",  # noqa: S608
            (*parameters, limit),
        )
        return [int(row[0]) for row in rows]

    def _vector_matrix(self) -> VectorMatrix:
        with self._loading:  # one load per version: a search waits for the one loading after a refresh
            meta = self._meta()
            version, stamp = int(meta.get("version", "0")), meta.get(META_KEY, "")
            cached = self._vectors
            if cached is None or cached.version != version:
                cached = self._vectors = self._open_matrix(version, stamp)
            return cached

    def _open_matrix(self, version: int, stamp: str) -> VectorMatrix:
        """The committed version's vectors: its files memory-mapped; read from the rows when it has none (an
        index written before they were, or their files are gone), then written for the next process."""
        opened = open_vectors(vectors_folder(self.path), stamp) if stamp else None
        if opened is not None:
            return VectorMatrix(version, *opened)
        rows = self._read("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id")
        matrix = VectorMatrix.build(version, rows)
        if len(matrix.ids):
            with contextlib.suppress(OSError, sqlite3.Error):  # a read-only folder, a busy writer: not needed here
                self._save_vectors(version)
        return matrix

    def _save_vectors(self, version: int) -> None:
        """Write the vector files of ``version`` and commit their stamp, unless a refresh committed another
        version meanwhile (it wrote its own)."""
        with self._write_transaction() as writer:
            committed = dict(writer.execute("SELECT key, value FROM meta").fetchall())
            if int(committed.get("version", "0")) == version:
                _write_vectors(writer, self.path, version)
        _prune(self.path)

    @contextlib.contextmanager
    def _write_transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own in a ``BEGIN IMMEDIATE`` transaction (the write lock): committed when the block
        ends, rolled back when it raises; closed either way."""
        writer = self._connect()
        try:
            writer.execute("BEGIN IMMEDIATE")
            yield writer
            writer.execute("COMMIT")
        except BaseException:
            if writer.in_transaction:
                writer.execute("ROLLBACK")
            raise
        finally:
            writer.close()

    async def nearest(
        self, vector: npt.NDArray[np.float32], limit: int, *, within: ChunkFilter | None = None
    ) -> list[tuple[int, float]]:
        """Chunk ids by cosine similarity (the committed version's vectors are loaded once, then kept); only
        chunks ``within`` lets through."""
        among = None if within is None or within.empty else await self.matching(within, _ALL)
        return await asyncio.to_thread(lambda: self._vector_matrix().nearest(vector, limit, among=among))

    # -- writing -------------------------------------------------------------------------------------

    def _set_progress(self, progress: dict[str, Any] | None) -> None:
        with self._lock:
            if progress is None:
                self._reader.execute("DELETE FROM meta WHERE key = 'progress'")
            else:
                self._reader.execute(
                    "INSERT INTO meta (key, value) VALUES ('progress', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (json.dumps(progress),),
                )

    async def set_progress(self, progress: dict[str, Any] | None) -> None:
        """Record (or clear) the progress of a running refresh."""
        await asyncio.to_thread(self._set_progress, progress)

    async def apply(
        self,
        updates: Sequence[FileUpdate],
        *,
        removed: Iterable[str],
        touched: Sequence[FileRecord],
        meta: dict[str, str],
    ) -> int:
        """Write one refresh in one transaction (see :meth:`~berth.knowledge.store.SpaceStore.apply`)."""
        return await asyncio.to_thread(self._apply, updates, list(removed), touched, meta)

    def _apply(
        self, updates: Sequence[FileUpdate], removed: list[str], touched: Sequence[FileRecord], meta: dict[str, str]
    ) -> int:
        with self._write_transaction() as writer:
            now = time.time()
            for path in [*removed, *(u.record.path for u in updates)]:
                _delete_file(writer, path)
            for update in updates:
                _insert_file(writer, update, now)
            writer.executemany(
                "UPDATE files SET stat = ? WHERE path = ?", [(record.stat, record.path) for record in touched]
            )
            ((version,),) = writer.execute(
                "SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM meta WHERE key = 'version'"
            ).fetchall()
            new_version = int(version) + 1
            values = {**meta, "version": str(new_version), "indexed_at": str(now), "schema": str(SCHEMA_VERSION)}
            writer.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )
            vectors_changed = _vectors_changed(writer, updates, removed)
            if vectors_changed:  # the new version's vector files, written before it commits
                _write_vectors(writer, self.path, new_version)
            if not updates and not removed:  # the same rows: the stored scores stay true
                writer.execute("UPDATE meta SET value = ? WHERE key = ? AND value = ?", (
                    str(new_version), TERM_SCORES_KEY, str(version)))  # fmt: skip
        if vectors_changed:
            _prune(self.path)
        if updates or removed:  # after the commit: searches meanwhile run in full, never on stale scores
            self.save_term_scores(new_version)
        return new_version

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold ``flock`` on ``<space>.lock``: refreshes of this space in other processes wait."""
        lock_path = self.path.with_suffix(".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a")
        try:
            await asyncio.to_thread(fcntl.flock, handle, fcntl.LOCK_EX)
            yield
        finally:
            handle.close()  # closing the file releases the lock


def _regexp(pattern: str, value: str) -> bool:
    """SQLite's ``value REGEXP pattern``: Python's ``re.search`` (compiled patterns are cached by ``re``)."""
    return re.search(pattern, value) is not None


def _within_sql(within: ChunkFilter | None) -> tuple[str, list[str]]:
    """The conditions of ``within`` over the ``chunks`` table's columns, and their parameters ('' when none)."""
    if within is None or within.empty:
        return "", []
    conditions: list[str] = []
    parameters: list[str] = []
    patterns = within.path_patterns()
    if patterns:  # matched against each file once, not each chunk
        regexps = " AND ".join(["path REGEXP ?"] * len(patterns))
        conditions.append(f"path IN (SELECT path FROM files WHERE {regexps})")  # noqa: S608 - '?' marks only
        parameters.extend(patterns)
    kind = within.kinds()
    if kind is not None:
        conditions.append("kind = ?")
        parameters.append(kind)
    titles, name = within.title_patterns(), within.symbol_name()
    if titles is not None and name is not None:  # the name seeks chunks_by_name; the patterns check the rest
        conditions.append(f"{_NAME} COLLATE NOCASE = ? AND (title LIKE ? ESCAPE '\\' OR title LIKE ? ESCAPE '\\')")
        parameters.extend([name, *titles])
    return " AND ".join(conditions), parameters


def _upgrade(connection: sqlite3.Connection) -> None:
    """Make the tables of :data:`SCHEMA_VERSION` in one transaction: a new database's, or an older layout's
    missing parts — before 2, ``chunks_fts`` made again from the chunks (version, files and chunks stay: the space
    keeps serving, nothing is re-chunked), then the freed pages given back; before 3, ``chunks_by_name`` built.
    Two processes opening it at once: the second finds it done."""
    connection.execute("BEGIN IMMEDIATE")
    had_index = False
    try:
        ((layout,),) = connection.execute("PRAGMA user_version").fetchall()
        if layout >= SCHEMA_VERSION:
            connection.execute("COMMIT")
            return
        for statement in _TABLES:  # IF NOT EXISTS: a layout-2 database gains chunks_by_name, nothing else
            connection.execute(statement)
        if layout < 2:  # before the layout that made chunks_fts contentless
            had_index = bool(connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_fts'").fetchall())
            connection.execute("DROP TABLE IF EXISTS chunks_fts")
            connection.execute(_FTS)
            rows = connection.execute("SELECT id, title, path, text FROM chunks").fetchall()
            connection.executemany(
                _INSERT_FTS, [(i, *indexed_fields(title, path, text)) for i, title, path, text in rows]
            )
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    if had_index:  # the old index's copy of every chunk's text is free pages now: give them back if nobody writes
        with contextlib.suppress(sqlite3.OperationalError):
            connection.execute("VACUUM")


def _vectors_changed(writer: sqlite3.Connection, updates: Sequence[FileUpdate], removed: Sequence[str]) -> bool:
    """Whether a refresh changes the vectors: it writes some, or changes the chunks of a space whose vector files
    are written (a space without vectors never reads its rows for them)."""
    if any(vector is not None for update in updates for vector in update.vectors):
        return True
    if not updates and not removed:
        return False
    rows = writer.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchall()
    return bool(rows and rows[0][0])


def _write_vectors(writer: sqlite3.Connection, database: Path, version: int) -> None:
    """In ``writer``'s transaction: write the files of every vector it sees (its own changes included) and set
    their stamp in ``meta`` ('' when no chunk has a vector), committed with the transaction."""
    import numpy as np

    rows = writer.execute("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id").fetchall()
    stamp = ""
    if rows:
        matrix = VectorMatrix.build(version, rows)
        stamp = write_vectors(vectors_folder(database), version, matrix.ids, np.asarray(matrix.matrix))
    writer.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (META_KEY, stamp),
    )


def _prune(database: Path) -> None:
    """Remove the vector files no committed version names (under the write lock: no writer is writing any)."""
    folder = vectors_folder(database)
    if not folder.is_dir():
        return
    writer = sqlite3.connect(database, timeout=60.0, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        rows = writer.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchall()
        prune_vectors(folder, str(rows[0][0]) if rows else "")
        writer.execute("COMMIT")
    except sqlite3.Error:
        if writer.in_transaction:
            writer.execute("ROLLBACK")
    finally:
        writer.close()


def _delete_file(writer: sqlite3.Connection, path: str) -> None:
    rows = writer.execute("SELECT id, title, path, text FROM chunks WHERE path = ?", (path,)).fetchall()
    writer.executemany(_DELETE_FTS, [(i, *indexed_fields(title, path, text)) for i, title, path, text in rows])
    writer.execute("DELETE FROM chunks WHERE path = ?", (path,))
    writer.execute("DELETE FROM files WHERE path = ?", (path,))


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
            (chunk.path, chunk.anchor, chunk.title, chunk.text, chunk.first_line, chunk.last_line, chunk.kind, vector),
        )
        writer.execute(_INSERT_FTS, (cursor.lastrowid, *indexed_fields(chunk.title, chunk.path, chunk.text)))
