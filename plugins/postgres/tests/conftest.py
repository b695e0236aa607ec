"""Fixtures for the PostgreSQL store tests: a database of its own per test, migrated, and an open store.

The tests need PostgreSQL on 127.0.0.1:5432 (user ``postgres``, trust auth) and carry the ``postgres``
marker: without the server they are skipped, or fail under ``CI=true``.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import berth_postgres
import pytest

from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.storage.conversations import ConversationStore
from berth.storage.scope import ConversationScope, OwnerScope

# The core's storage tests keep their block builders in a module of their folder; these tests share them.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "unit" / "storage"))

from berth_postgres.conversations import REQUIRED_MIGRATIONS, PostgresConversationStore
from berth_postgres.testing import async_scratch_database

SERVER: str = "postgresql://postgres@127.0.0.1:5432"
"""The test server (trust auth); a database name is appended."""

MIGRATIONS: Path = Path(berth_postgres.__file__).parent / "migrations"


async def apply_migration(dsn: str, name: str) -> None:
    """Apply one migration file and record it in ``berth_schema_migrations``, as ``berth migrate`` does."""
    connection = await asyncpg.connect(dsn)
    try:
        async with connection.transaction():
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS berth_schema_migrations"
                " (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            await connection.execute((MIGRATIONS / f"{name}.sql").read_text(encoding="utf-8"))
            await connection.execute("INSERT INTO berth_schema_migrations (version) VALUES ($1)", name)
    finally:
        await connection.close()


@pytest.fixture
async def database() -> AsyncIterator[str]:
    """The DSN of a new, empty database ``berth_test_<random>``, dropped (with its connections) after the test."""
    name = f"berth_test_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(f"{SERVER}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield f"{SERVER}/{name}"
    finally:
        admin = await asyncpg.connect(f"{SERVER}/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def migrated(database: str) -> str:
    """The DSN of a new database with the conversation tables (the migrations the conversation store needs)."""
    for name in REQUIRED_MIGRATIONS:
        await apply_migration(database, name)
    return database


@pytest.fixture
async def pg_store(migrated: str) -> AsyncIterator[PostgresConversationStore]:
    """An open PostgreSQL store on a migrated database of its own, closed after the test."""
    opened = PostgresConversationStore(migrated, pool_min=1, pool_max=4)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture(params=["distributed", "embedded"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """An open conversation store, closed after the test: PostgreSQL on a migrated database of its own
    (``distributed``) or SQLite under ``tmp_path`` (``embedded``): the store contract holds for both."""
    if request.param == "embedded":
        opened: ConversationStore = SqliteConversationStore(tmp_path / "var")
        await opened.open()
        try:
            yield opened
        finally:
            await opened.aclose()
        return
    async with async_scratch_database() as dsn:
        opened = PostgresConversationStore(dsn, pool_min=1, pool_max=4)
        await opened.open()
        try:
            yield opened
        finally:
            await opened.aclose()


@pytest.fixture
def owner() -> OwnerScope:
    """Ada, a user of acme/support."""
    return OwnerScope(tenant="acme", project="support", user_id="ada")


@pytest.fixture
def scope(owner: OwnerScope) -> ConversationScope:
    """Ada's conversation ``conv-1``."""
    return owner.conversation("conv-1")
