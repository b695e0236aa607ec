"""The distributed conversation store: PostgreSQL through an asyncpg pool.

The tables are those of migration ``0001_conversations`` (``berth_conversations``, ``berth_turns``,
``berth_turn_log``, ``berth_timeline``, ``berth_sources``, ``berth_artifacts``); the store never creates
them: :meth:`PostgresConversationStore.open` refuses a database whose schema is behind and names the command
that fixes it (``berth migrate``).

Tenant/project scoping: by scoped columns. Every table's key begins with ``(tenant, project, user_id,
conversation_id)`` and every query names that whole scope, taken from the handle's bound
:class:`~berth.storage.scope.ConversationScope` (or the :class:`~berth.storage.scope.OwnerScope` of a
listing), in its ``WHERE`` clause; no query reaches another scope's rows. Not a schema per tenant: a
migration then runs once over one schema instead of once per tenant (thousands of them, each of which can
fail half-way), one connection pool serves every tenant (``search_path`` would have to be switched per
query), and the catalog stays small however many tenants there are.

How writes stay atomic: each operation is one transaction. A commit locks the conversation row
(``SELECT … FOR UPDATE``) and checks the base version inside the transaction, so two commits to one
conversation serialize and the second is refused (``conflicting_commit``) instead of half-applying. When
the connection drops during an operation (``pg_terminate_backend``, a restarted server, a network cut), the
transaction rolls back and the operation is retried on a fresh connection, with backoff, for as long as the retry
budget lasts (:mod:`berth_postgres.retrying`: 60 s by default, so a failover or a short outage makes a turn wait, not
fail); a retry that finds its
first attempt already landed (the reply was lost, not the write) returns what the first attempt did: a
commit finds its turn committed at ``base_version + 1``, an accept or begin finds the turn in the state it
wrote, an append finds the same blocks as the turn's last round.

Owners: each store instance takes a random 64-bit key and holds a session-level advisory lock on it
(``pg_advisory_lock``) on a connection of its own for as long as it is open; every turn it accepts or begins
records that key as its ``owner``. An owner whose lock is free (``pg_try_advisory_xact_lock`` succeeds from
another session) is gone, and its ``accepted`` or ``running`` turns are recorded ``interrupted`` (at
:meth:`~PostgresConversationStore.open`, by
:meth:`~PostgresConversationStore.recover_interrupted_turns`, and by each load of the conversation). The
check's lock is transaction-scoped, so it is released when the recording transaction ends. (Should the
owner connection itself drop while the instance lives, its lock is gone and another instance may record its
running turns interrupted or, in queued mode, take them over; the instance takes its lock again on a new
connection at once, and in queued mode every write to a turn checks that the writer still owns it.)

Queued mode (``queued=True``, distributed storage): turns belong to the turn queue
(:mod:`berth.distributed`) until a worker claims them. An accepted turn's owner is ``0`` (the queue's), a
conversation holds at most one unfinished turn (a second accept is refused, ``turn_in_progress``), and a
turn whose owner is gone is *not* recorded interrupted: :meth:`~PostgresConversationStore.orphaned_turns`
finds it and :meth:`~PostgresConversationStore.claim_turn` hands it, with its log, to the worker that
resumes it.
"""

# Every query is built from the module's constant fragments; values are always bound parameters.
# ruff: noqa: S608

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import PurePosixPath
from types import TracebackType
from typing import Any, Final, Self, TypeVar, cast

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth.config.errors import ConfigError
from berth.storage.artifacts import ArtifactStore, artifact_key, artifact_prefix
from berth.storage.claims import POISONED, ClaimedTurn, ParkedTurn, UnfinishedTurn
from berth.storage.conversations import (
    ArtifactWrite,
    BlockRecord,
    ConversationRecord,
    ConversationSnapshot,
    InterruptedTurn,
    LoggedBlock,
    SourceRecord,
    StorageError,
    TimelineChange,
    TurnCommit,
    TurnLog,
    TurnRecord,
    TurnRound,
    TurnState,
    TurnUsage,
)
from berth.storage.scope import ConversationScope, OwnerScope
from berth_postgres.memory import write_entries as write_memory_entries
from berth_postgres.pool import CONNECTION_LOST, transaction_attempt
from berth_postgres.retrying import DEFAULT_RETRY_BUDGET_S, RetryPolicy, connection_lost

__all__ = ["REQUIRED_MIGRATIONS", "PostgresConversationHandle", "PostgresConversationStore"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

Connection = Any
"""An ``asyncpg.Connection`` (asyncpg ships no type information)."""

QUEUE_OWNER: Final = 0
"""The owner of a turn the queue holds (accepted, claimed by no worker yet); no advisory lock has this key."""

REQUIRED_MIGRATIONS: Final = ("0001_conversations", "0004_queued_turns", "0006_turn_attempts")
"""The migrations (``berth_schema_migrations.version``) this store's queries need."""

_CONNECTION_LOST: Final = CONNECTION_LOST

_CONVERSATION_TABLES: Final = (
    "berth_turn_log",
    "berth_timeline",
    "berth_sources",
    "berth_artifacts",
    "berth_turns",
    "berth_conversations",
)
"""The tables holding a conversation, in the order its rows are deleted (a row before the rows it refers to)."""

_SCOPE: Final = "tenant=$1 AND project=$2 AND user_id=$3 AND conversation_id=$4"
"""The scope condition every per-conversation query carries (its first four parameters)."""

_ROUNDS: Final = (
    "CASE WHEN committed THEN rounds ELSE (SELECT COALESCE(MAX(l.round), 0) FROM berth_turn_log l"
    " WHERE l.tenant=$1 AND l.project=$2 AND l.user_id=$3 AND l.conversation_id=$4 AND l.turn_id=turns.turn_id) END"
)
"""A turn's round count: recorded at its commit; until then, the last round its log holds."""

_SELECT_TURN: Final = (
    "SELECT turn_id, state, started_at, ended_at, generation, "
    + _ROUNDS
    + " AS rounds, input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, exit_reason,"
    " committed, attempts, last_error FROM berth_turns turns WHERE " + _SCOPE
)
"""The columns :func:`_turn_record` reads (a query adds its further conditions and order)."""

_MARK_GONE_OWNERS_INTERRUPTED: Final = (
    "UPDATE berth_turns SET state='interrupted' WHERE NOT committed AND state IN ('accepted', 'running')"
    " AND owner <> $5 AND pg_try_advisory_xact_lock_shared(owner)"
)
"""Record as interrupted the unfinished turns whose owner's advisory lock is free (the owner is gone).
Parameters: the scope ($1 to $4, when a scope condition is added) and this store's own key ($5)."""

_INSERT_TIMELINE_ROWS: Final = (
    "INSERT INTO berth_timeline (tenant, project, user_id, conversation_id, position, turn_id, path, type,"
    " log_round, log_position, block)"
    " SELECT $1, $2, $3, $4, * FROM unnest($5::int[], $6::text[], $7::text[], $8::text[], $9::int[], $10::int[],"
    " $11::text[])"
    " ON CONFLICT (tenant, project, user_id, conversation_id, position) DO UPDATE SET turn_id=excluded.turn_id,"
    " path=excluded.path, type=excluded.type, log_round=excluded.log_round, log_position=excluded.log_position,"
    " block=excluded.block"
)

_TIMELINE_JOIN_LOG: Final = (
    "FROM berth_timeline t LEFT JOIN berth_turn_log l ON t.block IS NULL AND l.tenant=t.tenant"
    " AND l.project=t.project AND l.user_id=t.user_id AND l.conversation_id=t.conversation_id"
    " AND l.turn_id=t.turn_id AND l.round=t.log_round AND l.position=t.log_position AND l.path=t.path"
    " WHERE t.tenant=$1 AND t.project=$2 AND t.user_id=$3 AND t.conversation_id=$4"
)
"""Joins each timeline row that refers to the turn log with the entry it names (the path must match)."""


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("storage timestamps must be timezone-aware")
    return value.astimezone(UTC)


def _checked_artifact_path(path: str) -> str:
    """Return ``path`` if it is a safe relative POSIX path; raise ``unsafe_artifact_path`` otherwise."""
    bad = (
        not path
        or "\x00" in path
        or "\\" in path
        or path.startswith("/")
        or any(part in ("", ".", "..") for part in path.split("/"))
    )
    if bad or PurePosixPath(path).is_absolute():
        raise StorageError("unsafe_artifact_path", f"artifact path {path[:120]!r} must be relative, without '..'")
    return path


def _turn_record(row: Any) -> TurnRecord:
    """Build a :class:`TurnRecord` from a row of :data:`_SELECT_TURN`."""
    return TurnRecord(
        turn_id=row["turn_id"],
        state=cast(TurnState, row["state"]),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        generation=row["generation"],
        rounds=row["rounds"],
        usage=TurnUsage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_input_tokens=row["cache_read_input_tokens"],
            cache_creation_input_tokens=row["cache_creation_input_tokens"],
        ),
        exit_reason=row["exit_reason"],
        attempts=row["attempts"],
        error=row["last_error"],
    )


_ERROR_CHARS: Final = 2000
"""The longest error text kept with a turn."""


def _poisoned_reason(attempts: int, last_error: str | None) -> str:
    """Why a turn is parked: how many attempts it had, and how the last one ended."""
    how = f"its last attempt ended with: {last_error}" if last_error else "its worker stopped each time"
    return f"the turn was begun {attempts} times without finishing ({how}); it will not be run again"


def _row_scope(row: Any) -> ConversationScope:
    """The conversation a row's ``tenant``, ``project``, ``user_id`` and ``conversation_id`` name."""
    return ConversationScope(
        tenant=row["tenant"], project=row["project"], user_id=row["user_id"], conversation_id=row["conversation_id"]
    )


def _scope_args(scope: ConversationScope) -> tuple[str, str, str, str]:
    return (scope.tenant, scope.project, scope.user_id, scope.conversation_id)


class PostgresConversationHandle:
    """One conversation of a :class:`PostgresConversationStore`, bound to its scope."""

    def __init__(self, store: PostgresConversationStore, scope: ConversationScope) -> None:
        self._store = store
        self._scope = scope
        self._key = _scope_args(scope)

    @property
    def scope(self) -> ConversationScope:
        """The tenant, project, user and conversation this handle is limited to."""
        return self._scope

    # -- reads -----------------------------------------------------------------------------------

    async def _rounds(self, connection: Connection, turn_id: str) -> tuple[TurnRound, ...]:
        rows = await connection.fetch(
            "SELECT round, path, type, block FROM berth_turn_log WHERE " + _SCOPE + " AND turn_id=$5"
            " ORDER BY round, position",
            *self._key,
            turn_id,
        )
        rounds: dict[int, list[BlockRecord]] = {}
        for row in rows:
            rounds.setdefault(row["round"], []).append(
                BlockRecord(turn_id=turn_id, path=row["path"], type=row["type"], json=row["block"])
            )
        return tuple(TurnRound(index=index, blocks=tuple(blocks)) for index, blocks in rounds.items())

    async def load(self, *, known_version: int | None = None, turn_index: bool = True) -> ConversationSnapshot:
        """Read the committed timeline, the sources pool, the turn index and the logs of interrupted turns.

        One transaction holding the conversation row ``FOR SHARE``, so no commit lands between its reads.
        Turns of this conversation left unfinished by an owner that is gone are recorded ``interrupted`` first.

        :param known_version: the version of a timeline the caller holds; when it is still the stored
            one, the timeline is not read (the snapshot's ``timeline`` is ``None``).
        :param turn_index: with ``False``, ``turns`` holds only the interrupted turns of ``uncommitted``.
        """

        async def work(connection: Connection, retried: bool) -> ConversationSnapshot:
            version = await connection.fetchval(
                "SELECT version FROM berth_conversations WHERE " + _SCOPE + " FOR SHARE", *self._key
            )
            if version is None:
                return ConversationSnapshot(
                    scope=self._scope, timeline=(), version=0, sources=(), turns=(), uncommitted=()
                )
            if not self._store.queued:  # queued: a worker resumes it instead
                await connection.execute(
                    _MARK_GONE_OWNERS_INTERRUPTED + " AND " + _SCOPE, *self._key, self._store.owner_key
                )
            turn_rows = await connection.fetch(
                _SELECT_TURN + ("" if turn_index else " AND state='interrupted' AND NOT committed") + " ORDER BY seq",
                *self._key,
            )
            turns = tuple(_turn_record(row) for row in turn_rows)
            uncommitted = []
            for turn, row in zip(turns, turn_rows, strict=True):
                if turn.state == "interrupted" and not row["committed"]:
                    uncommitted.append(TurnLog(turn=turn, rounds=await self._rounds(connection, turn.turn_id)))
            sources = tuple(
                SourceRecord(sid=row["sid"], json=row["row"])
                for row in await connection.fetch(
                    "SELECT sid, row FROM berth_sources WHERE " + _SCOPE + " ORDER BY sid", *self._key
                )
            )
            timeline = None
            if version != known_version:
                timeline = tuple(
                    BlockRecord(turn_id=row[0], path=row[1], type=row[2], json=row[3])
                    for row in await connection.fetch(
                        "SELECT t.turn_id, t.path, t.type, COALESCE(t.block, l.block) "
                        + _TIMELINE_JOIN_LOG
                        + " ORDER BY t.position",
                        *self._key,
                    )
                )
            return ConversationSnapshot(
                scope=self._scope,
                timeline=timeline,
                version=version,
                sources=sources,
                turns=turns,
                uncommitted=tuple(uncommitted),
            )

        return await self._store.transaction(work)

    async def read_turn_log(self, turn_id: str) -> TurnLog:
        """Return one turn's log (every round appended, whatever compaction later dropped)."""

        async def work(connection: Connection, retried: bool) -> TurnLog:
            row = await connection.fetchrow(_SELECT_TURN + " AND turn_id=$5", *self._key, turn_id)
            if row is None:
                raise StorageError("turn_not_found", f"this conversation has no turn {turn_id!r}")
            return TurnLog(turn=_turn_record(row), rounds=await self._rounds(connection, turn_id))

        return await self._store.transaction(work)

    async def read_artifact(self, path: str) -> bytes:
        """Return a committed artifact of this conversation."""
        data, location = await self.artifact_at(path)
        if data is not None:
            return data
        objects = self._store.artifacts
        if objects is None:
            raise StorageError("artifact_not_found", f"artifact {path!r} is in an object store this store has not")
        try:
            return await objects.get(location)
        except KeyError:
            raise StorageError("artifact_not_found", f"the object of artifact {path!r} is missing") from None

    async def artifact_at(self, path: str) -> tuple[bytes | None, str]:
        """A committed artifact's bytes when this database holds them, else ``(None, its object key)``.

        :raises StorageError: ``artifact_not_found``, ``unsafe_artifact_path``.
        """
        checked = _checked_artifact_path(path)

        async def work(connection: Connection, retried: bool) -> tuple[bytes | None, str]:
            row = await connection.fetchrow(
                "SELECT data, location FROM berth_artifacts WHERE " + _SCOPE + " AND path=$5", *self._key, checked
            )
            if row is None:
                raise StorageError("artifact_not_found", f"no committed artifact at {checked!r}")
            if row["data"] is not None:
                return bytes(row["data"]), ""
            return None, str(row["location"])

        return await self._store.transaction(work)

    # -- writes ----------------------------------------------------------------------------------

    async def erase(self) -> tuple[str, ...]:
        """Delete the conversation's rows (turn log, timeline, sources, artifacts, turns, the conversation) in one
        transaction, then its objects in the artifact store (every key under its prefix, those no row names too: an
        upload a failed commit left behind); return the ids of the turns it had."""

        async def work(connection: Connection, retried: bool) -> tuple[str, ...]:
            await connection.execute("SELECT 1 FROM berth_conversations WHERE " + _SCOPE + " FOR UPDATE", *self._key)
            turn_ids = tuple(
                row["turn_id"]
                for row in await connection.fetch(
                    "SELECT turn_id FROM berth_turns WHERE " + _SCOPE + " ORDER BY seq", *self._key
                )
            )
            for table in _CONVERSATION_TABLES:  # children first: the log refers to turns, turns to the conversation
                await connection.execute("DELETE FROM " + table + " WHERE " + _SCOPE, *self._key)
            return turn_ids

        turn_ids = await self._store.transaction(work)
        if self._store.artifacts is not None:
            await self._store.artifacts.delete_prefix(artifact_prefix(self._scope))
        return turn_ids

    async def _next_seq(self, connection: Connection, now: datetime) -> int:
        """Create the conversation row if needed and count one more turn; return the new turn's ``seq``.

        The update locks the conversation row until the transaction ends, so turns get distinct ``seq``s.
        """
        await connection.execute(
            "INSERT INTO berth_conversations (tenant, project, user_id, conversation_id, created_at, updated_at)"
            " VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT DO NOTHING",
            *self._key,
            now,
        )
        seq = await connection.fetchval(
            "UPDATE berth_conversations SET turn_count = turn_count + 1 WHERE " + _SCOPE + " RETURNING turn_count - 1",
            *self._key,
        )
        return cast(int, seq)

    async def _insert_blocks(
        self, connection: Connection, turn_id: str, index: int, blocks: Sequence[BlockRecord]
    ) -> None:
        for record in blocks:
            if record.turn_id != turn_id:
                raise ValueError(f"block {record.path!r} belongs to {record.turn_id!r}, not to turn {turn_id!r}")
        if not blocks:
            return
        await connection.execute(
            "INSERT INTO berth_turn_log (tenant, project, user_id, conversation_id, turn_id, round, position, path,"
            " type, block) SELECT $1, $2, $3, $4, $5, $6, *"
            " FROM unnest($7::int[], $8::text[], $9::text[], $10::text[])",
            *self._key,
            turn_id,
            index,
            list(range(len(blocks))),
            [r.path for r in blocks],
            [r.type for r in blocks],
            [r.json for r in blocks],
        )

    async def _upsert_sources(self, connection: Connection, sources: Sequence[SourceRecord]) -> None:
        if not sources:
            return
        await connection.execute(
            "INSERT INTO berth_sources (tenant, project, user_id, conversation_id, sid, row)"
            " SELECT $1, $2, $3, $4, * FROM unnest($5::int[], $6::text[])"
            " ON CONFLICT (tenant, project, user_id, conversation_id, sid) DO UPDATE SET row=excluded.row",
            *self._key,
            [s.sid for s in sources],
            [s.json for s in sources],
        )

    async def accept_turn(
        self, turn_id: str, *, accepted_at: datetime, head: tuple[BlockRecord, ...], request: bytes | None = None
    ) -> None:
        """Record an ``accepted`` turn and its head, durably (committed before it returns).

        :param request: in queued mode, what a worker runs the turn from (:meth:`PostgresConversationStore.claim_turn`).
        """
        at = _aware(accepted_at)
        queued = self._store.queued
        owner = QUEUE_OWNER if queued else self._store.owner_key

        async def work(connection: Connection, retried: bool) -> None:
            found = await connection.fetchrow(
                "SELECT state, owner, started_at FROM berth_turns WHERE " + _SCOPE + " AND turn_id=$5",
                *self._key,
                turn_id,
            )
            if found is not None:
                if retried and (found["state"], found["owner"], found["started_at"]) == ("accepted", owner, at):
                    return  # the first attempt landed; its reply was lost
                raise StorageError("turn_exists", f"turn {turn_id!r} is already used; use a new turn id")
            seq = await self._next_seq(connection, at)  # locks the conversation row: accepts serialize here
            if queued:
                busy = await connection.fetchval(
                    "SELECT turn_id FROM berth_turns WHERE " + _SCOPE + " AND NOT committed"
                    " AND state IN ('accepted', 'running') LIMIT 1",
                    *self._key,
                )
                if busy is not None:
                    raise StorageError("turn_in_progress", f"turn {busy} of this conversation has not ended yet")
            await connection.execute(
                "INSERT INTO berth_turns (tenant, project, user_id, conversation_id, turn_id, seq, state, started_at,"
                " owner, request) VALUES ($1, $2, $3, $4, $5, $6, 'accepted', $7, $8, $9)",
                *self._key,
                turn_id,
                seq,
                at,
                owner,
                request,
            )
            await self._insert_blocks(connection, turn_id, 0, head)

        await self._store.transaction(work)

    async def end_unstarted_turn(self, turn_id: str, *, state: TurnState, ended_at: datetime) -> None:
        """End an ``accepted`` turn that never began; does nothing to a turn in any other state."""
        at = _aware(ended_at)

        async def work(connection: Connection, retried: bool) -> None:
            await connection.execute(
                "UPDATE berth_turns SET state=$6, committed=TRUE, ended_at=$7, exit_reason=$6 WHERE "
                + _SCOPE
                + " AND turn_id=$5 AND state='accepted'",
                *self._key,
                turn_id,
                state,
                at,
            )

        await self._store.transaction(work)

    async def begin_turn(
        self, turn_id: str, *, started_at: datetime, generation: str | None, head: tuple[BlockRecord, ...]
    ) -> None:
        """Record a new ``running`` turn and its head blocks (round 0 of its log); an ``accepted`` turn of that
        id becomes ``running``, its head replaced."""
        at = _aware(started_at)
        owner = self._store.owner_key

        async def work(connection: Connection, retried: bool) -> None:
            found = await connection.fetchrow(
                "SELECT state, owner, started_at, generation FROM berth_turns WHERE "
                + _SCOPE
                + " AND turn_id=$5 FOR UPDATE",
                *self._key,
                turn_id,
            )
            if self._store.queued and found is None:  # a queued turn is accepted first: its conversation was deleted
                raise StorageError("turn_not_found", f"turn {turn_id!r} is not stored (its conversation was deleted?)")
            if self._store.queued and found is not None and found["owner"] != owner:
                raise StorageError("turn_owned", f"turn {turn_id!r} is not this process's: claim it first")
            if found is not None and found["state"] != "accepted":
                landed = (found["state"], found["owner"], found["started_at"], found["generation"]) == (
                    "running",
                    owner,
                    at,
                    generation,
                )
                if retried and landed:
                    return  # the first attempt landed; its reply was lost
                raise StorageError("turn_exists", f"turn {turn_id!r} was already begun; use a new turn id")
            if found is None:
                seq = await self._next_seq(connection, at)
                await connection.execute(
                    "INSERT INTO berth_turns (tenant, project, user_id, conversation_id, turn_id, seq, state,"
                    " started_at, generation, owner) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $9)",
                    *self._key,
                    turn_id,
                    seq,
                    at,
                    generation,
                    owner,
                )
            else:
                await connection.execute(
                    "UPDATE berth_turns SET state='running', started_at=$6, generation=$7, owner=$8 WHERE "
                    + _SCOPE
                    + " AND turn_id=$5",
                    *self._key,
                    turn_id,
                    at,
                    generation,
                    owner,
                )
                await connection.execute(
                    "DELETE FROM berth_turn_log WHERE " + _SCOPE + " AND turn_id=$5 AND round=0", *self._key, turn_id
                )
            await self._insert_blocks(connection, turn_id, 0, head)

        await self._store.transaction(work)

    async def _locked_turn(self, connection: Connection, turn_id: str) -> tuple[str, bool, int, int | None]:
        """Lock the turn's row; return its state, whether it is committed, its round count and committed version.

        In queued mode a write to an unfinished turn another instance owns is refused (``turn_owned``): the turn
        was taken over (this instance's owner lock was lost), and only its new owner may go on with it.
        """
        row = await connection.fetchrow(
            "SELECT state, committed, committed_version, owner, "
            + _ROUNDS
            + " AS rounds FROM berth_turns turns WHERE "
            + _SCOPE
            + " AND turn_id=$5 FOR UPDATE",
            *self._key,
            turn_id,
        )
        if row is None:
            raise StorageError("turn_not_found", f"turn {turn_id!r} was never begun; call begin_turn first")
        if self._store.queued and not row["committed"] and row["owner"] != self._store.owner_key:
            raise StorageError("turn_owned", f"turn {turn_id!r} was taken over by another process")
        return row["state"], row["committed"], row["rounds"], row["committed_version"]

    async def append_round(
        self, turn_id: str, blocks: tuple[BlockRecord, ...], *, sources: tuple[SourceRecord, ...] = ()
    ) -> int:
        """Append one completed round to the turn log in one transaction; return its round index."""

        async def work(connection: Connection, retried: bool) -> int:
            state, _, rounds, _ = await self._locked_turn(connection, turn_id)
            if retried and rounds > 0 and await self._round_holds(connection, turn_id, rounds, blocks):
                return rounds  # the first attempt landed; its reply was lost
            if state != "running":
                raise StorageError("turn_not_running", f"turn {turn_id!r} is {state}; rounds go to running turns")
            index = rounds + 1
            await self._insert_blocks(connection, turn_id, index, blocks)
            await self._upsert_sources(connection, sources)
            return index

        return await self._store.transaction(work)

    async def _round_holds(
        self, connection: Connection, turn_id: str, index: int, blocks: Sequence[BlockRecord]
    ) -> bool:
        """Whether round ``index`` of the turn's log holds exactly ``blocks``."""
        rows = await connection.fetch(
            "SELECT path, block FROM berth_turn_log WHERE " + _SCOPE + " AND turn_id=$5 AND round=$6 ORDER BY position",
            *self._key,
            turn_id,
            index,
        )
        return [(row["path"], row["block"]) for row in rows] == [(b.path, b.json) for b in blocks]

    async def _artifact_rows(
        self, files: Sequence[ArtifactWrite]
    ) -> list[tuple[str, str, int, bytes | None, str | None]]:
        """``(path, sha256, size, data, object key)`` rows of ``files``, their bytes uploaded first when an object
        store holds them (content-addressed: immutable, and harmless if the write that refers to them fails)."""
        rows: list[tuple[str, str, int, bytes | None, str | None]] = []
        objects = self._store.artifacts
        for artifact in files:
            path, digest = _checked_artifact_path(artifact.path), hashlib.sha256(artifact.data).hexdigest()
            if objects is None:
                rows.append((path, digest, len(artifact.data), artifact.data, None))
                continue
            key = artifact_key(self._scope, digest)
            await objects.put(key, artifact.data)
            rows.append((path, digest, len(artifact.data), None, key))
        return rows

    async def _upsert_artifacts(
        self,
        connection: Connection,
        turn_id: str,
        rows: Sequence[tuple[str, str, int, bytes | None, str | None]],
    ) -> None:
        await connection.executemany(
            "INSERT INTO berth_artifacts (tenant, project, user_id, conversation_id, path, sha256, size, turn_id,"
            " data, location) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            " ON CONFLICT (tenant, project, user_id, conversation_id, path) DO UPDATE SET sha256=excluded.sha256,"
            " size=excluded.size, turn_id=excluded.turn_id, data=excluded.data, location=excluded.location",
            [(*self._key, path, digest, size, turn_id, *stored) for path, digest, size, *stored in rows],
        )

    async def store_files(self, turn_id: str, files: tuple[ArtifactWrite, ...]) -> None:
        """Store files a running turn produced (objects first, then their rows, fenced by the turn's owner), before
        the turn announces them."""
        if not files:
            return
        rows = await self._artifact_rows(files)

        async def work(connection: Connection, retried: bool) -> None:
            await self._locked_turn(connection, turn_id)  # refused when another process took the turn over
            await self._upsert_artifacts(connection, turn_id, rows)

        await self._store.transaction(work)

    async def turn_files(self, turn_id: str) -> tuple[ArtifactWrite, ...]:
        """The files stored for turn ``turn_id`` so far, by path (their bytes read from the object store if there)."""

        async def work(connection: Connection, retried: bool) -> list[Any]:
            return list(
                await connection.fetch(
                    "SELECT path, data, location FROM berth_artifacts WHERE "
                    + _SCOPE
                    + " AND turn_id=$5 ORDER BY path",
                    *self._key,
                    turn_id,
                )
            )

        files = []
        for row in await self._store.transaction(work):
            if row["data"] is not None:
                files.append(ArtifactWrite(row["path"], bytes(row["data"])))
            elif self._store.artifacts is not None:
                files.append(ArtifactWrite(row["path"], await self._store.artifacts.get(row["location"])))
        return tuple(files)

    async def commit_turn(self, commit: TurnCommit) -> int:
        """Write the timeline, sources, final round, artifacts and turn state in one transaction; return the new
        version.

        :raises StorageError: ``turn_not_found``, ``conflicting_commit``, ``unsafe_artifact_path``,
            ``unknown_logged_block`` (nothing is written then).
        """
        artifacts = await self._artifact_rows(commit.artifacts)
        ended_at = _aware(commit.ended_at)

        async def work(connection: Connection, retried: bool) -> int:
            return await self.apply_commit(connection, commit, ended_at, artifacts, retried=retried)

        return await self._store.transaction(work)

    async def apply_commit(
        self,
        connection: Connection,
        commit: TurnCommit,
        ended_at: datetime,
        artifacts: Sequence[tuple[str, str, int, bytes | None, str | None]],
        *,
        retried: bool,
    ) -> int:
        """The body of :meth:`commit_turn`, inside its transaction on ``connection``.

        :param retried: this is the retry of an attempt whose connection dropped: a turn found committed at
            ``base_version + 1`` is that attempt's commit, which landed; its version is returned.
        """
        version = await connection.fetchval(
            "SELECT version FROM berth_conversations WHERE " + _SCOPE + " FOR UPDATE", *self._key
        )
        if version is None:
            raise StorageError("turn_not_found", f"turn {commit.turn_id!r} was never begun; call begin_turn first")
        _, committed, rounds, committed_version = await self._locked_turn(connection, commit.turn_id)
        if committed:
            if retried and committed_version == commit.base_version + 1:
                return committed_version
            raise StorageError("conflicting_commit", f"turn {commit.turn_id!r} was already committed")
        if version != commit.base_version:
            raise StorageError(
                "conflicting_commit",
                f"the conversation changed since version {commit.base_version}; reload it and retry",
            )
        if commit.final_round:
            rounds += 1
            await self._insert_blocks(connection, commit.turn_id, rounds, commit.final_round)
        if commit.memory:
            await write_memory_entries(connection, commit.memory)
        await self._write_timeline(connection, commit.timeline)
        await self._upsert_sources(connection, commit.sources)
        if artifacts:
            await self._upsert_artifacts(connection, commit.turn_id, artifacts)
        usage = commit.usage
        new_version = commit.base_version + 1
        await connection.execute(
            "UPDATE berth_turns SET state=$6, committed=TRUE, committed_version=$7, ended_at=$8, rounds=$9,"
            " input_tokens=$10, output_tokens=$11, cache_read_input_tokens=$12, cache_creation_input_tokens=$13,"
            " exit_reason=$14 WHERE " + _SCOPE + " AND turn_id=$5",
            *self._key,
            commit.turn_id,
            commit.state,
            new_version,
            ended_at,
            rounds,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
            commit.exit_reason,
        )
        await connection.execute(
            "UPDATE berth_conversations SET version=$5, updated_at=$6, title=COALESCE($7, title) WHERE " + _SCOPE,
            *self._key,
            new_version,
            ended_at,
            commit.title,
        )
        return new_version

    async def _write_timeline(self, connection: Connection, change: TimelineChange) -> None:
        """Apply ``change``; a block the turn log holds is stored as a reference to its log entry."""
        await connection.execute(
            "DELETE FROM berth_timeline WHERE " + _SCOPE + " AND position>=$5", *self._key, change.length
        )
        if not change.writes:
            return
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        for position, write in change.writes:
            if isinstance(write, LoggedBlock):
                r = write.record
                row: tuple[Any, ...] = (position, r.turn_id, r.path, r.type, write.round, write.position, None)
            else:
                row = (position, write.turn_id, write.path, write.type, None, None, write.json)
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        await connection.execute(_INSERT_TIMELINE_ROWS, *self._key, *columns)
        dangling = await connection.fetchrow(
            "SELECT t.position, t.path " + _TIMELINE_JOIN_LOG + " AND t.position>=$5 AND t.block IS NULL"
            " AND l.block IS NULL LIMIT 1",
            *self._key,
            change.writes[0][0],
        )
        if dangling is not None:
            raise StorageError(
                "unknown_logged_block",
                f"timeline position {dangling[0]} refers to a turn-log entry that does not hold {dangling[1]!r}",
            )


class PostgresConversationStore:
    """The distributed :class:`~berth.storage.conversations.ConversationStore`: PostgreSQL through asyncpg.

    :param dsn: a libpq connection string or URL (``postgresql://user@host:5432/berth``).
    :param pool_min: connections the pool keeps open.
    :param pool_max: connections the pool opens at most (plus one this instance holds for its owner lock).
    :param queued: queued mode (see the module's docstring): for distributed storage with a turn queue.
    :param artifacts: the object store for file bytes (uploaded before the commit, content-addressed); without
        one they are kept in ``berth_artifacts.data``.
    :param retry_budget_s: how long an operation whose connection drops, or cannot be opened, goes on retrying
        (:class:`~berth_postgres.retrying.RetryPolicy`) before it fails.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        queued: bool = False,
        artifacts: ArtifactStore | None = None,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        self.dsn = dsn
        self.retry = RetryPolicy(budget_s=retry_budget_s)
        """How an operation whose connection drops or cannot be opened is retried (and the owner lock retaken)."""
        self.queued = queued
        self.artifacts = artifacts
        """Where file bytes go (S3, a folder); None keeps them in the database."""
        """Turns belong to the turn queue until claimed; a gone owner's turns are resumed, not interrupted."""
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.owner_key: int = secrets.randbits(63)
        """This instance's owner id: the key of the advisory lock it holds while open."""
        self.interrupted_at_open: tuple[InterruptedTurn, ...] = ()
        """The turns :meth:`open` found left unfinished by an owner that is gone (now ``interrupted``)."""
        self._pool: Any = None
        self._owner_connection: Connection = None
        self._owner_retake: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Open the pool, check the schema is migrated, take this instance's owner lock, then record the
        turns of owners that are gone as interrupted.

        :raises ConfigError: ``schema_behind`` when a migration this store needs was not applied.
        """
        self._pool = await asyncpg.create_pool(self.dsn, min_size=self.pool_min, max_size=self.pool_max)
        try:
            await self._check_schema()
            await self._take_owner_lock()
            if not self.queued:
                self.interrupted_at_open = await self.recover_interrupted_turns()
        except BaseException:
            await self.aclose()
            raise

    async def _take_owner_lock(self) -> None:
        """Hold this instance's owner lock on a connection of its own; take it again if that connection drops."""
        connection = await asyncpg.connect(self.dsn, timeout=10)
        try:
            await connection.execute("SELECT pg_advisory_lock($1)", self.owner_key)
        except BaseException:
            connection.terminate()  # not left open behind a failed try
            raise
        self._owner_connection = connection
        connection.add_termination_listener(self._owner_connection_lost)

    def _owner_connection_lost(self, connection: Connection) -> None:
        if self._pool is None or connection is not self._owner_connection:
            return  # closed on purpose
        log.warning("the connection holding this store's owner lock dropped; taking the lock again")
        self._owner_retake = asyncio.get_running_loop().create_task(self._retake_owner_lock())

    async def _retake_owner_lock(self) -> None:
        """Take the owner lock again (until it is held or the store closes). Until then other instances may take
        over this instance's turns; its writes to a turn taken over are refused (``turn_owned``)."""
        retry = 0
        while self._pool is not None:
            try:
                await self._take_owner_lock()
                log.warning("owner lock of this store held again (after %d failed tries)", retry)
                return
            except (*_CONNECTION_LOST, asyncpg.PostgresError) as error:
                if retry == 0:
                    log.warning("could not take the owner lock again (%s: %s); retrying", type(error).__name__, error)
                await asyncio.sleep(self.retry.delay(retry))  # the stores' backoff, but with no budget: until held
                retry += 1

    async def _check_schema(self) -> None:
        async with self._pool.acquire() as connection:
            try:
                rows = await connection.fetch("SELECT version FROM berth_schema_migrations")
            except asyncpg.UndefinedTableError:
                rows = []
        missing = sorted(set(REQUIRED_MIGRATIONS) - {row["version"] for row in rows})
        if missing:
            raise ConfigError(
                "schema_behind",
                f"the PostgreSQL schema lacks migration(s) {', '.join(missing)}; run `berth migrate` to apply them",
            )

    async def transaction(self, work: Callable[[Connection, bool], Awaitable[_T]]) -> _T:
        """Run ``work(connection, retried)`` in one transaction; when the connection drops or cannot be opened, run
        it again on a fresh connection, with backoff and jitter, for as long as the retry budget lasts (the
        transaction rolled back, or committed with its reply lost: ``work`` checks which when ``retried`` is true).

        :raises StorageError: ``store_closed`` when the store is not open (or closes meanwhile).
        :raises PostgresUnavailableError: when PostgreSQL did not come back within the budget.
        """

        async def attempt(retry: int, remaining_s: float) -> _T:
            pool = self._pool
            if pool is None:
                raise StorageError("store_closed", "the conversation store is closed; open it before use")

            async def once(connection: Connection) -> _T:
                return await work(connection, retry > 0)

            try:
                return await transaction_attempt(pool, once, remaining_s)
            except Exception as error:
                if connection_lost(error) and (self._pool is not pool or pool.is_closing()):
                    closed = "the conversation store was closed during the operation"
                    raise StorageError("store_closed", closed) from error
                raise

        return await self.retry.run(attempt)

    async def recover_interrupted_turns(self) -> tuple[InterruptedTurn, ...]:
        """Record every turn left ``accepted`` or ``running`` by an owner that is gone as ``interrupted``;
        return them. Turns of a live owner (this instance, or another holding its lock) are left alone."""

        async def work(connection: Connection, retried: bool) -> tuple[InterruptedTurn, ...]:
            rows = await connection.fetch(
                "WITH gone AS (SELECT tenant, project, user_id, conversation_id, turn_id, state, seq FROM berth_turns"
                " WHERE NOT committed AND state IN ('accepted', 'running') AND owner <> $1"
                " AND pg_try_advisory_xact_lock_shared(owner) FOR UPDATE)"
                " UPDATE berth_turns t SET state='interrupted' FROM gone WHERE t.tenant=gone.tenant"
                " AND t.project=gone.project AND t.user_id=gone.user_id AND t.conversation_id=gone.conversation_id"
                " AND t.turn_id=gone.turn_id"
                " RETURNING gone.tenant, gone.project, gone.user_id, gone.conversation_id, gone.turn_id, gone.state,"
                " gone.seq",
                self.owner_key,
            )
            ordered = sorted(
                rows, key=lambda r: (r["tenant"], r["project"], r["user_id"], r["conversation_id"], r["seq"])
            )
            return tuple(
                InterruptedTurn(scope=_row_scope(row), turn_id=row["turn_id"], was=cast(TurnState, row["state"]))
                for row in ordered
            )

        return await self.transaction(work)

    @property
    def pool(self) -> Any:
        """The open asyncpg pool (the metadata store and memory index of the same backend share it)."""
        if self._pool is None:
            raise StorageError("store_closed", "the conversation store is closed; open it before use")
        return self._pool

    async def accept_queued_turn(
        self,
        scope: ConversationScope,
        turn_id: str,
        *,
        accepted_at: datetime,
        head: tuple[BlockRecord, ...],
        request: bytes,
    ) -> None:
        """Record an ``accepted`` turn the queue owns, with its request (see :meth:`claim_turn`)."""
        if not self.queued:
            raise RuntimeError("accept_queued_turn needs a store in queued mode")
        await self.conversation(scope).accept_turn(turn_id, accepted_at=accepted_at, head=head, request=request)

    async def claim_turn(
        self, scope: ConversationScope, turn_id: str, *, max_attempts: int | None = None, alone: bool = True
    ) -> ClaimedTurn | ParkedTurn | None:
        """Make this instance the owner of an unfinished turn the queue holds, or whose owner is gone, counting one
        more attempt; return its log so far and its request. None when the turn has ended; a :class:`ParkedTurn`
        when this would be attempt ``max_attempts + 1`` (the turn is stored ``failed``, ``turn_poisoned``, instead).

        A claim by the instance that owns the turn already (it reads the turn's entry again) is no new attempt.
        The last attempt of a turn that was begun before runs alone: a claimer that runs other turns (``alone``
        false) is refused it, so the turns that share a worker with a turn that kills its workers do not die with it
        at every attempt and get parked in its place.

        :raises StorageError: ``turn_owned`` when a live instance owns it; ``turn_not_found``;
            ``turn_needs_isolation`` (nothing changed) for a last attempt claimed by a busy worker.
        """
        handle = self.conversation(scope)
        key = _scope_args(scope)

        async def work(connection: Connection, retried: bool) -> ClaimedTurn | ParkedTurn | None:
            row = await connection.fetchrow(_SELECT_TURN + " AND turn_id=$5 FOR UPDATE", *key, turn_id)
            if row is None:
                raise StorageError("turn_not_found", f"this conversation has no turn {turn_id!r}")
            if row["committed"] or row["state"] not in ("accepted", "running"):
                return None
            owner, request = await connection.fetchrow(
                "SELECT owner, request FROM berth_turns WHERE " + _SCOPE + " AND turn_id=$5", *key, turn_id
            )
            if owner not in (QUEUE_OWNER, self.owner_key):
                free = await connection.fetchval("SELECT pg_try_advisory_xact_lock_shared($1)", owner)
                if not free:
                    raise StorageError("turn_owned", f"turn {turn_id!r} is run by another live process")
            attempts = row["attempts"] + (0 if owner == self.owner_key else 1)
            if max_attempts is not None and not alone and 2 <= attempts == max_attempts:
                raise StorageError("turn_needs_isolation", f"turn {turn_id!r} runs its last attempt on an idle worker")
            if max_attempts is not None and attempts > max_attempts:
                error = _poisoned_reason(row["attempts"], row["last_error"])
                await connection.execute(
                    "UPDATE berth_turns SET state='failed', committed=TRUE, ended_at=now(), exit_reason=$6,"
                    " last_error=$7, owner=$8 WHERE " + _SCOPE + " AND turn_id=$5",
                    *key,
                    turn_id,
                    POISONED,
                    error,
                    QUEUE_OWNER,
                )
                return ParkedTurn(attempts=row["attempts"], error=error)
            await connection.execute(
                "UPDATE berth_turns SET owner=$6, attempts=$7 WHERE " + _SCOPE + " AND turn_id=$5",
                *key,
                turn_id,
                self.owner_key,
                attempts,
            )
            log = TurnLog(turn=_turn_record(row), rounds=await handle._rounds(connection, turn_id))
            return ClaimedTurn(log=log, request=bytes(request or b""), attempt=attempts)

        return await self.transaction(work)

    async def owner_alive(self, scope: ConversationScope, turn_id: str) -> bool:
        """Whether a live instance owns the turn now (a worker claimed it and holds its owner lock)."""
        key = _scope_args(scope)

        async def work(connection: Connection, retried: bool) -> bool:
            alive = await connection.fetchval(
                "SELECT owner <> 0 AND (owner = $6 OR NOT pg_try_advisory_xact_lock_shared(owner)) FROM berth_turns"
                " WHERE " + _SCOPE + " AND turn_id=$5",
                *key,
                turn_id,
                self.owner_key,
            )
            return bool(alive)

        return await self.transaction(work)

    async def release_turn(self, scope: ConversationScope, turn_id: str, *, error: str) -> bool:
        """Give a turn this instance owns back to the queue (owner ``0``) with ``error`` recorded; return whether
        it did (False when the turn has ended or another instance owns it)."""
        key = _scope_args(scope)

        async def work(connection: Connection, retried: bool) -> bool:
            status = await connection.execute(
                "UPDATE berth_turns SET owner=$6, last_error=$7 WHERE "
                + _SCOPE
                + " AND turn_id=$5 AND owner=$8 AND NOT committed AND state IN ('accepted', 'running')",
                *key,
                turn_id,
                QUEUE_OWNER,
                error[:_ERROR_CHARS],
                self.owner_key,
            )
            return bool(status.endswith(" 1"))

        return await self.transaction(work)

    async def end_turn(
        self, scope: ConversationScope, turn_id: str, *, state: TurnState, code: str, error: str
    ) -> int | None:
        """Store an unfinished turn as ended (``state``, exit reason ``code``, ``error``), whoever owns it; return
        its attempts so far, or None when it was not unfinished. Its owner, if alive, is refused at its next write
        (the turn is committed)."""
        key = _scope_args(scope)

        async def work(connection: Connection, retried: bool) -> int | None:
            attempts = await connection.fetchval(
                "UPDATE berth_turns SET state=$6, committed=TRUE, ended_at=now(), exit_reason=$7, last_error=$8,"
                " owner=$9 WHERE " + _SCOPE + " AND turn_id=$5 AND NOT committed AND state IN ('accepted', 'running')"
                " RETURNING attempts",
                *key,
                turn_id,
                state,
                code,
                error[:_ERROR_CHARS],
                QUEUE_OWNER,
            )
            if attempts is not None or not retried:
                return cast(int | None, attempts)
            found = await connection.fetchrow(  # the first attempt may have landed, its reply lost
                "SELECT state, exit_reason, attempts FROM berth_turns WHERE " + _SCOPE + " AND turn_id=$5",
                *key,
                turn_id,
            )
            landed = found is not None and (found["state"], found["exit_reason"]) == (state, code)
            return cast(int, found["attempts"]) if landed else None

        return await self.transaction(work)

    async def retry_turn(self, scope: ConversationScope, turn_id: str) -> bool:
        """Give an unfinished turn back to the queue with its attempts reset; return whether it was unfinished."""
        key = _scope_args(scope)

        async def work(connection: Connection, retried: bool) -> bool:
            status = await connection.execute(
                "UPDATE berth_turns SET owner=$6, attempts=0 WHERE "
                + _SCOPE
                + " AND turn_id=$5 AND NOT committed AND state IN ('accepted', 'running')",
                *key,
                turn_id,
                QUEUE_OWNER,
            )
            return bool(status.endswith(" 1"))

        return await self.transaction(work)

    async def unfinished_turns(self) -> tuple[UnfinishedTurn, ...]:
        """Every turn stored ``accepted`` or ``running``, oldest first, with its attempts, last error and whether a
        live instance owns it (its advisory lock is held)."""

        async def work(connection: Connection, retried: bool) -> tuple[UnfinishedTurn, ...]:
            rows = await connection.fetch(
                "SELECT tenant, project, user_id, conversation_id, turn_id, state, started_at, attempts, last_error,"
                " owner <> 0 AND (owner = $1 OR NOT pg_try_advisory_xact_lock_shared(owner)) AS alive FROM berth_turns"
                " WHERE NOT committed AND state IN ('accepted', 'running') ORDER BY started_at",
                self.owner_key,
            )
            return tuple(
                UnfinishedTurn(
                    scope=_row_scope(row),
                    turn_id=row["turn_id"],
                    state=cast(TurnState, row["state"]),
                    started_at=row["started_at"],
                    attempts=row["attempts"],
                    error=row["last_error"],
                    owner_alive=row["alive"],
                )
                for row in rows
            )

        return await self.transaction(work)

    async def orphaned_turns(self, *, older_than_s: float) -> tuple[UnfinishedTurn, ...]:
        """The unfinished turns, accepted or begun more than ``older_than_s`` ago, owned by the queue or by an
        instance that is gone (its advisory lock is free), oldest first."""

        async def work(connection: Connection, retried: bool) -> tuple[UnfinishedTurn, ...]:
            rows = await connection.fetch(
                "SELECT tenant, project, user_id, conversation_id, turn_id, state FROM berth_turns"
                " WHERE NOT committed AND state IN ('accepted', 'running') AND owner <> $1"
                " AND started_at < now() - make_interval(secs => $2)"
                " AND (owner = 0 OR pg_try_advisory_xact_lock_shared(owner)) ORDER BY started_at",
                self.owner_key,
                float(older_than_s),
            )
            return tuple(
                UnfinishedTurn(scope=_row_scope(row), turn_id=row["turn_id"], state=cast(TurnState, row["state"]))
                for row in rows
            )

        return await self.transaction(work)

    async def aclose(self) -> None:
        """Close the pool, then release the owner lock (this instance's unfinished turns count as interrupted
        from then on); the store refuses further work (``store_closed``)."""
        pool, self._pool = self._pool, None
        owner, self._owner_connection = self._owner_connection, None
        if self._owner_retake is not None:
            self._owner_retake.cancel()
        try:
            if pool is not None:
                await pool.close()
        finally:
            if owner is not None:
                await owner.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def conversation(self, scope: ConversationScope) -> PostgresConversationHandle:
        """Return a handle bound to one conversation (created on its first write)."""
        return PostgresConversationHandle(self, scope)

    async def list_conversations(self, owner: OwnerScope) -> tuple[ConversationRecord, ...]:
        """Return the conversation index of one user in one tenant/project, newest first."""

        async def work(connection: Connection, retried: bool) -> tuple[ConversationRecord, ...]:
            rows = await connection.fetch(
                "SELECT conversation_id, title, created_at, updated_at, turn_count FROM berth_conversations"
                " WHERE tenant=$1 AND project=$2 AND user_id=$3 ORDER BY updated_at DESC, conversation_id",
                owner.tenant,
                owner.project,
                owner.user_id,
            )
            return tuple(
                ConversationRecord(
                    scope=owner.conversation(row["conversation_id"]),
                    title=row["title"],
                    created_at=row["created_at"],
                    updated_at=row["updated_at"],
                    turn_count=row["turn_count"],
                )
                for row in rows
            )

        return await self.transaction(work)
