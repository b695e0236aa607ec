"""A scratch PostgreSQL database per test module: created through the ``postgres`` database, dropped after.

Not a ``conftest.py``: test modules import what they use, so each says where its database comes from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from berth_postgres.testing import SERVER
from berth_postgres.testing import scratch_database as scratch

from berth.config.environment import running_in_ci
from berth.testing.services import port_open


@contextmanager
def scratch_database() -> Iterator[str]:
    """Create ``berth_test_<random>``, yield its DSN, drop it (``WITH (FORCE)``) afterwards.

    Without a server on 127.0.0.1:5432 the tests using it are skipped (failed under ``CI=true``).
    """
    if not port_open(5432)():
        if running_in_ci():
            pytest.fail("PostgreSQL on 127.0.0.1:5432 is required in CI")
        pytest.skip("needs PostgreSQL on 127.0.0.1:5432")
    with scratch(SERVER) as dsn:
        yield dsn


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
