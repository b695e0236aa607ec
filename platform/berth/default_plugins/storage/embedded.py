"""The ``embedded`` storage backend: SQLite (WAL) and files under one root folder, in one process.

``platform.storage`` ``{kind: embedded, root: ./var}`` in ``assembly.yaml`` selects it. The conversation
store (:class:`~berth.default_plugins.storage.sqlite.SqliteConversationStore`) and the memory index
(:class:`~berth.default_plugins.storage.sqlite_memory.SqliteMemoryIndex`) share ``root/berth.sqlite3`` and one
connection to it (:class:`~berth.default_plugins.storage.sqlite_database.SqliteDatabase`). The stores are imported
when a backend is built, not when the host loads this plugin module at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbeddedStorage
from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.default_plugins.storage.sqlite import SqliteConversationStore
    from berth.default_plugins.storage.sqlite_memory import SqliteMemoryIndex
    from berth.storage.backend import StorageBackendFactory

__all__ = ["STORAGE_KIND", "EmbeddedStorageBackend", "create_embedded_storage"]

STORAGE_KIND: Final = "embedded"


class EmbeddedStorageBackend:
    """The embedded :class:`~berth.storage.backend.StorageBackend`: both stores under one root."""

    def __init__(self, root: Path) -> None:
        from berth.default_plugins.storage.sqlite import SqliteConversationStore
        from berth.default_plugins.storage.sqlite_memory import SqliteMemoryIndex

        self.root = root
        self._conversations = SqliteConversationStore(root)
        # One connection for both: the memory index's writes join the turns' group commits.
        self._memory = SqliteMemoryIndex(root, database=self._conversations.database)

    @property
    def conversations(self) -> SqliteConversationStore:
        """The SQLite conversation store."""
        return self._conversations

    @property
    def memory(self) -> SqliteMemoryIndex:
        """The SQLite (FTS5) memory index."""
        return self._memory

    async def open(self) -> None:
        """Open the conversation store, then the memory index (same database file)."""
        await self._conversations.open()
        try:
            await self._memory.open()
        except BaseException:
            await self._conversations.aclose()
            raise

    async def ping(self) -> str:
        """A write and a read back through a storage thread (what ``/readyz`` asks); raises when storage cannot."""
        await self._conversations.database.probe()
        return f"sqlite {self._conversations.database.path.name}: wrote and read back"

    async def aclose(self) -> None:
        """Close the memory index and the conversation store."""
        try:
            await self._memory.aclose()
        finally:
            await self._conversations.aclose()


def create_embedded_storage(settings: object, /) -> EmbeddedStorageBackend:
    """Build the embedded backend for ``platform.storage`` (an ``EmbeddedStorage``; ``root`` is created on open)."""
    if not isinstance(settings, EmbeddedStorage):
        kind = getattr(settings, "kind", type(settings).__name__)
        raise ConfigError("storage_kind_mismatch", f"the embedded storage backend cannot use {kind!r} settings")
    return EmbeddedStorageBackend(Path(settings.root))


@hookimpl
def berth_storage_backends() -> dict[str, StorageBackendFactory]:
    """Register ``embedded``."""
    return {STORAGE_KIND: create_embedded_storage}
