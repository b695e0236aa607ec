"""The migration runner: versioned SQL applied in order, each once and in its own transaction, serialized across
concurrent runners; and the start-up check that refuses a schema that is behind."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from berth_postgres.migrations import (
    Migration,
    apply_migrations,
    available_migrations,
    describe_server,
    migrate,
    pending,
    pending_on,
    require_current,
)
from pg_fixtures import scratch_database

from berth.config.errors import ConfigError

pytestmark = pytest.mark.postgres

Connect = Callable[[], Awaitable[asyncpg.Connection]]

CREATE = Migration("0001_create", "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT NOT NULL)")
ALTER = Migration("0002_alter", "ALTER TABLE notes ADD COLUMN author TEXT; CREATE INDEX notes_author ON notes (author)")
INSERT = Migration("0003_insert", "SELECT pg_sleep(0.2); INSERT INTO notes (id, body, author) VALUES (1, 'hi', 'ada')")
FAILING = Migration("0003_failing", "CREATE TABLE half (id INT); SELECT 1 / 0")


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with scratch_database() as dsn:
        yield dsn


@pytest.fixture
async def connect(database: str) -> AsyncIterator[Connect]:
    """Connections whose ``search_path`` is a schema of this test's own, so each test starts from nothing."""
    schema = f"t_{secrets.token_hex(4)}"
    opened: list[asyncpg.Connection] = []
    admin = await asyncpg.connect(database)
    await admin.execute(f"CREATE SCHEMA {schema}")

    async def open_connection() -> asyncpg.Connection:
        connection = await asyncpg.connect(database, server_settings={"search_path": schema})
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        await connection.close()
    await admin.execute(f"DROP SCHEMA {schema} CASCADE")
    await admin.close()


async def recorded(connection: asyncpg.Connection) -> list[str]:
    return [row["version"] for row in await connection.fetch("SELECT version FROM berth_schema_migrations ORDER BY 1")]


async def test_migrations_apply_in_order_and_report_each_step(connect: Connect) -> None:
    connection = await connect()
    steps: list[tuple[str, str]] = []
    applied = await apply_migrations(connection, [CREATE, ALTER, INSERT], lambda v, s: steps.append((v, s)))
    assert applied == ("0001_create", "0002_alter", "0003_insert")
    assert steps == [(v, s) for v in applied for s in ("applying", "applied")]
    assert await recorded(connection) == list(applied)
    assert await connection.fetchval("SELECT author FROM notes WHERE id = 1") == "ada"


async def test_a_second_run_applies_nothing(connect: Connect) -> None:
    connection = await connect()
    await apply_migrations(connection, [CREATE, ALTER])
    steps: list[tuple[str, str]] = []
    assert await apply_migrations(connection, [CREATE, ALTER], lambda v, s: steps.append((v, s))) == ()
    assert steps == []
    assert await apply_migrations(connection, [CREATE, ALTER, INSERT]) == ("0003_insert",)  # only the new one


async def test_concurrent_runners_apply_each_migration_once(connect: Connect) -> None:
    runners = [await connect() for _ in range(3)]
    results = await asyncio.gather(*(apply_migrations(c, [CREATE, ALTER, INSERT]) for c in runners))
    applied = [version for result in results for version in result]
    assert sorted(applied) == ["0001_create", "0002_alter", "0003_insert"]  # each once, whoever ran it
    assert await runners[0].fetchval("SELECT count(*) FROM notes") == 1


async def test_a_failing_migration_rolls_back_and_is_not_recorded(connect: Connect) -> None:
    connection = await connect()
    steps: list[tuple[str, str]] = []
    with pytest.raises(asyncpg.DivisionByZeroError):
        await apply_migrations(connection, [CREATE, FAILING], lambda v, s: steps.append((v, s)))
    assert steps[-2:] == [("0003_failing", "applying"), ("0003_failing", "failed")]
    assert await recorded(connection) == ["0001_create"]  # the one before it stays applied
    assert await connection.fetchval("SELECT to_regclass('half')") is None  # nothing of it is left
    assert [m.version for m in await pending_on(connection, [CREATE, FAILING])] == ["0003_failing"]
    # the advisory lock was released: another runner proceeds
    assert await apply_migrations(await connect(), [CREATE, ALTER]) == ("0002_alter",)


async def test_a_schema_that_is_behind_is_refused_with_the_command_that_fixes_it(connect: Connect) -> None:
    connection = await connect()
    with pytest.raises(ConfigError) as nothing_applied:
        await require_current(connection, [CREATE, ALTER])
    assert nothing_applied.value.code == "schema_behind"
    assert "2 migrations pending (0001_create, 0002_alter)" in str(nothing_applied.value)
    await apply_migrations(connection, [CREATE])
    with pytest.raises(ConfigError, match=r"1 migration pending \(0002_alter\); run `berth migrate`"):
        await require_current(connection, [CREATE, ALTER])
    await apply_migrations(connection, [CREATE, ALTER])
    await require_current(connection, [CREATE, ALTER])


async def test_the_shipped_migrations_apply_in_name_order_and_leave_nothing_pending(database: str) -> None:
    shipped = [m.version for m in available_migrations()]
    assert shipped == sorted(shipped)
    assert {"0002_meta", "0003_memory"} <= set(shipped)
    assert await pending(database) == tuple(shipped)
    steps: list[tuple[str, str]] = []
    assert await migrate(database, lambda v, s: steps.append((v, s))) == tuple(shipped)
    assert await pending(database) == ()
    assert await migrate(database) == ()
    connection = await asyncpg.connect(database)
    try:
        await require_current(connection)
    finally:
        await connection.close()


def test_the_server_is_described_without_its_password() -> None:
    assert describe_server("postgresql://berth:s3cret@db.internal:6543/berth") == "berth@db.internal:6543/berth"
    assert describe_server("postgres://db.internal/app") == "db.internal:5432/app"
    assert "s3cret" not in describe_server("host=db password=s3cret")
