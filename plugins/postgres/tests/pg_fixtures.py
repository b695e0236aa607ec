"""A scratch PostgreSQL database per test module: created through the ``postgres`` database, dropped after.

Not a ``conftest.py``: test modules import what they use, so each says where its database comes from.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest

from berth.config.environment import running_in_ci
from berth.testing.services import port_open

SERVER: str = "postgresql://postgres@127.0.0.1:5432"
ADMIN_DSN: str = f"{SERVER}/postgres"


async def _admin(statement: str) -> None:
    connection = await asyncpg.connect(ADMIN_DSN)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextmanager
def scratch_database() -> Iterator[str]:
    """Create ``berth_test_<random>``, yield its DSN, drop it (``WITH (FORCE)``) afterwards.

    Without a server on 127.0.0.1:5432 the tests using it are skipped (failed under ``CI=true``).
    """
    if not port_open(5432)():
        if running_in_ci():
            pytest.fail("PostgreSQL on 127.0.0.1:5432 is required in CI")
        pytest.skip("needs PostgreSQL on 127.0.0.1:5432")
    name = f"berth_test_{secrets.token_hex(6)}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{SERVER}/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def migrated_database() -> Iterator[str]:
    """A scratch database with every shipped migration applied (the body of a module-scoped fixture)."""
    from berth_postgres.migrations import migrate

    with scratch_database() as dsn:
        asyncio.run(migrate(dsn))
        yield dsn


async def truncate(dsn: str, *tables: str) -> None:
    """Empty ``tables`` (between tests sharing a module's database)."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f"TRUNCATE {', '.join(tables)}")
    finally:
        await connection.close()
