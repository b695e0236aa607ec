"""The ``postgres`` platform plugin: ``distributed`` storage on PostgreSQL and its migrations (``berth migrate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.hooks import hookimpl
from berth_postgres.backend import create_distributed_storage
from berth_postgres.knowledge import create_knowledge_stores
from berth_postgres.migrations import migrate

if TYPE_CHECKING:
    from berth.knowledge.store import KnowledgeStoresFactory
    from berth.storage.backend import StorageBackendFactory, StorageMigrator

STORAGE_KIND = "distributed"


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
