"""Embedding throughput as a refresh embeds: chunks/s of ``Embedder.embed`` (shared by the knowledge benches)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from berth.knowledge.space import EMBED_BATCH, EMBED_CHARS


def refresh_texts(titled: Sequence[tuple[str, str]], sample: int) -> list[str]:
    """``sample`` of the ``(title, text)`` chunks, evenly spaced, as a refresh gives them to the embedder."""
    step = max(len(titled) // max(sample, 1), 1)
    return [f"{title}\n{text[:EMBED_CHARS]}" for title, text in titled[::step][:sample]]


def embedding_rates(embedder: Any, texts: Sequence[str], runs: int) -> list[float]:
    """Chunks/s of ``embedder.embed`` over ``texts`` in batches of ``EMBED_BATCH``, once per run, after one warm
    pass (a model loads on first use)."""

    async def embed_all() -> None:
        for start in range(0, len(texts), EMBED_BATCH):
            await embedder.embed(list(texts[start : start + EMBED_BATCH]))

    asyncio.run(embed_all())
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        asyncio.run(embed_all())
        rates.append(len(texts) / (time.perf_counter() - started))
    return rates
