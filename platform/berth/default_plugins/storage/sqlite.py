"""The embedded conversation store: SQLite (WAL) plus files under one root folder.

Layout under ``root``::

    berth.sqlite3                     conversations, turns, turn log, timeline, sources pool, artifact index
    artifacts/<tenant>/<project>/<user>/<conversation>/
        blobs/<sha256>                   artifact contents, addressed by hash

The committed timeline is a table of blocks by position, so a commit writes the blocks the turn
appended or changed and nothing else, and a load that the caller says it can skip
(``known_version``) does not read it. (An earlier release kept it as one JSON file per conversation;
:meth:`SqliteConversationStore.open` moves such files into the table.)

How writes stay atomic:

* every database write is one ``BEGIN IMMEDIATE`` transaction; the timeline, sources, turn log and
  turn state of a commit are one transaction;
* the turn's commit is durable (``synchronous=FULL``: the WAL is ``fsync``-ed before it returns), and
  so is accepting a turn (what the API's 202 promises); beginning a turn and appending a round are not
  (``synchronous=NORMAL``, no ``fsync``). In WAL mode that still survives a killed process — the
  transaction is in the WAL file once it returns — and never corrupts the database; only a power loss or
  OS crash can take back the rounds appended since the last ``fsync`` (the next commit's, or a
  checkpoint's), and the turn then comes back ``interrupted`` with fewer rounds;
* artifact files are written to a temporary name, flushed, ``fsync``-ed and renamed into place before
  the transaction that makes them visible commits. A crash in between leaves an unreferenced file and
  the previous consistent state.

Each round appends only its own rows to the turn log (not even the turn's row: its round count is
recorded at the commit), so that write costs the same at round 5 and at round 500. Such a short write
that need not be ``fsync``-ed runs on the caller's thread when the database is free
(:meth:`SqliteDatabase.write_now`): handing 0.1 ms of work to a worker thread costs more than the work,
in thread switches and GIL hand-offs.

Scoping comes from the bound :class:`~berth.storage.scope.ConversationScope`; folder names are its
ids, which the scope already restricts to ``[A-Za-z0-9_-]``.

Each turn row names its owner, the store instance that accepted or began it
(:class:`~berth.default_plugins.storage.owners.RootOwners`: a lock file the owner's process holds for as long
as it lives). A turn left ``running`` or ``accepted`` (acknowledged by the API, not yet begun) by an owner
that is gone is recorded ``interrupted`` when the store opens, and by any load of its conversation that finds
it later (its owner, another process on the same root, died meanwhile); a live owner's turns are left alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Final, Literal, Self, TypeVar, cast, overload

from berth.default_plugins.storage.owners import RootOwners
from berth.default_plugins.storage.sqlite_database import SqliteDatabase
from berth.default_plugins.storage.sqlite_memory_rows import MEMORY_SCHEMA, write_entries
from berth.default_plugins.storage.threads import in_storage_thread
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

__all__ = ["DATABASE_FILE", "SqliteConversationHandle", "SqliteConversationStore", "SqliteDatabase", "write_atomically"]

DATABASE_FILE: Final = "berth.sqlite3"
"""The database file's name under the storage root."""

_T = TypeVar("_T")

log = logging.getLogger(__name__)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    title TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    timeline_file TEXT,  -- an earlier release's timeline file, until open() moves it into the table
    UNIQUE (tenant, project, user_id, conversation_id)
);
CREATE TABLE IF NOT EXISTS turns (
    conversation INTEGER NOT NULL REFERENCES conversations (id),
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    committed INTEGER NOT NULL DEFAULT 0,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    generation TEXT,
    rounds INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_input_tokens INTEGER NOT NULL DEFAULT 0,
    cache_creation_input_tokens INTEGER NOT NULL DEFAULT 0,
    exit_reason TEXT,
    owner TEXT,  -- the store instance that accepted or began it (RootOwners token); NULL before owners existed
    PRIMARY KEY (conversation, turn_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turns_unfinished ON turns (conversation) WHERE committed = 0;
CREATE TABLE IF NOT EXISTS turn_log (
    conversation INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    position INTEGER NOT NULL,
    path TEXT NOT NULL,
    type TEXT NOT NULL,
    block TEXT NOT NULL,
    PRIMARY KEY (conversation, turn_id, round, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timeline (
    conversation INTEGER NOT NULL,
    position INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    path TEXT NOT NULL,
    type TEXT NOT NULL,
    log_round INTEGER,  -- with log_position: the turn_log entry holding the block, when block is NULL
    log_position INTEGER,
    block TEXT,
    PRIMARY KEY (conversation, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sources (
    conversation INTEGER NOT NULL,
    sid INTEGER NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (conversation, sid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts (
    conversation INTEGER NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    PRIMARY KEY (conversation, path)
) WITHOUT ROWID;
"""

_CONVERSATION_TABLES: Final = ("turn_log", "timeline", "sources", "artifacts", "turns")
"""The tables whose rows belong to one conversation (by its row id), erased with it."""

_ADDED_COLUMNS: Final = {
    "turns": (
        ("input_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("output_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("cache_read_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("cache_creation_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
        ("exit_reason", "TEXT"),
        ("owner", "TEXT"),
    )
}
"""Columns added to tables after their first release: a database created before gets them on open."""

_ROUNDS: Final = (
    "CASE WHEN committed THEN rounds ELSE (SELECT COALESCE(MAX(l.round), 0) FROM turn_log l"
    " WHERE l.conversation = turns.conversation AND l.turn_id = turns.turn_id) END"
)
"""A turn's round count: recorded at its commit; until then, the last round its log holds (an append
writes only the log, not the ``turns`` row: one page less per round)."""

_SELECT_TURN: Final = (
    "SELECT turn_id, state, started_at, ended_at, generation, "
    + _ROUNDS
    + ", input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, exit_reason"
)
"""The columns :func:`_turn_record` reads, in its order (a query adds its ``FROM`` clause)."""

_SELECT_TURN_STATE: Final = (
    "SELECT state, " + _ROUNDS + ", committed FROM turns WHERE conversation=? AND turn_id=?"  # noqa: S608 (constants)
)


_INSERT_TIMELINE_ROW: Final = (
    "INSERT INTO timeline (conversation, position, turn_id, path, type, log_round, log_position, block)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_TIMELINE_JOIN_LOG: Final = (
    "FROM timeline t LEFT JOIN turn_log l ON t.block IS NULL AND l.conversation = t.conversation"
    " AND l.turn_id = t.turn_id AND l.round = t.log_round AND l.position = t.log_position AND l.path = t.path"
)
"""Joins each timeline row that refers to the turn log with the entry it names (the path must match)."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("storage timestamps must be timezone-aware")
    return value.astimezone(UTC).isoformat()


def _instant(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so that a crash leaves either the old file or the new one, never half.

    The bytes go to a temporary file in the same folder, are flushed and ``fsync``-ed, then renamed
    over ``target``; the folder is ``fsync``-ed so the rename itself is durable.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_directory(target.parent)


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


def _turn_record(row: Sequence[object]) -> TurnRecord:
    """Build a :class:`TurnRecord` from a row of :data:`_SELECT_TURN`."""
    turn_id, state, started_at, ended_at, generation, rounds, *tokens, exit_reason = row
    started = _instant(cast(str, started_at))
    assert started is not None
    return TurnRecord(
        turn_id=cast(str, turn_id),
        state=cast(TurnState, state),
        started_at=started,
        ended_at=_instant(cast("str | None", ended_at)),
        generation=cast("str | None", generation),
        rounds=cast(int, rounds),
        usage=TurnUsage(*cast("list[int]", tokens)),
        exit_reason=cast("str | None", exit_reason),
    )


class SqliteConversationHandle:
    """One conversation of a :class:`SqliteConversationStore`, bound to its scope."""

    def __init__(self, store: SqliteConversationStore, scope: ConversationScope) -> None:
        self._store = store
        self._scope = scope
        self._folder = store.artifacts_root.joinpath(scope.tenant, scope.project, scope.user_id, scope.conversation_id)

    @property
    def scope(self) -> ConversationScope:
        """The tenant, project, user and conversation this handle is limited to."""
        return self._scope

    # -- reads -----------------------------------------------------------------------------------

    def _conversation_id(self, connection: sqlite3.Connection) -> int | None:
        s = self._scope
        row = connection.execute(
            "SELECT id FROM conversations WHERE tenant=? AND project=? AND user_id=? AND conversation_id=?",
            (s.tenant, s.project, s.user_id, s.conversation_id),
        ).fetchone()
        return None if row is None else cast(int, row[0])

    def _ensure_conversation(self, connection: sqlite3.Connection) -> int:
        found = self._conversation_id(connection)
        if found is not None:
            return found
        s = self._scope
        now = _now()
        cursor = connection.execute(
            "INSERT INTO conversations (tenant, project, user_id, conversation_id, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (s.tenant, s.project, s.user_id, s.conversation_id, now, now),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    @staticmethod
    def _rounds(connection: sqlite3.Connection, conversation: int, turn_id: str) -> tuple[TurnRound, ...]:
        rows = connection.execute(
            "SELECT round, path, type, block FROM turn_log WHERE conversation=? AND turn_id=? ORDER BY round, position",
            (conversation, turn_id),
        ).fetchall()
        rounds: dict[int, list[BlockRecord]] = {}
        for index, path, type_, block in rows:
            rounds.setdefault(index, []).append(BlockRecord(turn_id=turn_id, path=path, type=type_, json=block))
        return tuple(TurnRound(index=index, blocks=tuple(blocks)) for index, blocks in rounds.items())

    @overload
    def _load(
        self,
        connection: sqlite3.Connection,
        known_version: int | None,
        *,
        only_if: Literal[False] = False,
        turn_index: bool = True,
    ) -> ConversationSnapshot: ...

    @overload
    def _load(
        self, connection: sqlite3.Connection, known_version: int | None, *, only_if: Literal[True], turn_index: bool
    ) -> ConversationSnapshot | None: ...

    def _load(
        self,
        connection: sqlite3.Connection,
        known_version: int | None,
        *,
        only_if: bool = False,
        turn_index: bool = True,
    ) -> ConversationSnapshot | None:
        """Read a snapshot; with ``only_if``, only when the stored version is ``known_version`` (else ``None``)."""
        conversation = self._conversation_id(connection)
        if conversation is None:
            if only_if and known_version != 0:
                return None
            return ConversationSnapshot(scope=self._scope, timeline=(), version=0, sources=(), turns=(), uncommitted=())
        (version,) = connection.execute("SELECT version FROM conversations WHERE id=?", (conversation,)).fetchone()
        if only_if and version != known_version:
            return None
        owners = self._store.owners
        unfinished = connection.execute(
            "SELECT turn_id, owner FROM turns WHERE conversation=? AND state IN ('accepted', 'running')"
            " AND committed=0",
            (conversation,),
        ).fetchall()
        connection.executemany(
            "UPDATE turns SET state='interrupted' WHERE conversation=? AND turn_id=?",
            [(conversation, turn_id) for turn_id, owner in unfinished if not owners.is_alive(owner)],
        )
        # The whole index only when asked for; the logs of interrupted turns always.
        turn_rows = connection.execute(
            _SELECT_TURN
            + ", committed FROM turns WHERE conversation=?"
            + ("" if turn_index else " AND state='interrupted' AND committed=0")
            + " ORDER BY seq",
            (conversation,),
        ).fetchall()
        turns = tuple(_turn_record(row[:-1]) for row in turn_rows)
        uncommitted = tuple(
            TurnLog(turn=turn, rounds=self._rounds(connection, conversation, turn.turn_id))
            for turn, row in zip(turns, turn_rows, strict=True)
            if turn.state == "interrupted" and not row[-1]
        )
        sources = tuple(
            SourceRecord(sid=sid, json=row)
            for sid, row in connection.execute(
                "SELECT sid, row FROM sources WHERE conversation=? ORDER BY sid", (conversation,)
            )
        )
        timeline = None
        if version != known_version:
            timeline = tuple(
                BlockRecord(turn_id=turn_id, path=path, type=type_, json=block)
                for turn_id, path, type_, block in connection.execute(
                    "SELECT t.turn_id, t.path, t.type, COALESCE(t.block, l.block) "
                    + _TIMELINE_JOIN_LOG
                    + " WHERE t.conversation=? ORDER BY t.position",
                    (conversation,),
                )
            )
        return ConversationSnapshot(
            scope=self._scope,
            timeline=timeline,
            version=version,
            sources=sources,
            turns=turns,
            uncommitted=uncommitted,
        )

    async def load(self, *, known_version: int | None = None, turn_index: bool = True) -> ConversationSnapshot:
        """Read the committed timeline, the sources pool, the turn index and the logs of interrupted turns.

        :param known_version: the version of a timeline the caller holds; when it is still the stored
            one, the timeline is not read (the snapshot's ``timeline`` is ``None``).
        :param turn_index: with ``False``, ``turns`` holds only the interrupted turns of ``uncommitted``
            (what a turn needs to start, without reading every turn's record).
        """
        database = self._store.database
        if known_version is not None:
            # The caller holds the timeline: what is left to read is small, so read it on this thread
            # when the version still matches; a timeline to read goes to a worker thread.
            known = await database.write_now(
                lambda connection: self._load(connection, known_version, only_if=True, turn_index=turn_index)
            )
            if known is not None:
                return known
        # A write: turns left unfinished by a process that is gone are recorded as interrupted.
        return await in_storage_thread(
            database.write, lambda connection: self._load(connection, known_version, turn_index=turn_index)
        )

    async def read_turn_log(self, turn_id: str) -> TurnLog:
        """Return one turn's log (every round appended, whatever compaction later dropped)."""

        def work(connection: sqlite3.Connection) -> TurnLog:
            conversation = self._conversation_id(connection)
            row = None
            if conversation is not None:
                row = connection.execute(
                    _SELECT_TURN + " FROM turns WHERE conversation=? AND turn_id=?",
                    (conversation, turn_id),
                ).fetchone()
            if conversation is None or row is None:
                raise StorageError("turn_not_found", f"this conversation has no turn {turn_id!r}")
            return TurnLog(turn=_turn_record(row), rounds=self._rounds(connection, conversation, turn_id))

        return await in_storage_thread(self._store.database.read, work)

    async def read_artifact(self, path: str) -> bytes:
        """Return a committed artifact of this conversation."""
        checked = _checked_artifact_path(path)

        def lookup(connection: sqlite3.Connection) -> str | None:
            conversation = self._conversation_id(connection)
            if conversation is None:
                return None
            row = connection.execute(
                "SELECT sha256 FROM artifacts WHERE conversation=? AND path=?", (conversation, checked)
            ).fetchone()
            return None if row is None else cast(str, row[0])

        def work() -> bytes:
            digest = self._store.database.read(lookup)
            if digest is None:
                raise StorageError("artifact_not_found", f"no committed artifact at {checked!r}")
            return (self._folder / "blobs" / digest).read_bytes()

        return await in_storage_thread(work)

    # -- writes ----------------------------------------------------------------------------------

    async def begin_turn(
        self, turn_id: str, *, started_at: datetime, generation: str | None, head: tuple[BlockRecord, ...]
    ) -> None:
        """Record a new ``running`` turn and its head blocks (round 0 of its log)."""

        def work(connection: sqlite3.Connection) -> int:
            conversation = self._ensure_conversation(connection)
            found = connection.execute(
                "SELECT state FROM turns WHERE conversation=? AND turn_id=?", (conversation, turn_id)
            ).fetchone()
            if found is not None and found[0] != "accepted":
                raise StorageError("turn_exists", f"turn {turn_id!r} was already begun; use a new turn id")
            owner = self._store.owners.token
            if found is None:
                connection.execute(
                    "INSERT INTO turns (conversation, turn_id, seq, state, started_at, generation, owner)"
                    " VALUES (?, ?, (SELECT COUNT(*) FROM turns WHERE conversation=?), 'running', ?, ?, ?)",
                    (conversation, turn_id, conversation, _iso(started_at), generation, owner),
                )
            else:
                connection.execute(
                    "UPDATE turns SET state='running', started_at=?, generation=?, owner=?"
                    " WHERE conversation=? AND turn_id=?",
                    (_iso(started_at), generation, owner, conversation, turn_id),
                )
                connection.execute(
                    "DELETE FROM turn_log WHERE conversation=? AND turn_id=? AND round=0", (conversation, turn_id)
                )
            self._insert_blocks(connection, conversation, turn_id, 0, head)
            self._store.mark_running(self._scope, conversation, turn_id, rounds=0)
            return conversation

        await self._store.database.write_now(work)

    async def accept_turn(self, turn_id: str, *, accepted_at: datetime, head: tuple[BlockRecord, ...]) -> None:
        """Record an ``accepted`` turn and its head, durably; see :meth:`ConversationHandle.accept_turn`.

        A group commit (``fsync``-ed before it returns, shared with the commits queued meanwhile), not a
        short inline write like :meth:`begin_turn`: the client is told the turn exists once this returns, so
        a power loss must not take it back either.
        """

        def work(connection: sqlite3.Connection) -> int:
            conversation = self._ensure_conversation(connection)
            if connection.execute(
                "SELECT 1 FROM turns WHERE conversation=? AND turn_id=?", (conversation, turn_id)
            ).fetchone():
                raise StorageError("turn_exists", f"turn {turn_id!r} is already used; use a new turn id")
            connection.execute(
                "INSERT INTO turns (conversation, turn_id, seq, state, started_at, owner)"
                " VALUES (?, ?, (SELECT COUNT(*) FROM turns WHERE conversation=?), 'accepted', ?, ?)",
                (conversation, turn_id, conversation, _iso(accepted_at), self._store.owners.token),
            )
            self._insert_blocks(connection, conversation, turn_id, 0, head)
            self._store.mark_running(self._scope, conversation, turn_id, rounds=0)
            return conversation

        await self._store.database.write_together(work)

    async def end_unstarted_turn(self, turn_id: str, *, state: TurnState, ended_at: datetime) -> None:
        """End an ``accepted`` turn that never began; see :meth:`ConversationHandle.end_unstarted_turn`."""

        def work(connection: sqlite3.Connection) -> None:
            conversation = self._conversation_id(connection)
            if conversation is None:
                return
            connection.execute(
                "UPDATE turns SET state=?, committed=1, ended_at=?, exit_reason=?"
                " WHERE conversation=? AND turn_id=? AND state='accepted'",
                (state, _iso(ended_at), state, conversation, turn_id),
            )
            self._store.mark_done(self._scope, turn_id)

        # After every durable write queued before it (group commits keep their order): an accept still
        # being committed is ended, not overtaken.
        await self._store.database.write_together(work)

    @staticmethod
    def _insert_blocks(
        connection: sqlite3.Connection, conversation: int, turn_id: str, index: int, blocks: Sequence[BlockRecord]
    ) -> None:
        for record in blocks:
            if record.turn_id != turn_id:
                raise ValueError(f"block {record.path!r} belongs to {record.turn_id!r}, not to turn {turn_id!r}")
        connection.executemany(
            "INSERT INTO turn_log (conversation, turn_id, round, position, path, type, block)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(conversation, turn_id, index, n, r.path, r.type, r.json) for n, r in enumerate(blocks)],
        )

    @staticmethod
    def _upsert_sources(connection: sqlite3.Connection, conversation: int, sources: Sequence[SourceRecord]) -> None:
        if not sources:
            return
        connection.executemany(
            "INSERT INTO sources (conversation, sid, row) VALUES (?, ?, ?)"
            " ON CONFLICT (conversation, sid) DO UPDATE SET row=excluded.row",
            [(conversation, s.sid, s.json) for s in sources],
        )

    def _turn_state(self, connection: sqlite3.Connection, turn_id: str) -> tuple[int, str, int, int]:
        conversation = self._conversation_id(connection)
        row = None
        if conversation is not None:
            row = connection.execute(
                _SELECT_TURN_STATE,
                (conversation, turn_id),
            ).fetchone()
        if conversation is None or row is None:
            raise StorageError("turn_not_found", f"turn {turn_id!r} was never begun; call begin_turn first")
        return conversation, row[0], row[1], row[2]

    async def append_round(
        self, turn_id: str, blocks: tuple[BlockRecord, ...], *, sources: tuple[SourceRecord, ...] = ()
    ) -> int:
        """Append one completed round to the turn log in one transaction; return its round index."""

        def work(connection: sqlite3.Connection) -> tuple[int, int, bool]:
            running = self._store.running_turn(self._scope, turn_id)
            if running is not None:  # begun by this store and not committed: no need to look it up
                conversation, rounds = running
            else:
                conversation, state, rounds, _ = self._turn_state(connection, turn_id)
                if state != "running":
                    raise StorageError("turn_not_running", f"turn {turn_id!r} is {state}; rounds go to running turns")
            index = rounds + 1
            self._insert_blocks(connection, conversation, turn_id, index, blocks)
            self._upsert_sources(connection, conversation, sources)
            return conversation, index, running is not None

        # Not fsync-ed: a killed process keeps the round; see the module docstring for a power loss.
        conversation, index, known = await self._store.database.write_now(work)
        if known:
            self._store.mark_running(self._scope, conversation, turn_id, rounds=index)
        return index

    def _write_blobs(self, artifacts: tuple[ArtifactWrite, ...]) -> list[tuple[str, str, int]]:
        """Write artifacts as content-addressed blobs (each ``fsync``-ed); return their rows."""
        blobs: list[tuple[str, str, int]] = []
        for artifact in artifacts:
            path = _checked_artifact_path(artifact.path)
            digest = hashlib.sha256(artifact.data).hexdigest()
            blob = self._folder / "blobs" / digest
            if not blob.exists():
                write_atomically(blob, artifact.data)
            blobs.append((path, digest, len(artifact.data)))
        return blobs

    async def store_files(self, turn_id: str, files: tuple[ArtifactWrite, ...]) -> None:
        """Store files a running turn produced (blobs first, then their rows), before the turn announces them."""
        if not files:
            return
        blobs = await in_storage_thread(self._write_blobs, files)

        def work(connection: sqlite3.Connection) -> None:
            conversation, _, _, _ = self._turn_state(connection, turn_id)
            connection.executemany(
                "INSERT INTO artifacts (conversation, path, sha256, size, turn_id) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation, path) DO UPDATE SET sha256=excluded.sha256, size=excluded.size,"
                " turn_id=excluded.turn_id",
                [(conversation, path, digest, size, turn_id) for path, digest, size in blobs],
            )

        await self._store.database.write_together(work)  # durable: the files outlive a crash once announced

    async def turn_files(self, turn_id: str) -> tuple[ArtifactWrite, ...]:
        """The files stored for turn ``turn_id`` so far, by path."""

        def lookup(connection: sqlite3.Connection) -> list[tuple[str, str]]:
            conversation = self._conversation_id(connection)
            if conversation is None:
                return []
            rows = connection.execute(
                "SELECT path, sha256 FROM artifacts WHERE conversation=? AND turn_id=? ORDER BY path",
                (conversation, turn_id),
            ).fetchall()
            return [(str(path), str(digest)) for path, digest in rows]

        def work() -> tuple[ArtifactWrite, ...]:
            rows = self._store.database.read(lookup)
            return tuple(ArtifactWrite(path, (self._folder / "blobs" / digest).read_bytes()) for path, digest in rows)

        return await in_storage_thread(work)

    async def erase(self) -> tuple[str, ...]:
        """Delete the conversation's rows (turns, turn log, timeline, sources, artifact index) in one transaction,
        then its blobs, then purge the database (:meth:`SqliteDatabase.purge`: the rows' bytes are zeroed and no
        older version of their pages stays in the WAL); return the ids of the turns it had.

        The transaction queues behind the durable writes already queued (a commit of the conversation lands
        first, and is erased with the rest).
        """

        def work(connection: sqlite3.Connection) -> tuple[str, ...]:
            conversation = self._conversation_id(connection)
            if conversation is None:
                return ()
            turn_ids = tuple(
                str(row[0])
                for row in connection.execute(
                    "SELECT turn_id FROM turns WHERE conversation=? ORDER BY seq", (conversation,)
                )
            )
            for table in _CONVERSATION_TABLES:
                connection.execute(f"DELETE FROM {table} WHERE conversation=?", (conversation,))  # noqa: S608
            connection.execute("DELETE FROM conversations WHERE id=?", (conversation,))
            return turn_ids

        turn_ids = await self._store.database.write_together(work)
        for turn_id in turn_ids:
            self._store.mark_done(self._scope, turn_id)
        await in_storage_thread(shutil.rmtree, self._folder, ignore_errors=True)
        await in_storage_thread(self._store.database.purge)
        return turn_ids

    async def commit_turn(self, commit: TurnCommit) -> int:
        """Write the timeline, sources, final round, artifacts and turn state atomically; return the new version.

        The blobs are written first; the transaction that makes them visible commits together with the
        other commits queued meanwhile (group commit: one ``fsync`` for all of them).
        """
        blobs = await in_storage_thread(self._write_blobs, commit.artifacts) if commit.artifacts else []

        def work(connection: sqlite3.Connection) -> int:
            conversation, _, rounds, committed = self._turn_state(connection, commit.turn_id)
            if committed:
                raise StorageError("conflicting_commit", f"turn {commit.turn_id!r} was already committed")
            if not connection.execute(
                "SELECT 1 FROM conversations WHERE id=? AND version=?", (conversation, commit.base_version)
            ).fetchone():
                raise StorageError(
                    "conflicting_commit",
                    f"the conversation changed since version {commit.base_version}; reload it and retry",
                )
            if commit.final_round:
                rounds += 1
                self._insert_blocks(connection, conversation, commit.turn_id, rounds, commit.final_round)
            if commit.memory:
                write_entries(connection, commit.memory)
            self._write_timeline(connection, conversation, commit.timeline)
            self._upsert_sources(connection, conversation, commit.sources)
            connection.executemany(
                "INSERT INTO artifacts (conversation, path, sha256, size, turn_id) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation, path) DO UPDATE SET sha256=excluded.sha256, size=excluded.size,"
                " turn_id=excluded.turn_id",
                [(conversation, path, digest, size, commit.turn_id) for path, digest, size in blobs],
            )
            usage = commit.usage
            connection.execute(
                "UPDATE turns SET state=?, committed=1, ended_at=?, rounds=?, input_tokens=?, output_tokens=?,"
                " cache_read_input_tokens=?, cache_creation_input_tokens=?, exit_reason=?"
                " WHERE conversation=? AND turn_id=?",
                (
                    commit.state,
                    _iso(commit.ended_at),
                    rounds,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_input_tokens,
                    usage.cache_creation_input_tokens,
                    commit.exit_reason,
                    conversation,
                    commit.turn_id,
                ),
            )
            connection.execute(
                "UPDATE conversations SET version=version+1, updated_at=?, title=COALESCE(?, title) WHERE id=?",
                (_iso(commit.ended_at), commit.title, conversation),
            )
            self._store.mark_done(self._scope, commit.turn_id)
            return conversation

        await self._store.database.write_together(work)
        return commit.base_version + 1

    @staticmethod
    def _write_timeline(connection: sqlite3.Connection, conversation: int, change: TimelineChange) -> None:
        """Apply ``change``; a block the turn log holds is stored as a reference to its log entry."""
        connection.execute("DELETE FROM timeline WHERE conversation=? AND position>=?", (conversation, change.length))
        rows: list[tuple[int, int, str, str, str, int | None, int | None, str | None]] = []
        for position, write in change.writes:
            if isinstance(write, LoggedBlock):
                r = write.record
                rows.append((conversation, position, r.turn_id, r.path, r.type, write.round, write.position, None))
            else:
                rows.append((conversation, position, write.turn_id, write.path, write.type, None, None, write.json))
        connection.executemany(
            _INSERT_TIMELINE_ROW + " ON CONFLICT (conversation, position) DO UPDATE SET turn_id=excluded.turn_id,"
            " path=excluded.path, type=excluded.type, log_round=excluded.log_round,"
            " log_position=excluded.log_position, block=excluded.block",
            rows,
        )
        if rows:
            dangling = connection.execute(
                "SELECT t.position, t.path " + _TIMELINE_JOIN_LOG + " WHERE t.conversation=? AND t.position>=?"
                " AND t.block IS NULL AND l.block IS NULL LIMIT 1",
                (conversation, change.writes[0][0]),
            ).fetchone()
            if dangling is not None:
                raise StorageError(
                    "unknown_logged_block",
                    f"timeline position {dangling[0]} refers to a turn-log entry that does not hold {dangling[1]!r}",
                )


class SqliteConversationStore:
    """The embedded :class:`~berth.storage.conversations.ConversationStore`: SQLite (WAL) + files under ``root``.

    :param root: the storage root folder (created if missing); the caller decides where it is.
    :param trace: optional callback receiving every SQL statement executed (diagnostics, tests).
    """

    def __init__(self, root: Path, *, trace: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.artifacts_root = root / "artifacts"
        self.database = SqliteDatabase(root / DATABASE_FILE, trace=trace)
        self.owners = RootOwners(root)
        """This instance's claim on the root, and whether the owners of other turns are alive."""
        self.interrupted_at_open: tuple[InterruptedTurn, ...] = ()
        """The turns :meth:`open` found left unfinished by a process that is gone (now ``interrupted``)."""
        # (scope, turn id) -> (conversation row id, rounds appended) of the turns this instance runs.
        self._running: dict[tuple[ConversationScope, str], tuple[int, int]] = {}
        self._running_lock = threading.Lock()

    async def open(self) -> None:
        """Claim the root for this instance, create the database (WAL) and its tables, move an earlier
        release's timeline files in, then record the turns of processes that are gone as interrupted."""
        await in_storage_thread(self.owners.claim)
        try:
            # the memory index's tables too: a turn's commit writes its memory entries (TurnCommit.memory)
            await in_storage_thread(self.database.open, _SCHEMA + MEMORY_SCHEMA, added_columns=_ADDED_COLUMNS)
            await in_storage_thread(self._adopt_timeline_files)
            self.interrupted_at_open = await self.recover_interrupted_turns()
        except BaseException:
            await self.aclose()
            raise

    async def recover_interrupted_turns(self) -> tuple[InterruptedTurn, ...]:
        """Record every turn left ``accepted`` or ``running`` by an owner that is gone as ``interrupted``; return them.

        See :meth:`ConversationStore.recover_interrupted_turns`. One transaction over the unfinished turns
        (an index holds only those); then the lock files of the owners found gone are deleted.
        """
        owners = self.owners

        def work(connection: sqlite3.Connection) -> tuple[InterruptedTurn, ...]:
            rows = connection.execute(
                "SELECT t.conversation, t.turn_id, t.state, t.owner, c.tenant, c.project, c.user_id,"
                " c.conversation_id FROM turns t JOIN conversations c ON c.id = t.conversation"
                " WHERE t.committed = 0 AND t.state IN ('accepted', 'running') ORDER BY t.conversation, t.seq"
            ).fetchall()
            gone = [row for row in rows if not owners.is_alive(row[3])]
            connection.executemany(
                "UPDATE turns SET state='interrupted' WHERE conversation=? AND turn_id=?",
                [(row[0], row[1]) for row in gone],
            )
            return tuple(
                InterruptedTurn(
                    scope=ConversationScope(
                        tenant=tenant, project=project, user_id=user_id, conversation_id=conversation_id
                    ),
                    turn_id=turn_id,
                    was=state,
                )
                for _, turn_id, state, _, tenant, project, user_id, conversation_id in gone
            )

        interrupted = await in_storage_thread(self.database.write, work)
        await in_storage_thread(owners.sweep)
        return interrupted

    def _adopt_timeline_files(self) -> None:
        """Move each timeline file an earlier release wrote into the ``timeline`` table, then delete it.

        One transaction per conversation; the file is deleted only once its blocks are committed, so a
        crash in between repeats the move on the next open. A pointer to a missing file is logged and
        left as it is (nothing is there to move).
        """
        legacy = self.database.read(
            lambda connection: connection.execute(
                "SELECT id, tenant, project, user_id, conversation_id, timeline_file FROM conversations"
                " WHERE timeline_file IS NOT NULL"
            ).fetchall()
        )
        for conversation, tenant, project, user_id, conversation_id, name in legacy:
            path = self.artifacts_root.joinpath(tenant, project, user_id, conversation_id, "timeline", name)
            try:
                blocks = json.loads(path.read_text(encoding="utf-8"))["blocks"]
            except FileNotFoundError:
                log.warning(
                    "conversation %s/%s/%s: its timeline file %s is missing", tenant, project, conversation_id, name
                )
                continue
            rows = [
                (
                    conversation,
                    n,
                    b["turn_id"],
                    b["path"],
                    b["type"],
                    None,
                    None,
                    json.dumps(b, ensure_ascii=False, separators=(",", ":")),
                )
                for n, b in enumerate(blocks)
            ]

            def work(
                connection: sqlite3.Connection,
                conversation: int = conversation,
                rows: Sequence[tuple[object, ...]] = rows,
            ) -> None:
                connection.execute("DELETE FROM timeline WHERE conversation=?", (conversation,))
                connection.executemany(_INSERT_TIMELINE_ROW, rows)
                connection.execute("UPDATE conversations SET timeline_file=NULL WHERE id=?", (conversation,))

            self.database.write(work)
            path.unlink(missing_ok=True)

    async def aclose(self) -> None:
        """Close the database, then give up the root (this instance's unfinished turns count as interrupted
        from then on); the store refuses further work."""
        try:
            await in_storage_thread(self.database.close)
        finally:
            await in_storage_thread(self.owners.release)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def conversation(self, scope: ConversationScope) -> SqliteConversationHandle:
        """Return a handle bound to one conversation (created on its first write)."""
        return SqliteConversationHandle(self, scope)

    async def list_conversations(self, owner: OwnerScope) -> tuple[ConversationRecord, ...]:
        """Return the conversation index of one user in one tenant/project, newest first."""

        def work(connection: sqlite3.Connection) -> tuple[ConversationRecord, ...]:
            rows = connection.execute(
                "SELECT c.conversation_id, c.title, c.created_at, c.updated_at,"
                " (SELECT COUNT(*) FROM turns t WHERE t.conversation = c.id)"
                " FROM conversations c WHERE c.tenant=? AND c.project=? AND c.user_id=?"
                " ORDER BY c.updated_at DESC, c.conversation_id",
                (owner.tenant, owner.project, owner.user_id),
            ).fetchall()
            records = []
            for conversation_id, title, created_at, updated_at, turn_count in rows:
                created, updated = _instant(created_at), _instant(updated_at)
                assert created is not None and updated is not None
                records.append(
                    ConversationRecord(
                        scope=owner.conversation(conversation_id),
                        title=title,
                        created_at=created,
                        updated_at=updated,
                        turn_count=turn_count,
                    )
                )
            return tuple(records)

        return await in_storage_thread(self.database.read, work)

    # -- turns this instance accepted or began and has not ended ------------------------------

    def running_turn(self, scope: ConversationScope, turn_id: str) -> tuple[int, int] | None:
        """Return ``(conversation row id, rounds appended)`` of a turn this instance runs, else ``None``."""
        with self._running_lock:
            return self._running.get((scope, turn_id))

    def mark_running(self, scope: ConversationScope, conversation: int, turn_id: str, *, rounds: int) -> None:
        """Remember that this instance runs ``turn_id`` and how many rounds it appended (an append then need
        not look it up)."""
        with self._running_lock:
            self._running[(scope, turn_id)] = (conversation, rounds)

    def mark_done(self, scope: ConversationScope, turn_id: str) -> None:
        """Forget a turn this instance ran, once it is committed."""
        with self._running_lock:
            self._running.pop((scope, turn_id), None)
