"""Run the same tests on both storage kinds: ``embedded`` (SQLite) and ``distributed`` (PostgreSQL + Redis).

A test module opts in with ``pytestmark = pytest.mark.usefixtures("storage_kind")``: each of its tests then runs
once per kind (the ``distributed`` run carries the ``postgres`` and ``redis`` markers), and helpers that build a
host read :func:`current_storage_kind` to choose. :func:`distributed_storage` makes the ``platform.storage``
section of a distributed run: a scratch PostgreSQL database (migrated, dropped after) and an emptied Redis
database of a server the test process started itself (it needs the ``berth-postgres`` plugin).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeAlias

import pytest

__all__ = [
    "STORAGE_KINDS",
    "StorageKind",
    "current_storage_kind",
    "distributed_storage",
    "storage_kind",
]

StorageKind: TypeAlias = Literal["embedded", "distributed"]


STORAGE_KINDS = (
    pytest.param("embedded", id="embedded"),
    pytest.param("distributed", id="distributed", marks=(pytest.mark.postgres, pytest.mark.redis)),
)

_current: list[StorageKind] = ["embedded"]


def current_storage_kind() -> StorageKind:
    """The storage kind the running test asked for (``embedded`` unless it uses :func:`storage_kind`)."""
    return _current[-1]


@pytest.fixture(params=STORAGE_KINDS)
def storage_kind(request: pytest.FixtureRequest) -> Iterator[StorageKind]:
    """Run the test once per storage kind; :func:`current_storage_kind` says which while it runs."""
    kind: StorageKind = request.param
    _current.append(kind)
    try:
        yield kind
    finally:
        _current.pop()


@asynccontextmanager
async def distributed_storage(redis_url: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """The ``platform.storage`` section of a distributed test host: a scratch migrated database and an emptied
    Redis database (both cleaned up after). The Redis is this test process's own
    (:func:`~berth.testing.redis.test_redis_url`) unless ``redis_url`` names one the caller started."""
    import redis.asyncio as aioredis
    from berth_postgres.testing import async_scratch_database

    from berth.testing.redis import test_redis_url

    redis_url = redis_url or test_redis_url()
    client = aioredis.from_url(redis_url)
    try:
        await client.flushdb()
        async with async_scratch_database() as dsn:
            yield {"kind": "distributed", "postgres": {"dsn": dsn}, "redis": {"url": redis_url}}
        await client.flushdb()
    finally:
        await client.aclose()
