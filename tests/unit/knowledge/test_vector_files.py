"""The SQLite index keeps each version's vectors in files beside the database, opened memory-mapped: written with
the version that commits them, replaced when a refresh changes the chunks, never read when the database does
not name them, and a process that dies while writing them leaves the previous version's searchable."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.knowledge.sqlite_store import SqliteSpaceStore
from berth.knowledge.store import VectorMatrix
from berth.knowledge.vector_files import META_KEY, open_vectors, vectors_folder, write_vectors
from berth.runtime.memory import HashedNgramEmbedder

FILES = {
    "billing.py": "def refund(order):\n    '''Give the money back for a cancelled order.'''\n    return order.total\n",
    "shipping.py": "def ship(parcel):\n    '''Send the parcel to the customer by courier.'''\n    return parcel\n",
    "notes.md": "# Vacation\n\nEvery employee has 25 days of paid vacation a year.\n",
}


class Semantic(HashedNgramEmbedder):
    """Hashed n-grams, declared semantic so the index stores and ranks their vectors (what a real semantic
    embedder makes the index do; the vectors' meaning does not matter here)."""

    semantic = True


def write(folder: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path → text) under ``folder``."""
    for rel, text in files.items():
        (folder / rel).write_text(text, encoding="utf-8")


def open_index(root: Path, folder: Path) -> tuple[SpaceIndex, Path]:
    """The code space of ``folder`` with semantic vectors, and its database's path."""
    service = KnowledgeService(root, Semantic(), embedder_name="semantic")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(folder)))
    return index, service.store_path("bundle", "code")


def stamp_of(database: Path) -> str:
    """The vector files' stamp the database commits."""
    store = SqliteSpaceStore(database)
    try:
        return store._meta().get(META_KEY, "")
    finally:
        store.close()


def files_of(database: Path) -> list[str]:
    """The names in the database's vector folder."""
    folder = vectors_folder(database)
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def from_rows(database: Path, query: Sequence[float]) -> list[tuple[int, float]]:
    """The exact nearest chunks computed from the database's rows (what the files must agree with)."""
    store = SqliteSpaceStore(database)
    try:
        rows = store._read("SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id")
    finally:
        store.close()
    return VectorMatrix.build(0, rows).nearest(np.asarray(query, dtype=np.float32), 10)


async def test_a_refresh_writes_the_version_s_vector_files_and_searches_map_them(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    write(tmp_path / "src", FILES)
    index, database = open_index(tmp_path / "knowledge", tmp_path / "src")
    report = await index.refresh()
    stamp = stamp_of(database)
    assert stamp.startswith(f"v{report.version}-")
    assert files_of(database) == [f"{stamp}.ids.npy", f"{stamp}.npy"]
    query = await index.embedder.embed_query("money back for a cancelled order")
    found = await index.store.nearest(np.asarray(query, dtype=np.float32), 10)
    assert found == from_rows(database, query)
    matrix = index.store._vectors  # type: ignore[attr-defined]
    assert isinstance(matrix.matrix.base, np.memmap), "the matrix is mapped, not read"
    assert len(await index.search("money back", mode="hybrid")) == 3
    await index.aclose()


async def test_changing_a_file_replaces_the_vector_files_and_a_touched_one_keeps_them(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    write(tmp_path / "src", FILES)
    index, database = open_index(tmp_path / "knowledge", tmp_path / "src")
    await index.refresh()
    first = stamp_of(database)
    write(tmp_path / "src", {"shipping.py": "def track(parcel):\n    '''Where the parcel is now.'''\n"})
    await index.refresh()
    second = stamp_of(database)
    assert second != first
    assert files_of(database) == [f"{second}.ids.npy", f"{second}.npy"], "the old version's files are removed"
    query = await index.embedder.embed_query("where is the parcel now")
    assert await index.store.nearest(np.asarray(query, dtype=np.float32), 10) == from_rows(database, query)
    os.utime(tmp_path / "src" / "notes.md", (1, 1))  # a new change key, the same content
    report = await index.refresh()
    assert report.touched == 1 and stamp_of(database) == second
    await index.aclose()


async def test_files_the_database_does_not_name_are_never_read(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    write(tmp_path / "src", FILES)
    index, database = open_index(tmp_path / "knowledge", tmp_path / "src")
    await index.refresh()
    await index.aclose()
    stamp = stamp_of(database)
    folder = vectors_folder(database)
    ids = np.load(folder / f"{stamp}.ids.npy")
    # a stale pair (another stamp) with other vectors, and the committed pair's matrix cut short
    write_vectors(folder, 99, ids, np.ones((len(ids), 256), dtype=np.float32))
    np.save(folder / f"{stamp}.npy", np.ones((1, 256), dtype=np.float32))
    assert open_vectors(folder, stamp) is None, "ids and matrix of different lengths do not open"
    index, _ = open_index(tmp_path / "knowledge", tmp_path / "src")
    query = await index.embedder.embed_query("paid vacation days")
    assert await index.store.nearest(np.asarray(query, dtype=np.float32), 10) == from_rows(database, query)
    rewritten = stamp_of(database)
    assert rewritten != stamp, "the vectors read from the rows are written again for the next process"
    assert files_of(database) == [f"{rewritten}.ids.npy", f"{rewritten}.npy"]
    await index.aclose()


CRASH = """
import asyncio, os, sys
from pathlib import Path
import berth.knowledge.vector_files as vector_files
from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
sys.path.insert(0, {tests!r})
from test_vector_files import Semantic

renames = []
def replace_then_die(source, target):
    renames.append(target)
    if len(renames) == 2:  # the ids are in place, the matrix still under its temporary name
        os._exit(9)
    os.replace(source, target)
vector_files.os.replace = replace_then_die

service = KnowledgeService(Path({root!r}), Semantic(), embedder_name="semantic")
index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(Path({src!r}))))
asyncio.run(index.refresh())
"""


async def test_a_process_dying_while_writing_vector_files_leaves_the_previous_version_searchable(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    write(tmp_path / "src", FILES)
    index, database = open_index(tmp_path / "knowledge", tmp_path / "src")
    before = await index.refresh()
    stamp = stamp_of(database)
    await index.aclose()
    write(tmp_path / "src", {"billing.py": "def invoice(order):\n    '''Bill the customer.'''\n"})
    script = textwrap.dedent(CRASH).format(
        tests=str(Path(__file__).parent), root=str(tmp_path / "knowledge"), src=str(tmp_path / "src")
    )
    died = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, text=True
    )
    assert died.returncode == 9, died.stderr
    assert any(name.endswith(".tmp") for name in files_of(database)), "it died with a file half-written"
    index, _ = open_index(tmp_path / "knowledge", tmp_path / "src")
    assert await index.store.version() == before.version and stamp_of(database) == stamp
    query = await index.embedder.embed_query("money back for a cancelled order")
    assert await index.store.nearest(np.asarray(query, dtype=np.float32), 10) == from_rows(database, query)
    assert isinstance(index.store._vectors.matrix.base, np.memmap)  # type: ignore[attr-defined]
    report = await index.refresh()  # the next refresh writes the change and clears what the crash left
    new = stamp_of(database)
    assert report.version == before.version + 1
    assert files_of(database) == [f"{new}.ids.npy", f"{new}.npy"]
    await index.aclose()
