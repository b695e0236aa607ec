"""Test support: a scratch PostgreSQL database, created through the server's ``postgres`` database and dropped
after (used by this project's tests, its benchmarks, and by bundle authors who test against distributed storage).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth_postgres.migrations import migrate

__all__ = ["SERVER", "async_scratch_database", "scratch_database"]

SERVER: str = "postgresql://postgres@127.0.0.1:5432"
"""The local test server (trust auth); a database name is appended."""


async def _admin(server: str, statement: str) -> None:
    connection = await asyncpg.connect(f"{server}/postgres")
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@asynccontextmanager
async def async_scratch_database(server: str = SERVER, *, migrated: bool = True) -> AsyncIterator[str]:
    """Create ``berth_test_<random>`` (with every migration applied unless ``migrated=False``), yield its DSN,
    drop it (``WITH (FORCE)``: connections left open are ended) afterwards."""
    name = f"berth_test_{secrets.token_hex(6)}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    try:
        if migrated:
            await migrate(f"{server}/{name}")
        yield f"{server}/{name}"
    finally:
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def scratch_database(server: str = SERVER, *, migrated: bool = False) -> Iterator[str]:
    """:func:`async_scratch_database` for synchronous code (no event loop may be running)."""
    name = f"berth_test_{secrets.token_hex(6)}"
    asyncio.run(_admin(server, f'CREATE DATABASE "{name}"'))
    try:
        if migrated:
            asyncio.run(migrate(f"{server}/{name}"))
        yield f"{server}/{name}"
    finally:
        asyncio.run(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
