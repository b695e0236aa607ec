"""The PostgreSQL memory index: ``tsvector`` lexical ranking plus stored embeddings (migration ``0003_memory``).

Entries live in ``memory_entries``, one row per conversation and path. Their text is indexed as a generated
``tsvector`` column (the ``simple`` configuration: lower-cased words, no stemming, like the embedded FTS5 index)
under a GIN index, and ranked with ``ts_rank_cd``. Embeddings are stored portably as ``real[]`` (32-bit floats, as
the embedded index packs them); similarity is computed by the runtime over :meth:`PostgresMemoryIndex.list_entries`,
which fuses it with the lexical ranking by reciprocal rank exactly as for the embedded index
(:mod:`berth.runtime.memory`). A pgvector column and index, when the extension is installed, is future work.

Every query filters by tenant, project and user, and by conversation when one is given, in SQL, so no result can
come from outside the caller's scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, cast

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth.storage.memory import LexicalHit, MemoryEntry, MemoryFilter, MemoryKind
from berth.storage.scope import ConversationScope
from berth_postgres.pool import StorePool
from berth_postgres.retrying import DEFAULT_RETRY_BUDGET_S

__all__ = ["PostgresMemoryIndex", "tsquery", "write_entries"]

_WORD_RE: Final = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS: Final = 32

_COLUMNS: Final = (
    "e.tenant, e.project, e.user_id, e.conversation_id, e.path, e.turn_id, e.turn_ordinal, e.kind, e.ts, e.text, "
    "e.vector"
)
# Optional filters compare against NULL instead of being left out, so no SQL is assembled from pieces.
# Parameters: tenant, project, user, conversation, kinds, since, until.
_FILTER: Final = (
    "e.tenant = $1 AND e.project = $2 AND e.user_id = $3 AND ($4::text IS NULL OR e.conversation_id = $4) "
    "AND e.kind = ANY($5::text[]) AND ($6::timestamptz IS NULL OR e.ts >= $6) "
    "AND ($7::timestamptz IS NULL OR e.ts < $7)"
)
_LEXICAL_SQL: Final = (
    f"SELECT {_COLUMNS}, ts_rank_cd(e.document, q.query) AS score "  # noqa: S608 - constants of this module
    "FROM memory_entries e, to_tsquery('simple', $8) AS q(query) "
    f"WHERE e.document @@ q.query AND {_FILTER} "
    "ORDER BY score DESC, e.ts DESC, e.conversation_id, e.path LIMIT $9"
)
_LIST_SQL: Final = (
    f"SELECT {_COLUMNS} FROM memory_entries e WHERE {_FILTER} "  # noqa: S608 - constants of this module
    "ORDER BY e.ts, e.conversation_id, e.turn_ordinal, e.path"
)
_UPSERT_SQL: Final = (
    "INSERT INTO memory_entries (tenant, project, user_id, conversation_id, path, turn_id, turn_ordinal, kind, ts, "
    "text, vector) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) "
    "ON CONFLICT (tenant, project, user_id, conversation_id, path) DO UPDATE SET turn_id=EXCLUDED.turn_id, "
    "turn_ordinal=EXCLUDED.turn_ordinal, kind=EXCLUDED.kind, ts=EXCLUDED.ts, text=EXCLUDED.text, "
    "vector=EXCLUDED.vector"
)


async def write_entries(connection: Any, entries: Sequence[MemoryEntry]) -> None:
    """Insert or replace ``entries`` (keyed by conversation and path) in the caller's transaction on ``connection``:
    :meth:`PostgresMemoryIndex.add`, and the conversation store's commit of a turn (its entries commit with it)."""
    rows = []
    for entry in entries:
        if entry.ts.tzinfo is None:
            raise ValueError("memory timestamps must be timezone-aware")
        s = entry.scope
        rows.append(
            (
                s.tenant,
                s.project,
                s.user_id,
                s.conversation_id,
                entry.path,
                entry.turn_id,
                entry.turn_ordinal,
                entry.kind,
                entry.ts,
                entry.text,
                list(entry.vector),
            )
        )
    await connection.executemany(_UPSERT_SQL, rows)


def tsquery(text: str) -> str | None:
    """Turn free text into a ``tsquery`` that cannot be malformed: its words, quoted, OR-ed.

    Returns ``None`` when the text has no words (nothing to match).
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD_RE.findall(text)))[:_MAX_QUERY_TERMS]
    return " | ".join(f"'{word}'" for word in words) if words else None


def _filter_arguments(where: MemoryFilter) -> tuple[Any, ...]:
    for bound in (where.since, where.until):
        if bound is not None and bound.tzinfo is None:
            raise ValueError("memory timestamps must be timezone-aware")
    owner = where.owner
    return (
        owner.tenant,
        owner.project,
        owner.user_id,
        where.conversation_id,
        sorted(where.kinds),
        where.since,
        where.until,
    )


def _entry(row: Sequence[Any]) -> MemoryEntry:
    tenant, project, user_id, conversation_id, path, turn_id, ordinal, kind, ts, text, vector = row[:11]
    return MemoryEntry(
        scope=ConversationScope(tenant=tenant, project=project, user_id=user_id, conversation_id=conversation_id),
        path=path,
        turn_id=turn_id,
        turn_ordinal=ordinal,
        kind=cast(MemoryKind, kind),
        ts=ts,
        text=text,
        vector=tuple(vector),
    )


class PostgresMemoryIndex:
    """The PostgreSQL :class:`~berth.storage.memory.MemoryIndex` (``tsvector`` + stored ``real[]`` vectors).

    :param dsn: the database to open a pool on (the index owns and closes it), or
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

    async def add(self, entries: tuple[MemoryEntry, ...]) -> None:
        """Insert or replace entries (keyed by conversation and path), in one transaction."""
        if not entries:
            return

        async def work(connection: Any) -> None:
            await write_entries(connection, entries)

        await self._pool.in_transaction(work)

    async def search_lexical(self, where: MemoryFilter, query: str, *, limit: int) -> tuple[LexicalHit, ...]:
        """Return up to ``limit`` entries matching ``query`` by ``ts_rank_cd``, best first."""
        match = tsquery(query)
        if match is None or limit <= 0:
            return ()
        rows = await self._pool.fetch(_LEXICAL_SQL, *_filter_arguments(where), match, limit)
        return tuple(LexicalHit(entry=_entry(row), score=float(row["score"])) for row in rows)

    async def erase_conversation(self, scope: ConversationScope) -> int:
        """Delete every entry of one conversation (its text, vector and ``tsvector`` go with the row)."""
        status = await self._pool.execute(
            "DELETE FROM memory_entries WHERE tenant=$1 AND project=$2 AND user_id=$3 AND conversation_id=$4",
            scope.tenant,
            scope.project,
            scope.user_id,
            scope.conversation_id,
        )
        return int(status.rpartition(" ")[2] or 0)

    async def list_entries(self, where: MemoryFilter) -> tuple[MemoryEntry, ...]:
        """Return every entry ``where`` admits, oldest first (ties by conversation, turn and path)."""
        rows = await self._pool.fetch(_LIST_SQL, *_filter_arguments(where))
        return tuple(_entry(row) for row in rows)
