"""The embedded memory index: SQLite FTS5 (BM25) plus stored embeddings, in the store's database file.

Entries live in ``memory_entries`` (one row per conversation and path, with the embedding as packed
32-bit floats); their text is mirrored in the FTS5 table ``memory_fts`` under the same rowid. Every
query is filtered by tenant, project and user, and by conversation when one is given, in SQL, so no
result can come from outside the caller's scope.
"""

from __future__ import annotations

import re
import sqlite3
from array import array
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, cast

from berth.default_plugins.storage.sqlite import DATABASE_FILE, SqliteDatabase
from berth.default_plugins.storage.sqlite_memory_rows import MEMORY_SCHEMA, stamp, write_entries
from berth.default_plugins.storage.threads import in_storage_thread
from berth.storage.memory import LexicalHit, MemoryEntry, MemoryFilter, MemoryKind
from berth.storage.scope import ConversationScope

__all__ = ["SqliteMemoryIndex", "fts_query"]


_WORD_RE: Final = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS: Final = 32

# One statement per query: optional filters compare against NULL instead of being left out, so no SQL
# is ever assembled from pieces. Parameters: tenant, project, user, conversation (twice), ",kinds,",
# since (twice), until (twice).
_LEXICAL_SQL: Final = (
    "SELECT e.tenant, e.project, e.user_id, e.conversation_id, e.path, e.turn_id, e.turn_ordinal, e.kind,"
    " e.ts, e.text, e.vector, -bm25(memory_fts)"
    " FROM memory_fts JOIN memory_entries e ON e.id = memory_fts.rowid"
    " WHERE memory_fts MATCH ?"
    " AND e.tenant = ? AND e.project = ? AND e.user_id = ? AND (? IS NULL OR e.conversation_id = ?)"
    " AND instr(?, ',' || e.kind || ',') > 0 AND (? IS NULL OR e.ts >= ?) AND (? IS NULL OR e.ts < ?)"
    " ORDER BY bm25(memory_fts), e.ts DESC LIMIT ?"
)
_LIST_SQL: Final = (
    "SELECT e.tenant, e.project, e.user_id, e.conversation_id, e.path, e.turn_id, e.turn_ordinal, e.kind,"
    " e.ts, e.text, e.vector"
    " FROM memory_entries e"
    " WHERE e.tenant = ? AND e.project = ? AND e.user_id = ? AND (? IS NULL OR e.conversation_id = ?)"
    " AND instr(?, ',' || e.kind || ',') > 0 AND (? IS NULL OR e.ts >= ?) AND (? IS NULL OR e.ts < ?)"
    " ORDER BY e.ts, e.conversation_id, e.turn_ordinal, e.path"
)


def _instant(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def fts_query(text: str) -> str | None:
    """Turn free text into an FTS5 query that cannot be malformed: its words, quoted, OR-ed.

    Returns ``None`` when the text has no words (nothing to match).
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD_RE.findall(text)))[:_MAX_QUERY_TERMS]
    return " OR ".join(f'"{word}"' for word in words) if words else None


def _filter_parameters(where: MemoryFilter) -> tuple[object, ...]:
    kinds = "," + ",".join(sorted(where.kinds)) + ","
    since = stamp(where.since) if where.since else None
    until = stamp(where.until) if where.until else None
    owner = where.owner
    return (
        owner.tenant,
        owner.project,
        owner.user_id,
        where.conversation_id,
        where.conversation_id,
        kinds,
        since,
        since,
        until,
        until,
    )


def _entry(row: Sequence[object]) -> MemoryEntry:
    tenant, project, user_id, conversation_id, path, turn_id, ordinal, kind, ts, text, vector = row[:11]
    return MemoryEntry(
        scope=ConversationScope(
            tenant=cast(str, tenant),
            project=cast(str, project),
            user_id=cast(str, user_id),
            conversation_id=cast(str, conversation_id),
        ),
        path=cast(str, path),
        turn_id=cast(str, turn_id),
        turn_ordinal=cast(int, ordinal),
        kind=cast(MemoryKind, kind),
        ts=_instant(cast(str, ts)),
        text=cast(str, text),
        vector=tuple(array("f", cast(bytes, vector))),
    )


class SqliteMemoryIndex:
    """The embedded :class:`~berth.storage.memory.MemoryIndex` (FTS5 + stored vectors) under ``root``.

    :param root: the storage root; the index shares the conversation store's database file.
    :param database: the conversation store's connection, to share it (and its group commits); the
        index then leaves closing it to the store. Without it, the index opens its own connection.
    """

    def __init__(
        self, root: Path, *, trace: Callable[[str], None] | None = None, database: SqliteDatabase | None = None
    ) -> None:
        self._owns_database = database is None
        self.database = database if database is not None else SqliteDatabase(root / DATABASE_FILE, trace=trace)

    async def open(self) -> None:
        """Create the index tables (and the database, in WAL mode, if it is new)."""
        await in_storage_thread(self.database.open, MEMORY_SCHEMA)

    async def aclose(self) -> None:
        """Close the connection (a shared one is closed by its owner)."""
        if self._owns_database:
            await in_storage_thread(self.database.close)

    async def add(self, entries: tuple[MemoryEntry, ...]) -> None:
        """Insert or replace entries (keyed by conversation and path), in one transaction."""

        def work(connection: sqlite3.Connection) -> None:
            write_entries(connection, entries)

        await self.database.write_together(work)  # durable, sharing the commit of the turns ending meanwhile

    async def search_lexical(self, where: MemoryFilter, query: str, *, limit: int) -> tuple[LexicalHit, ...]:
        """Return up to ``limit`` entries matching ``query`` by BM25, best first."""
        match = fts_query(query)
        if match is None or limit <= 0:
            return ()

        def work(connection: sqlite3.Connection) -> tuple[LexicalHit, ...]:
            rows = connection.execute(_LEXICAL_SQL, (match, *_filter_parameters(where), limit)).fetchall()
            return tuple(LexicalHit(entry=_entry(row), score=float(row[11])) for row in rows)

        return await in_storage_thread(self.database.read, work)

    async def erase_conversation(self, scope: ConversationScope) -> int:
        """Delete every entry of one conversation and merge the lexical index, then purge the database; return how
        many entries there were.

        An FTS5 delete only adds a delete marker: the words of the text stay in the index's older segments until a
        merge drops them, so the index is merged whole (``optimize``) after the delete. That costs what the whole
        index holds (see ``docs/storage.md``); it runs in a worker thread, once per deleted conversation.
        """
        key = (scope.tenant, scope.project, scope.user_id, scope.conversation_id)

        def work(connection: sqlite3.Connection) -> int:
            rows = connection.execute(
                "SELECT id FROM memory_entries WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?", key
            ).fetchall()
            if not rows:
                return 0
            connection.executemany("DELETE FROM memory_fts WHERE rowid=?", rows)
            connection.executemany("DELETE FROM memory_entries WHERE id=?", rows)
            connection.execute("INSERT INTO memory_fts (memory_fts) VALUES ('optimize')")
            return len(rows)

        erased = await self.database.write_together(work)
        if erased:
            await in_storage_thread(self.database.purge)
        return erased

    async def list_entries(self, where: MemoryFilter) -> tuple[MemoryEntry, ...]:
        """Return every entry ``where`` admits, oldest first."""

        def work(connection: sqlite3.Connection) -> tuple[MemoryEntry, ...]:
            return tuple(_entry(row) for row in connection.execute(_LIST_SQL, _filter_parameters(where)))

        return await in_storage_thread(self.database.read, work)
