"""The embedded memory index's tables and how an entry is written into them, in a caller's transaction.

Its own module because two writers share it: :class:`~berth.default_plugins.storage.sqlite_memory.SqliteMemoryIndex`
and the conversation store's commit of a turn, which writes the turn's entries in the same transaction (one
``fsync`` for both, and none of them for a refused commit).
"""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from berth.storage.memory import MemoryEntry

__all__ = ["MEMORY_SCHEMA", "stamp", "write_entries"]

MEMORY_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS memory_entries (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    path TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    turn_ordinal INTEGER NOT NULL,
    kind TEXT NOT NULL,
    ts TEXT NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL,
    UNIQUE (tenant, project, user_id, conversation_id, path)
);
CREATE INDEX IF NOT EXISTS memory_entries_by_owner_time ON memory_entries (tenant, project, user_id, ts);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(text, tokenize = 'unicode61 remove_diacritics 2');
"""


def stamp(value: datetime) -> str:
    """A fixed-width UTC timestamp, so text order is time order."""
    if value.tzinfo is None:
        raise ValueError("memory timestamps must be timezone-aware")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_entries(connection: sqlite3.Connection, entries: Sequence[MemoryEntry]) -> None:
    """Insert or replace ``entries`` (keyed by conversation and path) and their FTS5 rows, in the caller's
    transaction: :meth:`SqliteMemoryIndex.add`, and the conversation store's commit of a turn (its entries are
    committed with it)."""
    for entry in entries:
        s = entry.scope
        key = (s.tenant, s.project, s.user_id, s.conversation_id, entry.path)
        old = connection.execute(
            "SELECT id FROM memory_entries WHERE tenant=? AND project=? AND user_id=? AND conversation_id=? AND path=?",
            key,
        ).fetchone()
        if old is not None:
            connection.execute("DELETE FROM memory_fts WHERE rowid=?", old)
            connection.execute("DELETE FROM memory_entries WHERE id=?", old)
        cursor = connection.execute(
            "INSERT INTO memory_entries (tenant, project, user_id, conversation_id, path, turn_id,"
            " turn_ordinal, kind, ts, text, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                *key,
                entry.turn_id,
                entry.turn_ordinal,
                entry.kind,
                stamp(entry.ts),
                entry.text,
                array("f", entry.vector).tobytes(),
            ),
        )
        connection.execute("INSERT INTO memory_fts (rowid, text) VALUES (?, ?)", (cursor.lastrowid, entry.text))
