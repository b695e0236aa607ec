"""The connection pool a PostgreSQL store uses: its own (from a DSN) or one shared with the other stores."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth_postgres.migrations import PostgresUnavailableError, describe_server, require_current
from berth_postgres.retrying import CONNECTION_LOST, DEFAULT_RETRY_BUDGET_S, RetryPolicy, connection_lost

__all__ = ["CONNECTION_LOST", "MIN_ACQUIRE_TIMEOUT_S", "StorePool", "transaction_attempt"]

_T = TypeVar("_T")

MIN_ACQUIRE_TIMEOUT_S: Final = 1.0
"""The least time a try waits for a pooled connection (also its last try, when little of the budget is left)."""


async def transaction_attempt(pool: asyncpg.Pool, work: Callable[[Any], Awaitable[_T]], remaining_s: float) -> _T:
    """One try of an operation: ``work(connection)`` in one transaction on a connection of ``pool``, waiting at
    most ``remaining_s`` (at least :data:`MIN_ACQUIRE_TIMEOUT_S`) for the connection (opening one fails at once
    while the server refuses connections, and hangs while the network drops them).

    When the connection is lost, the pool's other connections are expired first: what ended this one (a restarted
    server, a cut network) likely ended its idle siblings, and the pool replaces each on its next acquire instead
    of handing out a dead one.
    """
    try:
        async with pool.acquire(timeout=max(remaining_s, MIN_ACQUIRE_TIMEOUT_S)) as connection:
            try:
                async with connection.transaction():
                    return await work(connection)
            except asyncpg.InternalClientError:
                # A pooled connection the server ended while it sat idle can fail its next statement with a
                # protocol-state error instead of a connection error: drop it from the pool.
                connection.terminate()
                raise
    except Exception as error:
        if connection_lost(error) and not pool.is_closing():
            await pool.expire_connections()
        raise


class StorePool:
    """An asyncpg pool a store opens and closes: built from ``dsn`` (owned) or given (shared, closed by its owner).

    Opening checks that the schema is current (:func:`~berth_postgres.migrations.require_current`), so a store never
    runs on a schema that ``berth migrate`` has not brought up to date.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("give either a DSN or a shared pool")
        self.retry = RetryPolicy(budget_s=retry_budget_s)
        """How an operation whose connection drops is retried."""
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
        """Run ``work(connection)`` in one transaction; again on a fresh connection when the connection drops or
        cannot be opened (the transaction rolled back: ``pg_terminate_backend``, a restarted or failing-over
        server), with backoff, for as long as the retry budget lasts (:class:`~berth_postgres.retrying.RetryPolicy`).

        :raises PostgresUnavailableError: when PostgreSQL did not come back within the budget.
        """
        pool = self.pool

        async def attempt(retry: int, remaining_s: float) -> _T:
            return await transaction_attempt(pool, work, remaining_s)

        def retryable(error: BaseException) -> bool:
            return connection_lost(error) and not pool.is_closing()

        return await self.retry.run(attempt, retryable=retryable)

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
