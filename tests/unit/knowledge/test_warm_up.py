"""Warming a space up after start (issue 38): the embedder's model and the vectors are loaded in the background,
so the first search does not wait for them; a warm-up that fails is reported and searching still works."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from berth.bundle.knowledge import KnowledgeSpace, MarkdownFolder
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.knowledge.store import SpaceStoreFactory
from berth.runtime.memory import HashedNgramEmbedder


class LazyEmbedder(HashedNgramEmbedder):
    """Hashed n-grams taken for a semantic model that "loads" on first use; ``failures`` first uses fail."""

    semantic = True

    def __init__(self, failures: int = 0) -> None:
        super().__init__(dimensions=32)
        self.loaded = False
        self.failures = failures

    def _load(self) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("model file is missing")
        self.loaded = True

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Load, then embed."""
        self._load()
        return await super().embed(texts)

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Load, then embed the query."""
        self._load()
        return await super().embed_query(query)


async def indexed_space(root: Path, stores: SpaceStoreFactory | None, embedder: LazyEmbedder) -> SpaceIndex:
    """A space of two runbooks, indexed (by a first process), opened afresh with ``embedder`` (a host starting)."""
    folder = root / "runbooks"
    folder.mkdir()
    (folder / "failover.md").write_text("# Failover\n\nPromote the replica; it becomes primary in two minutes.\n")
    (folder / "deploy.md").write_text("# Deploy\n\nFreeze deploys and tell the on-call channel first.\n")
    space = KnowledgeSpace(name="runbooks", indexer=MarkdownFolder(folder))
    first = KnowledgeService(root / "knowledge", LazyEmbedder(), embedder_name="lazy", stores=stores)
    index = first.open("ops", space)
    await index.refresh()
    await index.aclose()
    return KnowledgeService(root / "knowledge", embedder, embedder_name="lazy", stores=stores).open("ops", space)


async def test_a_warmed_space_has_its_embedder_loaded_before_the_first_search(
    tmp_path: Path, stores: SpaceStoreFactory | None
) -> None:
    embedder = LazyEmbedder()
    index = await indexed_space(tmp_path, stores, embedder)
    assert (index.warm_state, embedder.loaded) == ("cold", False)
    warming = index.warm_in_background()
    assert warming is not None and index.warm_in_background() is warming  # started once
    await warming
    assert (index.warm_state, index.warm_error, embedder.loaded) == ("warm", None, True)
    hits = await index.search("promote the replica", limit=1)
    assert hits[0].chunk.path == "failover.md"
    await index.aclose()


async def test_a_failed_warm_up_is_reported_and_the_search_still_works(
    tmp_path: Path, stores: SpaceStoreFactory | None, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = LazyEmbedder(failures=1)
    index = await indexed_space(tmp_path, stores, embedder)
    with caplog.at_level(logging.WARNING, logger="berth.knowledge"):
        warming = index.warm_in_background()
        assert warming is not None
        await warming  # never raises
    assert (index.warm_state, index.warm_error) == ("failed", "OSError: model file is missing")
    assert "runbooks: warming up for the first search failed: OSError: model file is missing" in caplog.text
    hits = await index.search("freeze deploys", limit=1, mode="hybrid")
    assert hits[0].chunk.path == "deploy.md" and embedder.loaded
    await index.aclose()


async def test_a_space_without_vectors_has_nothing_to_warm(tmp_path: Path) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    service = KnowledgeService(tmp_path / "knowledge")  # the builtin embedder: no vectors stored or ranked
    index = service.open("ops", KnowledgeSpace(name="runbooks", indexer=MarkdownFolder(folder)))
    assert index.warm_in_background() is None and index.warm_state == "cold"
    await index.aclose()


async def test_closing_a_space_stops_its_warm_up(tmp_path: Path, stores: SpaceStoreFactory | None) -> None:
    index = await indexed_space(tmp_path, stores, LazyEmbedder())
    warming = index.warm_in_background()
    await index.aclose()
    assert warming is not None and warming.done()
