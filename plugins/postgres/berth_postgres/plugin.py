"""The ``postgres`` platform plugin: the schema migrations of ``distributed`` storage (``berth migrate``).

The PostgreSQL stores (:mod:`berth_postgres.meta`, :mod:`berth_postgres.memory`, the conversation store) are not yet
assembled into a ``distributed`` storage backend: the host refuses that kind until they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.hooks import hookimpl
from berth_postgres.migrations import migrate

if TYPE_CHECKING:
    from berth.storage.backend import StorageMigrator

STORAGE_KIND = "distributed"


@hookimpl
def berth_storage_migrations() -> dict[str, StorageMigrator]:
    """Register the PostgreSQL migrations for ``distributed`` storage."""
    return {STORAGE_KIND: migrate}
