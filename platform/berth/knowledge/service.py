"""The host's knowledge service: one :class:`~berth.knowledge.space.SpaceIndex` per bundle space, with the
platform's embedder, its indexes in a :class:`~berth.knowledge.store.SpaceStore` each — SQLite files under
``platform.knowledge.root`` by default; with distributed storage, the store a plugin registers through
``berth_knowledge_stores`` (``berth-postgres``: PostgreSQL, shared by every host).

Layout of the folder::

    <root>/spaces/<bundle id>/<space>.sqlite3   a space's SQLite index (and <space>.lock)
    <root>/git/                                 bare mirrors and exported trees of GitRepository indexers
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from berth.config.models.assembly import KnowledgeConfig
from berth.knowledge.indexers import as_indexer
from berth.knowledge.space import SpaceIndex
from berth.knowledge.sqlite_store import SqliteSpaceStore
from berth.knowledge.store import SpaceStore, SpaceStoreFactory
from berth.runtime.memory import Embedder, HashedNgramEmbedder

if TYPE_CHECKING:
    from berth.bundle.knowledge import KnowledgeSpace
    from berth.config import Configuration

__all__ = ["KnowledgeService", "knowledge_root"]


def knowledge_root(config: Configuration, var_root: Path | None = None) -> Path:
    """The knowledge folder: ``platform.knowledge.root``, else ``<embedded storage root>/knowledge``
    (``var_root`` overrides the storage root, as ``berth run --var`` does), else ``./var/knowledge``;
    relative paths are relative to the descriptors folder."""
    settings = config.settings_for()
    base = config.descriptors.base_dir
    if settings.knowledge.root is not None:
        return (base / settings.knowledge.root).resolve()
    if var_root is not None:
        return (var_root / "knowledge").resolve()
    storage = settings.storage
    if storage.kind == "embedded":
        return (base / storage.root / "knowledge").resolve()
    return (base / "var" / "knowledge").resolve()


class KnowledgeService:
    """Opens the indexes of bundles' knowledge spaces."""

    def __init__(
        self,
        root: Path,
        embedder: Embedder | None = None,
        *,
        embedder_name: str = "builtin",
        settings: KnowledgeConfig | None = None,
        stores: SpaceStoreFactory | None = None,
    ) -> None:
        """
        :param stores: opens a space's store (default: a SQLite file under ``root``).
        """
        self.root = root
        self.stores: SpaceStoreFactory = stores or self.sqlite_store
        self.embedder = embedder if embedder is not None else HashedNgramEmbedder()
        self.embedder_name = embedder_name if embedder is not None else "builtin"
        self.settings = settings or KnowledgeConfig()
        self.auto_refresh = True
        """Whether spaces are indexed as their bundle loads (a command that only reads them turns it off)."""

    @classmethod
    def for_config(
        cls, config: Configuration, *, var_root: Path | None = None, embedder: Embedder | None = None,
        embedder_name: str = "builtin",
        stores: SpaceStoreFactory | None = None,
    ) -> KnowledgeService:  # fmt: skip
        """The service the descriptors describe (``platform.knowledge``)."""
        return cls(
            knowledge_root(config, var_root),
            embedder,
            embedder_name=embedder_name,
            settings=config.settings_for().knowledge,
            stores=stores,
        )

    @property
    def git_cache(self) -> Path:
        """Where :class:`~berth.knowledge.indexers.GitRepository` indexers keep mirrors and trees."""
        return self.root / "git"

    def store_path(self, bundle_id: str, space: str) -> Path:
        """The SQLite database of one space."""
        return self.root / "spaces" / bundle_id / f"{space}.sqlite3"

    def sqlite_store(self, bundle_id: str, space: str) -> SpaceStore:
        """The embedded store of one space: its SQLite file under ``root``."""
        return SqliteSpaceStore(self.store_path(bundle_id, space))

    async def aclose(self) -> None:
        """Close what the store factory holds open (a connection pool), if anything."""
        close = getattr(self.stores, "aclose", None)
        if close is not None:
            await close()

    def open(self, bundle_id: str, space: KnowledgeSpace) -> SpaceIndex:
        """The index of ``space`` of ``bundle_id`` (what is stored serves at once; refresh it to update)."""
        indexer = as_indexer(space.indexer)
        use_cache = getattr(indexer, "use_cache", None)
        if callable(use_cache):
            use_cache(self.git_cache)
        return SpaceIndex(
            space.name,
            indexer,
            self.stores(bundle_id, space.name),
            self.embedder,
            embedder_name=self.embedder_name,
            max_file_bytes=self.settings.max_file_bytes,
            refresh_interval_s=self.settings.refresh_interval_s,
            first_index_wait_s=self.settings.first_index_wait_s,
            description=space.description,
        )
