"""The ``wordllama`` embedder: WordLlama's static token embeddings (``l2_supercat``, 256 dimensions), mean-pooled.

Distributed as ``berth-wordllama`` (``plugins/wordllama``). A static model keeps one vector per token of its
vocabulary (32,000 Llama-2 tokens here, trained for sentence similarity): a text's vector is the mean of its
tokens' vectors, scaled to unit length, so embedding costs a tokenization and a table look-up — thousands of
chunks a second on two cores, where a transformer embeds a few. The ``wordllama`` wheel on PyPI ships the weights
and the tokenizer; they are read from the installed package, never downloaded (WordLlama's own loader would ask
the Hugging Face hub for files it does not find in its cache, so it is not used). They are loaded on first use,
never when this plugin loads. Queries and passages are embedded alike.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from berth.config.errors import ConfigError
from berth.hooks import hookimpl

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from berth.config.models.assembly import EmbedderConfig
    from berth.runtime.memory import EmbedderFactory

__all__ = [
    "PROVIDER_NAME",
    "WORDLLAMA_DIMENSIONS",
    "WORDLLAMA_MODELS",
    "WordLlamaEmbedder",
    "create_wordllama_embedder",
]

PROVIDER_NAME: Final = "wordllama"
WORDLLAMA_DIMENSIONS: Final = 256
"""The vector length of the bundled ``l2_supercat`` model."""
WORDLLAMA_MODELS: Final = ("l2_supercat",)
"""The models whose weights the ``wordllama`` wheel ships."""
MAX_TOKENS: Final = 2_048
"""Tokens of a text that are pooled (a knowledge chunk is embedded from its first 2,000 characters anyway)."""
_WEIGHTS: Final = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER: Final = ("tokenizers", "l2_supercat_tokenizer_config.json")


def model_files() -> tuple[Path, Path]:
    """Where the installed ``wordllama`` package keeps the weights and the tokenizer of ``l2_supercat``."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the wordllama package is not installed (pip install berth-wordllama)")
    package = Path(next(iter(spec.submodule_search_locations)))
    weights, tokenizer = package.joinpath(*_WEIGHTS), package.joinpath(*_TOKENIZER)
    for path in (weights, tokenizer):
        if not path.is_file():
            raise RuntimeError(f"the wordllama package has no {path.relative_to(package)}: reinstall wordllama")
    return weights, tokenizer


class WordLlamaEmbedder:
    """An :class:`~berth.runtime.memory.Embedder` over WordLlama's static token embeddings, loaded on first use."""

    semantic = True
    """Its vectors rank by meaning (the knowledge index stores and fuses them)."""

    def __init__(self) -> None:
        self._table: NDArray[np.float32] | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """The length of every vector this embedder returns (256)."""
        return WORDLLAMA_DIMENSIONS

    def _load(self) -> tuple[NDArray[np.float32], Any]:
        with self._lock:
            if self._table is None:
                import numpy as np
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer

                weights, tokenizer_file = model_files()
                table = load_file(str(weights))["embedding.weight"].astype(np.float32)
                if table.shape[1] != WORDLLAMA_DIMENSIONS:
                    raise RuntimeError(f"wordllama's table has {table.shape[1]} dimensions, not {WORDLLAMA_DIMENSIONS}")
                tokenizer = Tokenizer.from_file(str(tokenizer_file))
                tokenizer.no_padding()
                tokenizer.enable_truncation(MAX_TOKENS)
                self._table, self._tokenizer = table, tokenizer
            return self._table, self._tokenizer

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One unit-length row per text: the mean of its tokens' vectors (a zero row for a text without tokens)."""
        import numpy as np

        table, tokenizer = self._load()
        rows = np.zeros((len(texts), WORDLLAMA_DIMENSIONS), dtype=np.float32)
        if not texts:
            return rows
        encoded = tokenizer.encode_batch(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
        filled = np.flatnonzero(lengths)
        if filled.size:
            ids = np.concatenate([np.asarray(encoded[i].ids, dtype=np.int64) for i in filled])
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            starts = np.concatenate(([0], np.cumsum(lengths[filled])[:-1]))
            sums = np.add.reduceat(table[ids], starts, axis=0)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            rows[filled] = sums / np.maximum(norms, 1e-12)
        return rows

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit-length vector per text (zeros for a text without tokens)."""
        if not texts:
            return []
        rows = await asyncio.to_thread(self.encode, list(texts))
        return [tuple(row) for row in rows.tolist()]

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Return the unit-length vector of a search query (zeros without tokens)."""
        (vector,) = await self.embed([query])
        return vector


def create_wordllama_embedder(config: EmbedderConfig) -> WordLlamaEmbedder:
    """Build the WordLlama embedder for ``platform.embedder`` (``model``: unset or ``l2_supercat``)."""
    model = config.model or WORDLLAMA_MODELS[0]
    if model not in WORDLLAMA_MODELS:
        raise ConfigError(
            "embedder_model_unknown",
            f"platform.embedder.model {model!r} is not a wordllama model (known: {', '.join(WORDLLAMA_MODELS)})",
        )
    return WordLlamaEmbedder()


@hookimpl
def berth_embedders() -> dict[str, EmbedderFactory]:
    """Register the ``wordllama`` embedder (its weights are read on first use)."""
    return {PROVIDER_NAME: create_wordllama_embedder}
