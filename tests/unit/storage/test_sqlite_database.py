"""The shared SQLite connection: group commit of durable writes, each in its own savepoint."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.default_plugins.storage.sqlite_database import SqliteDatabase
from berth.storage.conversations import StorageError


def open_database(tmp_path: Path, statements: list[str]) -> SqliteDatabase:
    database = SqliteDatabase(tmp_path / "db.sqlite3", trace=statements.append)
    database.open("CREATE TABLE t (x INTEGER PRIMARY KEY);")
    return database


def insert(value: int) -> Callable[[sqlite3.Connection], int]:
    def work(connection: sqlite3.Connection) -> int:
        connection.execute("INSERT INTO t VALUES (?)", (value,))
        return value

    return work


def stored(database: SqliteDatabase) -> list[int]:
    return [row[0] for row in database.read(lambda c: c.execute("SELECT x FROM t ORDER BY x").fetchall())]


@contextmanager
def held_by_another_thread(database: SqliteDatabase) -> Iterator[tuple[threading.Thread, threading.Event]]:
    """Hold the connection in a write on another thread until the yielded event is set (or the block ends)."""
    holding, release = threading.Event(), threading.Event()

    def hold(connection: sqlite3.Connection) -> None:
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=database.write, args=(hold,))
    holder.start()
    assert holding.wait(10)
    try:
        yield holder, release
    finally:
        release.set()
        holder.join()


def test_durable_writes_queued_together_share_one_commit_and_one_wal_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements: list[str] = []
    database = open_database(tmp_path, statements)
    statements.clear()
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)

    async def ten_writers() -> list[int]:
        return list(await asyncio.gather(*(database.write_together(insert(n)) for n in range(10))))

    assert asyncio.run(ten_writers()) == list(range(10))
    assert statements.count("COMMIT") == 1, "one commit for the ten writes"
    wal = str(tmp_path / "db.sqlite3-wal")
    assert synced.count(wal) == 1, "and one fsync of the WAL, after the commit"
    assert stored(database) == list(range(10))
    database.close()


def test_a_write_that_fails_is_rolled_back_alone_and_raises_to_its_caller(tmp_path: Path) -> None:
    database = open_database(tmp_path, [])

    def half_then_fail(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO t VALUES (100)")
        raise StorageError("conflicting_commit", "changed meanwhile")

    async def writers() -> list[object]:
        return list(
            await asyncio.gather(
                database.write_together(insert(1)),
                database.write_together(half_then_fail),
                database.write_together(insert(1)),  # a duplicate key: fails in SQLite itself
                database.write_together(insert(2)),
                return_exceptions=True,
            )
        )

    first, failed, duplicate, last = asyncio.run(writers())
    assert (first, last) == (1, 2)
    assert isinstance(failed, StorageError) and failed.code == "conflicting_commit"
    assert isinstance(duplicate, sqlite3.IntegrityError)
    assert stored(database) == [1, 2], "the failed writes left nothing; the others committed"
    database.close()


def test_writes_to_a_closed_database_fail_with_store_closed(tmp_path: Path) -> None:
    database = open_database(tmp_path, [])
    database.close()
    with pytest.raises(StorageError) as closed:
        asyncio.run(database.write_together(insert(1)))
    assert closed.value.code == "store_closed"


def test_a_checkpoint_runs_while_another_thread_holds_the_connection(tmp_path: Path) -> None:
    database = open_database(tmp_path, [])
    for n in range(20):
        database.write(insert(n), durable=False)
    with held_by_another_thread(database) as (holder, _):
        database.checkpoint()  # on its own connection: it does not wait for the held one
        assert holder.is_alive(), "the checkpoint finished while the other write still held the connection"
    with sqlite3.connect(tmp_path / "db.sqlite3") as observer:
        _, frames, copied = observer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == copied, "every frame of the WAL is in the database file"
    assert stored(database) == list(range(20))
    database.close()


def test_a_short_write_waits_off_the_event_loop_while_another_thread_holds_the_database(tmp_path: Path) -> None:
    database = open_database(tmp_path, [])
    with held_by_another_thread(database) as (_, release):

        async def write_while_held() -> None:
            write = asyncio.ensure_future(database.write_now(lambda c: c.execute("INSERT INTO t VALUES (1)")))
            await asyncio.sleep(0)  # a yield, not a wait: the event loop runs on while the write waits
            assert not write.done()
            release.set()
            await write

        asyncio.run(write_while_held())
    assert database.read(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 1
    database.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-5, 5), max_size=12))
def test_a_group_commits_exactly_the_writes_that_succeeded(tmp_path: Path, values: list[int]) -> None:
    database = SqliteDatabase(Path(tempfile.mkdtemp(dir=tmp_path)) / "db.sqlite3")  # a new one per example
    database.open("CREATE TABLE t (x INTEGER PRIMARY KEY);")

    def write(value: int) -> Callable[[sqlite3.Connection], int]:
        def work(connection: sqlite3.Connection) -> int:
            connection.execute("INSERT INTO t VALUES (?)", (value,))
            if value < 0:
                raise ValueError("refused after writing")
            return value

        return work

    async def together() -> list[object]:
        return list(await asyncio.gather(*(database.write_together(write(v)) for v in values), return_exceptions=True))

    outcomes = asyncio.run(together())
    expected: list[int] = []
    for value, outcome in zip(values, outcomes, strict=True):
        if value < 0:
            assert isinstance(outcome, ValueError)
        elif value in expected:
            assert isinstance(outcome, sqlite3.IntegrityError)
        else:
            assert outcome == value
            expected.append(value)
    assert stored(database) == sorted(expected)
    database.close()
