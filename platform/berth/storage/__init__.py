"""Storage interfaces: the seams between the runtime and the places conversations are kept.

Only protocols and the records that cross them live here; implementations are platform plugins
(``berth.default_plugins.storage.sqlite`` for the embedded mode). Storage never imports the runtime: blocks and
source rows cross the seam as JSON text next to the few columns a store needs to index them.

* :mod:`berth.storage.scope` — :class:`~berth.storage.scope.OwnerScope` and
  :class:`~berth.storage.scope.ConversationScope`, the bound context every read and write is scoped by;
* :mod:`berth.storage.conversations` — :class:`~berth.storage.conversations.ConversationStore`
  (timeline artifact, sources pool, turn log, conversation index);
* :mod:`berth.storage.memory` — :class:`~berth.storage.memory.MemoryIndex`, the store behind
  ``react.memsearch``;
* :mod:`berth.storage.meta` — :class:`~berth.storage.meta.MetaStore`: conversation metadata, feedback and the
  usage records of :mod:`berth.storage.usage` (one row per model call);
* :mod:`berth.storage.backend` — :class:`~berth.storage.backend.StorageBackend`, both stores of one
  storage configuration, and the factory ``berth_storage_backends()`` registers per storage kind.
"""
