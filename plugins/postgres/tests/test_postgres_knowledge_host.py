"""A host with ``distributed`` storage keeps its bundles' knowledge indexes in PostgreSQL (``berth_knowledge_stores``):
one host indexes a space, a second host (another process of the deployment, with no files of its own in its
knowledge folder) finds it indexed and searches it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from berth_postgres import plugin
from berth_postgres.knowledge import PostgresKnowledgeStores
from pg_fixtures import migrated_database

from berth.config.models.assembly import LocalArtifacts
from berth.host.connections import DistributedConnections
from berth.host.plugins import PlatformPlugins
from berth.host.runtime import HostRuntime
from berth.testing import write_descriptors
from berth.testing.redis import test_redis_url

pytestmark = pytest.mark.postgres

BUNDLE = """
from pathlib import Path
from berth import BundleInfo, KnowledgeSpace, MarkdownFolder, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="kb", version="1.0.0")

@hookimpl
def berth_knowledge(ctx):
    return [KnowledgeSpace(name="guide", indexer=MarkdownFolder(Path(__file__).parent / "guide"))]
"""


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from migrated_database()


def test_the_plugin_registers_knowledge_stores_for_distributed_storage() -> None:
    factory = PlatformPlugins.discover().knowledge_stores()["distributed"]
    assert factory is plugin.create_knowledge_stores  # imports the stores (asyncpg) when called, not at start-up
    connections = DistributedConnections("postgresql://127.0.0.1:1/none", "redis://127.0.0.1:1/0", LocalArtifacts())
    stores = factory(connections)
    assert isinstance(stores, PostgresKnowledgeStores)  # opens its pool on first use: nothing is reached here
    assert stores.dsn == connections.postgres_dsn


def descriptors(root: Path, dsn: str, name: str) -> Path:
    """Descriptors of a distributed host whose knowledge folder is its own (``root/<name>-knowledge``)."""
    bundle = root / "kb_bundle"
    if not bundle.exists():
        (bundle / "guide").mkdir(parents=True)
        (bundle / "__init__.py").write_text(BUNDLE)
        (bundle / "guide" / "rollback.md").write_text("# Rollback\n\nRedeploy the previous image tag.\n")
    folder = write_descriptors(root / name, {"kb": {"source": {"path": str(bundle)}}})
    assembly = yaml.safe_load((folder / "assembly.yaml").read_text())
    assembly["platform"] = {
        "storage": {"kind": "distributed", "postgres": {"dsn": dsn}, "redis": {"url": test_redis_url()}},
        "knowledge": {"root": f"../{name}-knowledge"},
    }
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    return folder


async def test_a_second_host_finds_the_space_indexed_in_postgres(tmp_path: Path, database: str) -> None:
    first = HostRuntime.for_descriptors(descriptors(tmp_path, database, "one"), watch=False)
    await first.start()
    try:
        assert first.registry is not None
        assert isinstance(first.registry.knowledge.stores, PostgresKnowledgeStores)
        index = first.registry.current("kb").knowledge["guide"]
        report = await index.refresh()
        assert report.version >= 1 and (await index.status()).files == {"indexed": 1}
    finally:
        await first.stop()
    second = HostRuntime.for_descriptors(descriptors(tmp_path, database, "two"), watch=False, refresh_knowledge=False)
    await second.start()
    try:
        assert second.registry is not None
        index = second.registry.current("kb").knowledge["guide"]
        hits = await index.search("redeploy previous tag", limit=1)
        assert hits[0].logical_path == "ks:guide/rollback.md#rollback"
        assert not (tmp_path / "two-knowledge" / "spaces").exists()  # nothing was indexed locally
    finally:
        await second.stop()
