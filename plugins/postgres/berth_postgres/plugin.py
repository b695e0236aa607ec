"""The ``postgres`` platform plugin: ``distributed`` storage on PostgreSQL and its migrations (``berth migrate``).

The host loads every plugin module at start-up, whichever storage it uses: the factories here import the stores
(asyncpg, numpy) when they are called, so an embedded host or ``berth descriptors check`` does not pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.host.connections import DistributedConnections
    from berth.knowledge.store import KnowledgeStoresFactory
    from berth.storage.backend import StorageBackendFactory, StorageMigrator
    from berth_postgres.backend import PostgresStorageBackend
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.migrations import MigrationProgress

STORAGE_KIND = "distributed"


async def migrate(dsn: str, progress: MigrationProgress | None = None) -> tuple[str, ...]:
    """Apply the pending migrations to ``dsn`` (:func:`berth_postgres.migrations.migrate`)."""
    from berth_postgres.migrations import migrate as apply

    return await apply(dsn, progress)


def create_distributed_storage(settings: object, /) -> PostgresStorageBackend:
    """The distributed backend (:func:`berth_postgres.backend.create_distributed_storage`)."""
    from berth_postgres.backend import create_distributed_storage as create

    return create(settings)


def create_knowledge_stores(connections: DistributedConnections) -> PostgresKnowledgeStores:
    """The knowledge stores on PostgreSQL (:func:`berth_postgres.knowledge.create_knowledge_stores`)."""
    from berth_postgres.knowledge import create_knowledge_stores as create

    return create(connections)


@hookimpl
def berth_storage_migrations() -> dict[str, StorageMigrator]:
    """Register the PostgreSQL migrations for ``distributed`` storage."""
    return {STORAGE_KIND: migrate}


@hookimpl
def berth_storage_backends() -> dict[str, StorageBackendFactory]:
    """Register the ``distributed`` backend (built from resolved connection settings)."""
    return {STORAGE_KIND: create_distributed_storage}


@hookimpl
def berth_knowledge_stores() -> dict[str, KnowledgeStoresFactory]:
    """Register the PostgreSQL knowledge stores for ``distributed`` storage (shared by every host)."""
    return {STORAGE_KIND: create_knowledge_stores}
