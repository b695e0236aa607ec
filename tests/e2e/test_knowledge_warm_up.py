"""A host that loads a bundle with a knowledge space warms the space up in the background (issue 38): the
embedder's model is loaded by the time the first search comes, without anyone asking (a real registry, a folder
bundle, SQLite; an embedder of hashed n-grams taken for a semantic model that records its loading)."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path

from turn_harness import write_descriptors

from berth.config import Configuration
from berth.host.registry import BundleRegistry
from berth.knowledge.service import KnowledgeService
from berth.runtime.memory import HashedNgramEmbedder

BUNDLE_INIT = textwrap.dedent(
    """
    from pathlib import Path

    from berth import AgentSpec, BundleInfo, KnowledgeSpace, MarkdownFolder, hookimpl

    HERE = Path(__file__).parent


    @hookimpl
    def berth_bundle():
        return BundleInfo(id="ops", version="1.0.0", title="Ops")


    @hookimpl
    def berth_agent(ctx):
        return AgentSpec(instructions="Follow the runbooks.", tools=["react.*"])


    @hookimpl
    def berth_knowledge(ctx):
        return [KnowledgeSpace(name="runbooks", indexer=MarkdownFolder(HERE / "runbooks"))]
    """
)


class RecordingEmbedder(HashedNgramEmbedder):
    """Hashed n-grams taken for a semantic model; records the queries it embeds (the first one loads a model)."""

    semantic = True

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.queries: list[str] = []
        self.first_query = threading.Event()  # set from the worker thread the warm-up embeds in

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Record, then embed the query."""
        self.queries.append(query)
        self.first_query.set()
        return await super().embed_query(query)


async def test_a_loaded_bundle_s_space_is_warmed_up_without_a_search(tmp_path: Path) -> None:
    folder = tmp_path / "ops_bundle"
    (folder / "runbooks").mkdir(parents=True)
    (folder / "__init__.py").write_text(BUNDLE_INIT)
    (folder / "runbooks" / "failover.md").write_text("# Failover\n\nPromote the replica; it becomes primary.\n")
    config = Configuration.load(write_descriptors(tmp_path / "descriptors", {"ops": {"source": {"path": str(folder)}}}))
    embedder = RecordingEmbedder()
    registry = BundleRegistry(config, knowledge=KnowledgeService(tmp_path / "knowledge", embedder, embedder_name="rec"))
    outcomes = await registry.start()
    assert all(outcome.ok for outcome in outcomes), outcomes
    try:
        assert await asyncio.to_thread(embedder.first_query.wait, 30)  # the host's warm-up, no search made
        index = registry.current("ops").knowledge["runbooks"]
        warming = index.warm_in_background()  # the one the host started
        assert warming is not None
        await warming
        assert (index.warm_state, index.warm_error, embedder.queries) == ("warm", None, ["warm up"])
        await index.wait_first_index(30)
        hits = await index.search("promote the replica", limit=1)
        assert hits[0].chunk.path == "failover.md"
    finally:
        await registry.close()
