"""The knowledge index tests run on both stores: SQLite files and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from berth.knowledge.store import SpaceStoreFactory

STORE_KINDS = (
    pytest.param("embedded", id="sqlite"),
    pytest.param("distributed", id="postgres", marks=pytest.mark.postgres),
)


@pytest.fixture(params=STORE_KINDS)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[SpaceStoreFactory | None]:
    """The space stores of the test: None (SQLite files under the service's root) or PostgreSQL stores on a
    scratch database of their own."""
    if request.param == "embedded":
        yield None
        return
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        postgres = PostgresKnowledgeStores(dsn)
        yield postgres
        await postgres.aclose()
