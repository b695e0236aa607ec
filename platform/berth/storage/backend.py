"""A storage backend: the conversation store and the memory index of one storage configuration.

A platform plugin's ``berth_storage_backends()`` maps a storage kind (``platform.storage.kind`` in
``assembly.yaml``: ``embedded``, ``distributed``) to a :class:`StorageBackendFactory`; the host builds
one backend at start-up, opens it, and closes it at shutdown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from berth.storage.conversations import ConversationStore
    from berth.storage.memory import MemoryIndex

__all__ = ["MigrationProgress", "StorageBackend", "StorageBackendFactory", "StorageMigrator"]

MigrationProgress: TypeAlias = Callable[[str, str], None]
"""Called with a migration's version and its status (``applying``, ``applied``, ``failed``)."""


class StorageBackend(Protocol):
    """The stores of one storage configuration, opened and closed together."""

    @property
    def conversations(self) -> ConversationStore:
        """Timelines, sources pools, turn logs and the conversation index."""
        ...

    @property
    def memory(self) -> MemoryIndex:
        """The index behind ``react.memsearch``."""
        ...

    async def open(self) -> None:
        """Open every store (create or migrate schemas, open connections)."""
        ...

    async def aclose(self) -> None:
        """Close every store; they refuse further work."""
        ...


class StorageBackendFactory(Protocol):
    """What ``berth_storage_backends()`` maps a storage kind to: builds a backend from its settings.

    ``settings`` is the ``platform.storage`` model of that kind (e.g. ``EmbeddedStorage``); a factory
    reads only the fields of its own kind.
    """

    def __call__(self, settings: object, /) -> StorageBackend:
        """Build the (unopened) backend for ``settings``."""
        ...


class StorageMigrator(Protocol):
    """What ``berth_storage_migrations()`` maps a storage kind to: brings its database schema up to date.

    ``berth migrate`` resolves the kind's DSN from the descriptors (or ``--dsn``) and calls it; the storage plugin
    owns its migrations, so the core never imports a database driver.
    """

    async def __call__(self, dsn: str, progress: MigrationProgress, /) -> Sequence[str]:
        """Apply every pending migration, reporting each step; return the versions applied, in order."""
        ...
