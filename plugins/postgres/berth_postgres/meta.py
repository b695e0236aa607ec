"""The PostgreSQL :class:`~berth.storage.meta.MetaStore`: conversation index rows, feedback and usage records.

Tables ``meta_conversations``, ``meta_feedback`` and ``meta_usage`` (migration ``0002_meta``). Scoping is by
columns: tenant, project and user (and conversation where it applies) lead every key and appear in every ``WHERE``,
so no query can reach another scope's rows. Each write is one statement or one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, cast

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth.storage.meta import ConversationMeta, Feedback, Reaction, TitleSource
from berth.storage.scope import ConversationScope, OwnerScope
from berth.storage.usage import SpentRow, UsageGrouping, UsageRecord, UsageTotals, erased_conversation_id
from berth_postgres.pool import StorePool
from berth_postgres.retrying import DEFAULT_RETRY_BUDGET_S

__all__ = ["PostgresMetaStore"]

_USAGE_KEYS: Final[dict[UsageGrouping, str]] = {
    "user": "user_id",
    "bundle": "bundle",
    "day": "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "model": "model",
}
"""The SQL expression each grouping of :meth:`PostgresMetaStore.usage_totals` groups by."""

_USAGE_SUMS: Final = (
    "COUNT(*), COUNT(DISTINCT (user_id, conversation_id, turn_id)), "
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_input_tokens), 0), "
    "COALESCE(SUM(cache_creation_input_tokens), 0), SUM(cost_usd), COUNT(*) FILTER (WHERE cost_usd IS NULL)"
)
"""Calls, distinct turns, the four token sums, the cost of the priced calls (NULL when none is priced) and the number
of unpriced calls."""

_SCOPE_WHERE: Final = "tenant=$1 AND project=$2 AND user_id=$3 AND conversation_id=$4"


def _utc(value: datetime) -> datetime:
    """``value`` as an aware time (a naive one is taken as UTC, as the embedded store does)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _scope_values(scope: ConversationScope) -> tuple[str, str, str, str]:
    return (scope.tenant, scope.project, scope.user_id, scope.conversation_id)


class PostgresMetaStore:
    """Conversation metadata, feedback and usage in PostgreSQL.

    :param dsn: the database to open a pool on (the store owns and closes it), or
    :param pool: a pool shared with the other PostgreSQL stores (closed by its owner).
    :param retry_budget_s: how long an operation whose connection drops goes on retrying before it fails.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        self._pool = StorePool(dsn, pool=pool, min_size=min_size, max_size=max_size, retry_budget_s=retry_budget_s)
        self.store_pool = self._pool
        """The pool its operations go through (with their retry policy)."""

    async def open(self) -> None:
        """Open the pool; a schema that is behind is refused (``schema_behind``: run ``berth migrate``)."""
        await self._pool.open()

    async def aclose(self) -> None:
        """Close the pool (a shared one is closed by its owner)."""
        await self._pool.aclose()

    async def _fetch(self, sql: str, *arguments: Any) -> list[asyncpg.Record]:
        return await self._pool.fetch(sql, *arguments)

    async def create_conversation(self, meta: ConversationMeta) -> None:
        """Insert a conversation row (its id must be new for this owner)."""
        await self._pool.execute(
            "INSERT INTO meta_conversations (tenant, project, user_id, conversation_id, title, bundle, created_at, "
            "updated_at, title_source) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            *_scope_values(meta.scope),
            meta.title,
            meta.bundle,
            _utc(meta.created_at),
            _utc(meta.updated_at),
            meta.title_source or ("user" if meta.title else None),
        )

    async def get_conversation(self, scope: ConversationScope) -> ConversationMeta | None:
        """The row of ``scope``, if it exists."""
        rows = await self._fetch(
            "SELECT title, bundle, created_at, updated_at, title_source FROM meta_conversations "  # noqa: S608
            f"WHERE {_SCOPE_WHERE}",
            *_scope_values(scope),
        )
        if not rows:
            return None
        title, bundle, created, updated, source = rows[0]
        return ConversationMeta(scope, title, bundle, created, updated, source)

    async def touch_conversation(self, scope: ConversationScope, *, at: datetime, title: str | None = None) -> None:
        """Update the activity time (and set ``title`` as a provisional title when none is set yet)."""
        await self._pool.execute(
            "UPDATE meta_conversations SET updated_at=$5, "  # noqa: S608 - constant SQL
            "title_source=CASE WHEN title IS NULL AND $6::text IS NOT NULL THEN 'message' ELSE title_source END, "
            f"title=COALESCE(title, $6::text) WHERE {_SCOPE_WHERE}",
            *_scope_values(scope),
            _utc(at),
            title,
        )

    async def set_title(self, scope: ConversationScope, title: str, *, source: TitleSource) -> bool:
        """Set the title; a ``summary`` never replaces the user's own. Return whether it was set."""
        status = await self._pool.execute(
            "UPDATE meta_conversations SET title=$5, title_source=$6 "  # noqa: S608 - constant SQL
            f"WHERE {_SCOPE_WHERE} AND ($6 = 'user' OR COALESCE(title_source, '') <> 'user')",
            *_scope_values(scope),
            title,
            source,
        )
        return status != "UPDATE 0"

    async def list_conversations(
        self, owner: OwnerScope, *, limit: int, before: datetime | None = None
    ) -> list[ConversationMeta]:
        """The owner's conversations, most recently active first, older than ``before``."""
        rows = await self._fetch(
            "SELECT conversation_id, title, bundle, created_at, updated_at, title_source FROM meta_conversations "
            "WHERE tenant=$1 AND project=$2 AND user_id=$3 AND ($4::timestamptz IS NULL OR updated_at < $4) "
            "ORDER BY updated_at DESC, conversation_id LIMIT $5",
            owner.tenant,
            owner.project,
            owner.user_id,
            _utc(before) if before is not None else None,
            max(limit, 0),
        )
        return [
            ConversationMeta(owner.conversation(cid), title, bundle, created, updated, source)
            for cid, title, bundle, created, updated, source in rows
        ]

    async def inactive_conversations(
        self, tenant: str, project: str, *, before: datetime, limit: int
    ) -> list[ConversationScope]:
        """Conversations of one tenant/project (every user's) last active before ``before``, least recent first."""
        rows = await self._fetch(
            "SELECT user_id, conversation_id FROM meta_conversations WHERE tenant=$1 AND project=$2 "
            "AND updated_at < $3 ORDER BY updated_at, user_id, conversation_id LIMIT $4",
            tenant,
            project,
            _utc(before),
            max(limit, 0),
        )
        return [
            ConversationScope(tenant=tenant, project=project, user_id=user, conversation_id=cid) for user, cid in rows
        ]

    async def erase_conversation(self, scope: ConversationScope) -> bool:
        """Delete the row and the feedback and give the usage records an anonymous conversation id, in one
        transaction (retried whole when its connection drops: a retry finds less to do)."""
        anonymous = erased_conversation_id()

        async def work(connection: Any) -> bool:
            key = _scope_values(scope)
            await connection.execute(f"DELETE FROM meta_feedback WHERE {_SCOPE_WHERE}", *key)  # noqa: S608
            await connection.execute(
                f"UPDATE meta_usage SET conversation_id=$5 WHERE {_SCOPE_WHERE}",  # noqa: S608 - constant SQL
                *key,
                anonymous,
            )
            status = await connection.execute(f"DELETE FROM meta_conversations WHERE {_SCOPE_WHERE}", *key)  # noqa: S608
            return bool(status != "DELETE 0")

        return await self._pool.in_transaction(work)

    async def put_feedback(self, feedback: Feedback) -> None:
        """Insert or replace one origin's feedback on a turn."""
        await self._pool.execute(
            "INSERT INTO meta_feedback (tenant, project, user_id, conversation_id, turn_id, origin, reaction, text, "
            "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "ON CONFLICT (tenant, project, user_id, conversation_id, turn_id, origin) "
            "DO UPDATE SET reaction=EXCLUDED.reaction, text=EXCLUDED.text, created_at=EXCLUDED.created_at",
            *_scope_values(feedback.scope),
            feedback.turn_id,
            feedback.origin,
            feedback.reaction,
            feedback.text,
            _utc(feedback.created_at),
        )

    async def feedback_for(self, scope: ConversationScope) -> list[Feedback]:
        """Every feedback on one conversation, oldest first."""
        rows = await self._fetch(
            "SELECT turn_id, reaction, text, origin, created_at FROM meta_feedback "  # noqa: S608 - constant SQL
            f"WHERE {_SCOPE_WHERE} ORDER BY created_at, turn_id, origin",
            *_scope_values(scope),
        )
        return [
            Feedback(scope, turn, cast(Reaction, reaction), text, origin, created)
            for turn, reaction, text, origin, created in rows
        ]

    async def feedback_between(self, tenant: str, project: str, start: datetime, end: datetime) -> list[Feedback]:
        """Feedback given in ``[start, end)`` in one tenant/project."""
        rows = await self._fetch(
            "SELECT user_id, conversation_id, turn_id, reaction, text, origin, created_at FROM meta_feedback "
            "WHERE tenant=$1 AND project=$2 AND created_at >= $3 AND created_at < $4 ORDER BY created_at",
            tenant,
            project,
            _utc(start),
            _utc(end),
        )
        return [
            Feedback(
                ConversationScope(tenant=tenant, project=project, user_id=user, conversation_id=cid),
                turn,
                reaction,
                text,
                origin,
                created,
            )
            for user, cid, turn, reaction, text, origin, created in rows
        ]

    async def record_usage(self, records: Sequence[UsageRecord]) -> None:
        """Store the model calls' usage, all of them in one transaction."""
        if not records:
            return
        rows = [
            (
                *_scope_values(r.scope),
                r.turn_id,
                r.bundle,
                r.model,
                r.purpose,
                r.input_tokens,
                r.output_tokens,
                r.cache_read_input_tokens,
                r.cache_creation_input_tokens,
                r.cost_usd,
                _utc(r.at),
            )
            for r in records
        ]

        async def work(connection: Any) -> None:
            await connection.executemany(
                "INSERT INTO meta_usage (tenant, project, user_id, conversation_id, turn_id, bundle, model, purpose, "
                "input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, cost_usd, at) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                rows,
            )

        await self._pool.in_transaction(work)

    async def usage_totals(
        self, tenant: str, project: str, start: datetime, end: datetime, group_by: UsageGrouping | None
    ) -> list[UsageTotals]:
        """Totals of one tenant/project in ``[start, end)``, per group ordered by key, or one row for all."""
        key = _USAGE_KEYS[group_by] if group_by is not None else "NULL::text"
        grouping = " GROUP BY 1 ORDER BY 1" if group_by is not None else ""
        rows = await self._fetch(
            f"SELECT {key}, {_USAGE_SUMS} FROM meta_usage "  # noqa: S608 - key and sums are constants of this module
            f"WHERE tenant=$1 AND project=$2 AND at >= $3 AND at < $4{grouping}",
            tenant,
            project,
            _utc(start),
            _utc(end),
        )
        return [
            UsageTotals(
                key=key_value,
                calls=calls,
                turns=turns,
                input_tokens=int(input_tokens),
                output_tokens=int(output_tokens),
                cache_read_input_tokens=int(cache_read),
                cache_creation_input_tokens=int(cache_write),
                cost_usd=cost,
                unpriced_calls=unpriced,
            )
            for key_value, calls, turns, input_tokens, output_tokens, cache_read, cache_write, cost, unpriced in rows
        ]

    async def usage_spent(
        self, since: datetime, *, tenant: str | None = None, project: str | None = None, user_id: str | None = None
    ) -> list[SpentRow]:
        """Tokens and priced cost per tenant, project, user and UTC day since ``since`` (narrowed when asked)."""
        rows = await self._fetch(
            "SELECT tenant, project, user_id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), "
            "SUM(input_tokens + output_tokens + cache_read_input_tokens + cache_creation_input_tokens), "
            "COALESCE(SUM(cost_usd), 0) FROM meta_usage WHERE at >= $1 "
            "AND ($2::text IS NULL OR tenant=$2) AND ($3::text IS NULL OR project=$3) "
            "AND ($4::text IS NULL OR user_id=$4) GROUP BY 1, 2, 3, 4",
            _utc(since),
            tenant,
            project,
            user_id,
        )
        return [
            SpentRow(tenant_, project_, user, day, int(tokens), float(cost))
            for tenant_, project_, user, day, tokens, cost in rows
        ]
