"""The embedded :class:`~berth.storage.meta.MetaStore`: conversation index rows and feedback in SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from berth.default_plugins.storage.sqlite_database import SqliteDatabase
from berth.storage.meta import ConversationMeta, Feedback
from berth.storage.scope import ConversationScope, OwnerScope

DATABASE_FILE = "meta.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    title TEXT, bundle TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id)
);
CREATE INDEX IF NOT EXISTS conversations_recent ON conversations (tenant, project, user_id, updated_at);
CREATE TABLE IF NOT EXISTS feedback (
    tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL, origin TEXT NOT NULL, reaction TEXT NOT NULL, text TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, turn_id, origin)
);
CREATE INDEX IF NOT EXISTS feedback_period ON feedback (tenant, project, created_at);
"""


def _iso(value: datetime) -> str:
    """``value`` in UTC as ISO text (a naive time is taken as UTC); a bound past year 1 or 9999 is clamped there."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC).isoformat()
    except (OverflowError, ValueError):
        edge = datetime.min if value.year < 2 else datetime.max
        return edge.replace(tzinfo=UTC).isoformat()


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


class SqliteMetaStore:
    """Conversation metadata and feedback in ``root/meta.sqlite3`` (WAL, one :class:`SqliteDatabase`).

    Creating a conversation and storing feedback are durable (group commit); the activity time a turn
    touches is not ``fsync``-ed (a power loss may take back the latest touch, nothing else). Reads and
    the touch are short and run on the event loop's thread when the connection is free.
    """

    def __init__(self, root: Path) -> None:
        self.database = SqliteDatabase(root / DATABASE_FILE)

    async def open(self) -> None:
        """Create the folder, the database and its tables."""
        await asyncio.to_thread(self.database.open, _SCHEMA)

    async def aclose(self) -> None:
        """Close the database (after any statement still running in a worker thread)."""
        await asyncio.to_thread(self.database.close)

    async def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await self.database.read_now(lambda connection: connection.execute(sql, parameters).fetchall())

    async def _write(self, sql: str, parameters: tuple[Any, ...], *, durable: bool = True) -> None:
        def work(connection: sqlite3.Connection) -> None:
            connection.execute(sql, parameters)

        await (self.database.write_together(work) if durable else self.database.write_now(work))

    async def create_conversation(self, meta: ConversationMeta) -> None:
        """Insert a conversation row."""
        s = meta.scope
        await self._write(
            "INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                s.tenant,
                s.project,
                s.user_id,
                s.conversation_id,
                meta.title,
                meta.bundle,
                _iso(meta.created_at),
                _iso(meta.updated_at),
            ),
        )

    async def get_conversation(self, scope: ConversationScope) -> ConversationMeta | None:
        """The row of ``scope``, if it exists."""
        rows = await self._read(
            "SELECT title, bundle, created_at, updated_at FROM conversations "
            "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?",
            (scope.tenant, scope.project, scope.user_id, scope.conversation_id),
        )
        if not rows:
            return None
        title, bundle, created, updated = rows[0]
        return ConversationMeta(scope, title, bundle, _time(created), _time(updated))

    async def touch_conversation(self, scope: ConversationScope, *, at: datetime, title: str | None = None) -> None:
        """Update the activity time (and the title when given and none is set yet)."""
        await self._write(
            "UPDATE conversations SET updated_at=?, title=COALESCE(title, ?) "
            "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?",
            (_iso(at), title, scope.tenant, scope.project, scope.user_id, scope.conversation_id),
            durable=False,
        )

    async def list_conversations(
        self, owner: OwnerScope, *, limit: int, before: datetime | None = None
    ) -> list[ConversationMeta]:
        """Most recently active first."""
        rows = await self._read(
            "SELECT conversation_id, title, bundle, created_at, updated_at FROM conversations "
            "WHERE tenant=? AND project=? AND user_id=? AND updated_at < ? "
            "ORDER BY updated_at DESC, conversation_id LIMIT ?",
            (owner.tenant, owner.project, owner.user_id, _iso(before) if before else "9999", limit),
        )
        return [
            ConversationMeta(owner.conversation(cid), title, bundle, _time(created), _time(updated))
            for cid, title, bundle, created, updated in rows
        ]

    async def put_feedback(self, feedback: Feedback) -> None:
        """Insert or replace one origin's feedback on a turn."""
        s = feedback.scope
        await self._write(
            "INSERT OR REPLACE INTO feedback VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                s.tenant,
                s.project,
                s.user_id,
                s.conversation_id,
                feedback.turn_id,
                feedback.origin,
                feedback.reaction,
                feedback.text,
                _iso(feedback.created_at),
            ),
        )

    async def feedback_for(self, scope: ConversationScope) -> list[Feedback]:
        """Every feedback on one conversation."""
        rows = await self._read(
            "SELECT turn_id, reaction, text, origin, created_at FROM feedback "
            "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=? ORDER BY created_at",
            (scope.tenant, scope.project, scope.user_id, scope.conversation_id),
        )
        return [
            Feedback(scope, turn, reaction, text, origin, _time(created))
            for turn, reaction, text, origin, created in rows
        ]

    async def feedback_between(self, tenant: str, project: str, start: datetime, end: datetime) -> list[Feedback]:
        """Feedback of one tenant/project in a period."""
        rows = await self._read(
            "SELECT user_id, conversation_id, turn_id, reaction, text, origin, created_at FROM feedback "
            "WHERE tenant=? AND project=? AND created_at >= ? AND created_at < ? ORDER BY created_at",
            (tenant, project, _iso(start), _iso(end)),
        )
        return [
            Feedback(
                ConversationScope(tenant=tenant, project=project, user_id=user, conversation_id=cid),
                turn,
                reaction,
                text,
                origin,
                _time(created),
            )
            for user, cid, turn, reaction, text, origin, created in rows
        ]
