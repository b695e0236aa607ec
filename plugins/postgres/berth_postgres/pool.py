"""The connection pool a PostgreSQL store uses: its own (from a DSN) or one shared with the other stores."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth_postgres.migrations import PostgresUnavailableError, describe_server, require_current

__all__ = ["ATTEMPTS", "CONNECTION_LOST", "StorePool"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

ATTEMPTS: Final = 3
"""Tries of one operation when its connection drops (each on a fresh connection): a failover or a burst of
terminated connections can take more than one in a row."""

CONNECTION_LOST: Final[tuple[type[BaseException], ...]] = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,  # pg_terminate_backend
    asyncpg.CrashShutdownError,
    ConnectionError,
)
"""Errors that mean the connection is gone and its transaction rolled back: the operation may be retried."""


class StorePool:
    """An asyncpg pool a store opens and closes: built from ``dsn`` (owned) or given (shared, closed by its owner).

    Opening checks that the schema is current (:func:`~berth_postgres.migrations.require_current`), so a store never
    runs on a schema that ``berth migrate`` has not brought up to date.
    """

    def __init__(
        self, dsn: str | None = None, *, pool: asyncpg.Pool | None = None, min_size: int = 1, max_size: int = 10
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("give either a DSN or a shared pool")
        self._dsn = dsn
        self._pool = pool
        self._owned = pool is None
        self._sizes = (min_size, max_size)

    @property
    def pool(self) -> asyncpg.Pool:
        """The open pool."""
        if self._pool is None:
            raise RuntimeError("the store is not open")
        return self._pool

    async def open(self) -> None:
        """Create the pool (when owned) and refuse a schema that is behind."""
        if self._pool is None:
            assert self._dsn is not None
            try:
                self._pool = await asyncpg.create_pool(
                    self._dsn, min_size=self._sizes[0], max_size=self._sizes[1], timeout=10.0
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                raise PostgresUnavailableError(
                    f"cannot connect to PostgreSQL at {describe_server(self._dsn)}: {type(exc).__name__}"
                ) from None
        try:
            async with self.pool.acquire() as connection:
                await require_current(connection)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the pool when this store owns it."""
        if self._owned and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def in_transaction(self, work: Callable[[Any], Awaitable[_T]]) -> _T:
        """Run ``work(connection)`` in one transaction; again on a fresh connection when the connection drops
        (the transaction rolled back: ``pg_terminate_backend``, a restarted server)."""
        for attempt in range(ATTEMPTS):
            try:
                async with self.pool.acquire() as connection:
                    try:
                        async with connection.transaction():
                            return await work(connection)
                    except asyncpg.InternalClientError:
                        # A pooled connection the server ended while it sat idle can fail its next statement with a
                        # protocol-state error instead of a connection error: drop it from the pool.
                        connection.terminate()
                        raise
            except (*CONNECTION_LOST, asyncpg.InternalClientError) as error:
                if attempt == ATTEMPTS - 1:
                    raise
                log.warning("the PostgreSQL connection dropped (%s); retrying the operation", error)
                await self.pool.expire_connections()
        raise AssertionError("unreachable")

    async def fetch(self, sql: str, *arguments: Any) -> list[Any]:
        """``fetch`` in its own transaction, retried on a fresh connection when the connection drops."""

        async def work(connection: Any) -> list[Any]:
            return list(await connection.fetch(sql, *arguments))

        return await self.in_transaction(work)

    async def execute(self, sql: str, *arguments: Any) -> str:
        """``execute`` in its own transaction, retried on a fresh connection when the connection drops; returns
        the status."""

        async def work(connection: Any) -> str:
            return str(await connection.execute(sql, *arguments))

        return await self.in_transaction(work)
