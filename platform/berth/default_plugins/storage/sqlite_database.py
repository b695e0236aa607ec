"""One SQLite connection in WAL mode, shared by the embedded stores, with group commit.

Writes come in three kinds, by what they need:

* :meth:`SqliteDatabase.write` — a transaction in the calling (worker) thread, durable or not
  (:meth:`SqliteDatabase.read` for a consistent read, :meth:`SqliteDatabase.read_now` for a short one);
* :meth:`SqliteDatabase.write_now` — a short non-durable write (a round's append), run on the event
  loop's thread when the connection is free (handing 0.1 ms of work to a thread costs more than the
  work, in thread wake-ups and GIL hand-offs), and joining the next group commit when it is not;
* :meth:`SqliteDatabase.write_together` — a durable write (a turn's commit) that shares its ``fsync``
  with the durable writes queued while the previous group was committing (group commit). Each write
  runs in its own savepoint: one that fails is rolled back alone and raises to its own caller; the
  others commit. Under load, one ``fsync`` then makes many turns durable instead of one; and it is
  taken after the connection is released, so reads and short writes do not wait for the disk.

Deleted content is overwritten (``PRAGMA secure_delete=ON``: a deleted row's bytes, and every page freed, are
zeroed), and :meth:`SqliteDatabase.purge` checkpoints the WAL and truncates it to nothing, so once a deletion is
purged no byte of what it deleted is left in the database's files: the WAL would otherwise keep the pages as they
were before, until overwritten. Zeroing costs writes that delete or move rows some I/O: it is the price of a
delete that really deletes.

SQLite's automatic WAL checkpoint is off: it runs inside whichever commit crosses the threshold, and a
``write_now`` commit runs on the event loop's thread, so one turn in a thousand stalled every other
for the length of a checkpoint. A checkpoint runs instead every :data:`CHECKPOINT_EVERY` writes, in a
worker thread and on a connection of its own (writes go on meanwhile), and when the database is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from berth.default_plugins.storage.threads import in_storage_thread
from berth.storage.conversations import StorageError

__all__ = ["SqliteDatabase"]

_T = TypeVar("_T")

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 500
"""Writes between two WAL checkpoints (SQLite's own automatic checkpoint is off; see ``open``)."""
_Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)`` of one write of a group."""


def _resolve(future: asyncio.Future[Any], outcome: _Outcome) -> None:
    if future.done():  # its caller was cancelled; the write happened all the same
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class SqliteDatabase:
    """One SQLite connection in WAL mode, used one call at a time (see the module docstring).

    Writes are durable (``synchronous=FULL``: the WAL is ``fsync``-ed at commit) unless the caller says
    otherwise; see :meth:`write`. The connection's own mode is ``NORMAL``; a durable write switches.

    :param trace: called with each SQL statement as executed (values expanded); for diagnostics and
        for tests that check how much a write touches.
    """

    def __init__(self, path: Path, *, trace: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._trace = trace
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._queued: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._committer: asyncio.Task[None] | None = None
        self._writes_since_checkpoint = 0
        self._checkpointer: asyncio.Task[None] | None = None
        self._checkpoint_lock = threading.Lock()
        self._checkpointing: sqlite3.Connection | None = None
        self._folder_synced = False

    def open(self, schema: str, *, added_columns: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> None:
        """Open (or create) the database, switch it to WAL and create ``schema``'s tables.

        :param added_columns: table → ``(column, definition)`` pairs that ``schema`` has but a database
            created by an earlier release may lack; each missing one is added (``ALTER TABLE``).
        """
        with self._lock:
            if self._connection is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")  # a durable write switches to FULL for itself
                connection.execute("PRAGMA busy_timeout=10000")
                connection.execute("PRAGMA secure_delete=ON")  # deleted rows and freed pages are zeroed
                # No checkpoint inside a commit: it would run wherever the write runs, the event loop's
                # thread included, and stall every turn. Checkpoints run in a worker thread instead.
                connection.execute("PRAGMA wal_autocheckpoint=0")
                if self._trace is not None:
                    connection.set_trace_callback(self._trace)
                self._connection = connection
                self._folder_synced = False  # a new WAL file may be made: its folder entry is synced once
            self._connection.executescript(schema)
            for table, columns in (added_columns or {}).items():
                present = {row[1] for row in self._connection.execute(f"PRAGMA table_info({table})")}
                for column, definition in columns:
                    if column not in present:
                        self._connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    def close(self) -> None:
        """Checkpoint and close the connection; later calls fail with ``store_closed``."""
        with self._checkpoint_lock:
            if self._checkpointing is not None:
                self._checkpointing.close()
                self._checkpointing = None
        with self._lock:
            if self._connection is not None:
                self._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                self._connection.close()
                self._connection = None

    def read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` on the connection (a consistent read: WAL snapshot of one transaction)."""
        with self._lock:
            return self._read(work)

    def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        connection = self._require()
        connection.execute("BEGIN")
        try:
            return work(connection)
        finally:
            connection.execute("COMMIT")

    def write(self, work: Callable[[sqlite3.Connection], _T], *, durable: bool = True) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction: all of it commits, or none of it.

        :param durable: ``fsync`` the WAL before returning (``synchronous=FULL``). With ``False``
            (``synchronous=NORMAL``) the transaction survives a killed process but a power loss may take
            it back (never half of it); the next durable write makes it durable too.
        """
        with self._lock:
            return self._transaction(work, durable=durable)

    async def read_now(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run a short read (see :meth:`read`) on this thread when the database is free, else in a worker thread."""
        if not self._lock.acquire(blocking=False):
            return await in_storage_thread(self.read, work)
        try:
            return self._read(work)
        finally:
            self._lock.release()

    async def write_now(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run a short write that need not be durable (see :meth:`write`), on this thread when the database is free.

        When another thread holds the connection, the write joins the next group commit
        (:meth:`write_together`) instead of blocking the caller's event loop. ``work`` must be short:
        it may run on the event loop's thread.
        """
        if not self._lock.acquire(blocking=False):
            # Busy (a group is committing, most likely): join the next group. It waits as long as a
            # worker thread would for the lock, costs no thread of its own, and is fsync-ed besides.
            return await self.write_together(work)
        self._count_write()
        try:
            return self._transaction(work, durable=False)
        finally:
            self._lock.release()

    async def write_together(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` durably, committing it with every durable write queued meanwhile (one ``fsync``).

        ``work`` runs in a worker thread inside its own savepoint: if it raises, only its changes are
        rolled back and the exception is raised here. A cancelled caller does not cancel the write.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._queued.append((work, future))
        self._count_write()
        if self._committer is None or self._committer.done():
            self._committer = loop.create_task(self._commit_queued())
        return await future

    async def _commit_queued(self) -> None:
        """Commit the queued writes, a group at a time, until none is left."""
        while self._queued:
            jobs, self._queued = self._queued, []
            try:
                outcomes = await in_storage_thread(self._run_group, [work for work, _ in jobs])
            except BaseException as exc:  # the task itself was cancelled (the loop is closing)
                outcomes = [(False, StorageError("store_closed", f"the write was not committed: {exc!r}"))] * len(jobs)
                for (_, future), outcome in zip(jobs, outcomes, strict=True):
                    _resolve(future, outcome)
                raise
            for (_, future), outcome in zip(jobs, outcomes, strict=True):
                _resolve(future, outcome)

    def _count_write(self) -> None:
        """Count a write; every :data:`CHECKPOINT_EVERY` writes, checkpoint the WAL in a worker thread."""
        self._writes_since_checkpoint += 1
        if self._writes_since_checkpoint >= CHECKPOINT_EVERY and (
            self._checkpointer is None or self._checkpointer.done()
        ):
            self._writes_since_checkpoint = 0
            self._checkpointer = asyncio.get_running_loop().create_task(in_storage_thread(self.checkpoint))

    async def probe(self) -> None:
        """A round-trip through a storage thread: write a row (not ``fsync``-ed) and read it back; raises
        :class:`StorageError` when it cannot. ``/readyz`` asks this, so a store whose threads or write lock are
        taken answers "not ready" instead of a cheerful 200."""
        stamp = time.time()

        def work(connection: sqlite3.Connection) -> float:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS berth_probe (id INTEGER PRIMARY KEY CHECK (id = 1), at REAL NOT NULL)"
            )
            connection.execute(
                "INSERT INTO berth_probe (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
                (stamp,),
            )
            row = connection.execute("SELECT at FROM berth_probe WHERE id = 1").fetchone()
            return float(row[0])

        self._count_write()  # one WAL page each time: the next checkpoint takes it back
        read = await in_storage_thread(self.write, work, durable=False)
        if read != stamp:
            raise StorageError("store_probe_failed", f"{self.path.name}: wrote {stamp!r} and read back {read!r}")

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file (``PASSIVE``: nobody is waited for).

        It runs on a connection of its own: in WAL mode a checkpoint goes on alongside the writes, so
        turns do not wait for it (on the main connection they stalled for up to 0.7 s under load).
        """
        with self._checkpoint_lock:
            if self._connection is None:
                return
            if self._checkpointing is None:
                self._checkpointing = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._checkpointing.execute("PRAGMA busy_timeout=10000")
            self._checkpointing.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def purge(self) -> bool:
        """Copy every frame of the WAL into the database file and truncate the WAL to nothing: what a deletion
        zeroed is then zeroed in the file, and no older version of its pages is left in the WAL. Return False when
        another process reading the database kept it from finishing (its WAL is then truncated by the next purge).
        """
        with self._checkpoint_lock, self._lock:
            connection = self._require()
            busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.warning("%s: a reader kept the WAL from being truncated after a deletion", self.path.name)
        return not busy

    def _run_group(self, works: Sequence[Callable[[sqlite3.Connection], Any]]) -> list[_Outcome]:
        """Run each write in a savepoint of one transaction, then make it durable; return each one's outcome.

        The transaction commits without an ``fsync`` (the connection's ``synchronous=NORMAL``) and the
        WAL is ``fsync``-ed after the connection is released: in WAL mode that is what ``FULL`` does at
        commit, but other writes need not wait for the disk meanwhile. (A checkpoint, which could move
        the frames on, ``fsync``-s the WAL before it starts.)
        """
        with self._lock:
            try:
                connection = self._require()
            except StorageError as closed:
                return [(False, closed)] * len(works)
            outcomes: list[_Outcome] = []
            try:
                connection.execute("BEGIN IMMEDIATE")
                for work in works:
                    connection.execute("SAVEPOINT write")
                    try:
                        outcomes.append((True, work(connection)))
                    except Exception as exc:
                        connection.execute("ROLLBACK TO write")
                        outcomes.append((False, exc))
                    connection.execute("RELEASE write")
                connection.execute("COMMIT")
            except Exception as exc:  # the transaction itself failed (disk full, I/O error): nothing committed
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                return [(False, exc)] * len(works)
        try:
            self._sync_wal()
        except OSError as exc:
            unsynced = StorageError("store_closed", f"committed, but the disk refused to sync it: {exc}")
            return [(False, unsynced)] * len(works)
        return outcomes

    def _sync_wal(self) -> None:
        """``fsync`` the WAL file (and, the first time, its folder, which holds the WAL's entry)."""
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            descriptor = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # the database was closed meanwhile: its last checkpoint synced the frames into the file
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        if not self._folder_synced:
            folder = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
            self._folder_synced = True

    def _transaction(self, work: Callable[[sqlite3.Connection], _T], *, durable: bool) -> _T:
        connection = self._require()
        if durable:
            connection.execute("PRAGMA synchronous=FULL")
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            if durable:
                connection.execute("PRAGMA synchronous=NORMAL")
        return result

    def _require(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StorageError("store_closed", "the store is not open; call open() (or use 'async with') first")
        return self._connection
