"""berth-wordllama: the ``wordllama`` embedder plugin for Berth (static token embeddings, offline)."""

from berth_wordllama.embedder import (
    PROVIDER_NAME,
    WORDLLAMA_DIMENSIONS,
    WORDLLAMA_MODELS,
    WordLlamaEmbedder,
    create_wordllama_embedder,
)

__all__ = [
    "PROVIDER_NAME",
    "WORDLLAMA_DIMENSIONS",
    "WORDLLAMA_MODELS",
    "WordLlamaEmbedder",
    "create_wordllama_embedder",
]
