"""The embedded :class:`~berth.storage.meta.MetaStore`: conversation index rows, feedback and usage in SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from berth.default_plugins.storage.sqlite_database import SqliteDatabase
from berth.default_plugins.storage.threads import in_storage_thread
from berth.storage.meta import ConversationMeta, Feedback, TitleSource
from berth.storage.scope import ConversationScope, OwnerScope
from berth.storage.usage import SpentRow, UsageGrouping, UsageRecord, UsageTotals, erased_conversation_id

DATABASE_FILE = "meta.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    title TEXT, bundle TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, title_source TEXT,
    PRIMARY KEY (tenant, project, user_id, conversation_id)
);
CREATE INDEX IF NOT EXISTS conversations_recent ON conversations (tenant, project, user_id, updated_at);
CREATE TABLE IF NOT EXISTS feedback (
    tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL, origin TEXT NOT NULL, reaction TEXT NOT NULL, text TEXT NOT NULL, created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, turn_id, origin)
);
CREATE INDEX IF NOT EXISTS feedback_period ON feedback (tenant, project, created_at);
CREATE TABLE IF NOT EXISTS usage (
    tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL, bundle TEXT NOT NULL, model TEXT NOT NULL, purpose TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cache_read_input_tokens INTEGER NOT NULL, cache_creation_input_tokens INTEGER NOT NULL,
    cost_usd REAL, at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_period ON usage (tenant, project, at);
"""

_USAGE_KEYS: dict[UsageGrouping, str] = {
    "user": "user_id",
    "bundle": "bundle",
    "day": "substr(at, 1, 10)",  # times are stored as UTC ISO text: the first ten characters are the day
    "model": "model",
}
"""The SQL expression each grouping of :meth:`SqliteMetaStore.usage_totals` groups by."""

_USAGE_SUMS = (
    "COUNT(*), COUNT(DISTINCT user_id || '/' || conversation_id || '/' || turn_id), "
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_input_tokens), 0), "
    "COALESCE(SUM(cache_creation_input_tokens), 0), SUM(cost_usd), COALESCE(SUM(cost_usd IS NULL), 0)"
)
"""Calls, distinct turns (ids are path-safe, so '/' joins them unambiguously), the four token sums, the cost of the
priced calls (NULL when none is priced) and the number of unpriced calls."""


_ADDED_COLUMNS = {"conversations": [("title_source", "TEXT")]}
"""Columns that databases made by earlier releases lack (added when the store opens)."""


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
        await in_storage_thread(self.database.open, _SCHEMA, added_columns=_ADDED_COLUMNS)

    async def ping(self) -> str:
        """A write and a read back through a storage thread (what ``/readyz`` asks); raises when it cannot."""
        await self.database.probe()
        return f"sqlite {self.database.path.name}: wrote and read back"

    async def aclose(self) -> None:
        """Close the database (after any statement still running in a worker thread)."""
        await in_storage_thread(self.database.close)

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
            "INSERT INTO conversations (tenant, project, user_id, conversation_id, title, bundle, created_at, "
            "updated_at, title_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                s.tenant,
                s.project,
                s.user_id,
                s.conversation_id,
                meta.title,
                meta.bundle,
                _iso(meta.created_at),
                _iso(meta.updated_at),
                meta.title_source or ("user" if meta.title else None),
            ),
        )

    async def get_conversation(self, scope: ConversationScope) -> ConversationMeta | None:
        """The row of ``scope``, if it exists."""
        rows = await self._read(
            "SELECT title, bundle, created_at, updated_at, title_source FROM conversations "
            "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?",
            (scope.tenant, scope.project, scope.user_id, scope.conversation_id),
        )
        if not rows:
            return None
        title, bundle, created, updated, source = rows[0]
        return ConversationMeta(scope, title, bundle, _time(created), _time(updated), source)

    async def touch_conversation(self, scope: ConversationScope, *, at: datetime, title: str | None = None) -> None:
        """Update the activity time (and the title when given and none is set yet)."""
        await self._write(
            "UPDATE conversations SET updated_at=?, title_source=CASE WHEN title IS NULL AND ? IS NOT NULL "
            "THEN 'message' ELSE title_source END, title=COALESCE(title, ?) "
            "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?",
            (_iso(at), title, title, scope.tenant, scope.project, scope.user_id, scope.conversation_id),
            durable=False,
        )

    async def set_title(self, scope: ConversationScope, title: str, *, source: TitleSource) -> bool:
        """Set the title (durably); a ``summary`` never replaces the user's own. Return whether it was set."""

        def work(connection: sqlite3.Connection) -> int:
            cursor = connection.execute(
                "UPDATE conversations SET title=?, title_source=? "
                "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=? "
                "AND (? = 'user' OR COALESCE(title_source, '') != 'user')",
                (title, source, scope.tenant, scope.project, scope.user_id, scope.conversation_id, source),
            )
            return cursor.rowcount

        return bool(await self.database.write_together(work))

    async def list_conversations(
        self, owner: OwnerScope, *, limit: int, before: datetime | None = None
    ) -> list[ConversationMeta]:
        """Most recently active first."""
        rows = await self._read(
            "SELECT conversation_id, title, bundle, created_at, updated_at, title_source FROM conversations "
            "WHERE tenant=? AND project=? AND user_id=? AND updated_at < ? "
            "ORDER BY updated_at DESC, conversation_id LIMIT ?",
            (owner.tenant, owner.project, owner.user_id, _iso(before) if before else "9999", limit),
        )
        return [
            ConversationMeta(owner.conversation(cid), title, bundle, _time(created), _time(updated), source)
            for cid, title, bundle, created, updated, source in rows
        ]

    async def inactive_conversations(
        self, tenant: str, project: str, *, before: datetime, limit: int
    ) -> list[ConversationScope]:
        """Conversations of one tenant/project last active before ``before``, least recent first."""
        rows = await self._read(
            "SELECT user_id, conversation_id FROM conversations WHERE tenant=? AND project=? AND updated_at < ? "
            "ORDER BY updated_at, user_id, conversation_id LIMIT ?",
            (tenant, project, _iso(before), limit),
        )
        return [
            ConversationScope(tenant=tenant, project=project, user_id=user, conversation_id=cid) for user, cid in rows
        ]

    async def erase_conversation(self, scope: ConversationScope) -> bool:
        """Delete the row and the feedback, give the usage records an anonymous conversation id (one transaction),
        then purge the database (no byte of the title or the feedback is left in its files)."""
        key = (scope.tenant, scope.project, scope.user_id, scope.conversation_id)
        anonymous = erased_conversation_id()
        where = "WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?"

        def work(connection: sqlite3.Connection) -> bool:
            connection.execute(f"DELETE FROM feedback {where}", key)  # noqa: S608 - constant SQL
            connection.execute(f"UPDATE usage SET conversation_id=? {where}", (anonymous, *key))  # noqa: S608
            return connection.execute(f"DELETE FROM conversations {where}", key).rowcount > 0  # noqa: S608

        existed = await self.database.write_together(work)
        await in_storage_thread(self.database.purge)
        return bool(existed)

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

    async def record_usage(self, records: Sequence[UsageRecord]) -> None:
        """Insert the rows in one transaction (not ``fsync``-ed: a killed process keeps them, a power loss may
        take back the latest; usage is recorded once per turn, so it must not cost each turn an ``fsync``)."""
        if not records:
            return
        rows = [
            (
                r.scope.tenant,
                r.scope.project,
                r.scope.user_id,
                r.scope.conversation_id,
                r.turn_id,
                r.bundle,
                r.model,
                r.purpose,
                r.input_tokens,
                r.output_tokens,
                r.cache_read_input_tokens,
                r.cache_creation_input_tokens,
                r.cost_usd,
                _iso(r.at),
            )
            for r in records
        ]

        def work(connection: sqlite3.Connection) -> None:
            connection.executemany("INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

        await self.database.write_now(work)

    async def usage_totals(
        self, tenant: str, project: str, start: datetime, end: datetime, group_by: UsageGrouping | None
    ) -> list[UsageTotals]:
        """Totals of one tenant/project in ``[start, end)``, per group ordered by key, or one row for all."""
        key = _USAGE_KEYS[group_by] if group_by is not None else "NULL"
        grouping = " GROUP BY 1 ORDER BY 1" if group_by is not None else ""
        rows = await self._read(
            f"SELECT {key}, {_USAGE_SUMS} FROM usage "  # noqa: S608 - key and sums are constants of this module
            f"WHERE tenant=? AND project=? AND at >= ? AND at < ?{grouping}",
            (tenant, project, _iso(start), _iso(end)),
        )
        return [
            UsageTotals(
                key=key_value,
                calls=calls,
                turns=turns,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_input_tokens=cache_read,
                cache_creation_input_tokens=cache_write,
                cost_usd=cost,
                unpriced_calls=unpriced,
            )
            for key_value, calls, turns, input_tokens, output_tokens, cache_read, cache_write, cost, unpriced in rows
        ]

    async def usage_spent(
        self, since: datetime, *, tenant: str | None = None, project: str | None = None, user_id: str | None = None
    ) -> list[SpentRow]:
        """Tokens and priced cost per tenant, project, user and UTC day since ``since`` (narrowed when asked)."""
        conditions = ["at >= ?"]
        parameters: list[Any] = [_iso(since)]
        for column, value in (("tenant", tenant), ("project", project), ("user_id", user_id)):
            if value is not None:
                conditions.append(f"{column}=?")
                parameters.append(value)
        rows = await self._read(
            "SELECT tenant, project, user_id, substr(at, 1, 10), "  # noqa: S608 - only constant column names
            "SUM(input_tokens + output_tokens + cache_read_input_tokens + cache_creation_input_tokens), "
            f"COALESCE(SUM(cost_usd), 0) FROM usage WHERE {' AND '.join(conditions)} GROUP BY 1, 2, 3, 4",
            tuple(parameters),
        )
        return [SpentRow(*row) for row in rows]
