"""The ``distributed`` storage backend: the conversation store, metadata and memory index on PostgreSQL.

File bytes go to the artifact store of ``platform.storage.artifacts`` (S3, or a local folder); the rows that
say which file is at which path are committed with the turn. The three stores share one asyncpg pool (the
conversation store's, sized by ``platform.storage.postgres`` ``pool_min``/``pool_max``). The conversation store
runs in queued mode: turns belong to the turn queue until a worker claims them (:mod:`berth.distributed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from berth.config.errors import ConfigError
from berth.host.connections import DistributedConnections
from berth_postgres.conversations import PostgresConversationStore
from berth_postgres.memory import PostgresMemoryIndex
from berth_postgres.meta import PostgresMetaStore
from berth_postgres.retrying import RetryPolicy

__all__ = ["PostgresStorageBackend", "create_distributed_storage"]


class PostgresStorageBackend:
    """The distributed :class:`~berth.storage.backend.StorageBackend`, opened and closed as one."""

    def __init__(self, connections: DistributedConnections) -> None:
        self.connections = connections
        self._conversations = PostgresConversationStore(
            connections.postgres_dsn,
            pool_min=connections.pool_min,
            pool_max=connections.pool_max,
            queued=True,
            artifacts=connections.artifact_store,
            retry_budget_s=connections.retry_budget_s,
        )
        self._memory: PostgresMemoryIndex | None = None
        self._meta: PostgresMetaStore | None = None

    @property
    def conversations(self) -> PostgresConversationStore:
        """The PostgreSQL conversation store (queued mode)."""
        return self._conversations

    @property
    def memory(self) -> PostgresMemoryIndex:
        """The PostgreSQL memory index (after :meth:`open`)."""
        if self._memory is None:
            raise RuntimeError("the storage backend is not open")
        return self._memory

    @property
    def meta(self) -> PostgresMetaStore:
        """The PostgreSQL metadata store (after :meth:`open`)."""
        if self._meta is None:
            raise RuntimeError("the storage backend is not open")
        return self._meta

    async def open(self, *, wait: bool = True) -> None:
        """Open the pool (refusing a schema that is behind), then the stores that share it.

        A process that starts while PostgreSQL is unreachable (restarting, failing over) waits for it, retrying
        with backoff for up to ``retry_budget_s``, instead of exiting at once; ``wait=False`` tries once (a probe
        that must answer now). A schema that is behind is refused at once.
        """
        if not wait:
            await self._open_stores()
            return

        async def attempt(retry: int, remaining_s: float) -> None:
            await self._open_stores()

        await RetryPolicy(budget_s=self.connections.retry_budget_s, max_delay_s=5.0).run(attempt)

    async def _open_stores(self) -> None:
        await self._conversations.open()
        try:
            pool = self._conversations.pool
            budget = self.connections.retry_budget_s
            self._memory = PostgresMemoryIndex(pool=pool, retry_budget_s=budget)
            self._meta = PostgresMetaStore(pool=pool, retry_budget_s=budget)
            await self._memory.open()
            await self._meta.open()
        except BaseException:
            await self._conversations.aclose()
            raise

    def observe_retries(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` at every retry of a store operation (after :meth:`open`): a metric's counter."""
        stores: list[Any] = [self._conversations, *(s.store_pool for s in (self._memory, self._meta) if s is not None)]
        for store in stores:
            store.retry = replace(store.retry, on_retry=callback)

    async def ping(self) -> str:
        """One query through the pool; the server's version."""
        version = await self._conversations.pool.fetchval("SHOW server_version")
        return f"PostgreSQL {version}"

    async def aclose(self) -> None:
        """Close the stores and the pool."""
        for store in (self._meta, self._memory):
            if store is not None:
                await store.aclose()
        await self._conversations.aclose()
        if self.connections.artifact_store is not None:
            await self.connections.artifact_store.aclose()


def create_distributed_storage(settings: object, /) -> PostgresStorageBackend:
    """Build the distributed backend from resolved :class:`DistributedConnections`."""
    if not isinstance(settings, DistributedConnections):
        raise ConfigError(
            "storage_kind_mismatch",
            f"the distributed storage backend needs resolved connections, not {type(settings).__name__}",
        )
    return PostgresStorageBackend(settings)
