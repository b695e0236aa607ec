"""How a knowledge space's index is stored: the SQLite index keeps each chunk's text once (its FTS5 table is
contentless), an index of an older layout is upgraded in place and keeps serving, removing or changing files
leaves the index as a fresh one would be (on both stores), PostgreSQL keeps its document frequencies with the
index, and both stores put the same chunk first on a fixed corpus."""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.bundle.knowledge import KnowledgeSpace, MarkdownFolder, SourceTree
from berth.knowledge.chunks import Chunk
from berth.knowledge.filters import ChunkFilter
from berth.knowledge.service import KnowledgeService
from berth.knowledge.sources import SourceFile
from berth.knowledge.space import SpaceIndex
from berth.knowledge.sqlite_store import SCHEMA_VERSION
from berth.knowledge.store import SpaceStoreFactory

REPO = Path(__file__).resolve().parents[3]


def write(folder: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path → text) under ``folder``."""
    for rel, text in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


async def ranked(index: SpaceIndex, query: str) -> list[tuple[str, str, float]]:
    """The lexical ranking of ``query`` as (path, anchor, score), ids left out (a fresh index numbers anew)."""
    found = await index.store.lexical(query, 50)
    rows = await index.store.chunk_rows(i for i, _ in found)
    return sorted((rows[i].path, rows[i].anchor, round(score, 6)) if i in rows else ("?", str(i), 0.0)
                  for i, score in found)  # fmt: skip


# -- size -----------------------------------------------------------------------------------------------


async def test_a_real_code_base_s_sqlite_index_is_under_three_times_its_text(tmp_path: Path) -> None:
    service = KnowledgeService(tmp_path / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(REPO / "platform" / "berth")))
    await index.refresh()
    text = sum(len(chunk_text.encode()) for _, chunk_text in await index.store.texts())
    await index.aclose()
    database = service.store_path("bundle", "code")
    size = sum(path.stat().st_size for path in database.parent.glob(database.name + "*"))
    assert text > 1_000_000
    assert size < 3 * text, f"the index is {size / text:.2f}x its text"


# -- the older layout -----------------------------------------------------------------------------------

LAYOUT_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, stat TEXT NOT NULL, sha TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, chunks INTEGER NOT NULL DEFAULT 0, indexed_at REAL NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, anchor TEXT NOT NULL, title TEXT NOT NULL,
    text TEXT NOT NULL, first_line INTEGER NOT NULL, last_line INTEGER NOT NULL, kind TEXT NOT NULL, vector BLOB,
    UNIQUE (path, anchor));
CREATE INDEX chunks_by_path ON chunks (path, first_line);
CREATE VIRTUAL TABLE chunks_fts USING fts5(title, path, body, tokenize = 'porter unicode61 remove_diacritics 2');
INSERT INTO meta VALUES ('version', '3'), ('embedder', 'builtin:256'), ('schema', '1');
INSERT INTO files VALUES ('vacation.md', 'k1', 'sha1', 'indexed', NULL, 1, 0), ('expenses.md', 'k2', 'sha2',
    'indexed', NULL, 1, 0);
INSERT INTO chunks VALUES (1, 'vacation.md', 'vacation', 'Vacation', 'Every employee has 25 days of paid vacation.',
    1, 3, 'section', zeroblob(1024)), (2, 'expenses.md', 'expenses', 'Expenses', 'Submit receipts within 30 days.',
    1, 3, 'section', zeroblob(1024));
INSERT INTO chunks_fts (rowid, title, path, body) VALUES (1, 'Vacation ', 'vacation md',
    'Every employee has 25 days of paid vacation.' || char(10)), (2, 'Expenses ', 'expenses md',
    'Submit receipts within 30 days.' || char(10));
"""
"""A space as the first layout stored it (FTS5 with its own copy of the text; the builtin embedder's vectors)."""


async def test_an_index_of_the_first_layout_is_upgraded_in_place_and_keeps_serving(tmp_path: Path) -> None:
    service = KnowledgeService(tmp_path / "knowledge")
    database = service.store_path("bundle", "docs")
    database.parent.mkdir(parents=True)
    with sqlite3.connect(database) as old:
        old.executescript(LAYOUT_1)
    folder = tmp_path / "handbook"
    write(folder, {"vacation.md": "# Vacation\n\nEvery employee has 25 days of paid vacation.\n"})
    index = service.open("bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(folder)))
    # before any refresh: the upgraded index answers from the chunks it had, at the version it had
    assert await index.store.version() == 3
    assert [hit.logical_path for hit in await index.search("paid vacation", mode="lexical")] == [
        "ks:docs/vacation.md#vacation"
    ]
    assert [hit.logical_path for hit in await index.search("receipts", mode="lexical")] == [
        "ks:docs/expenses.md#expenses"
    ]
    with sqlite3.connect(database) as new:
        assert new.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        (fts,) = new.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
        assert "content = ''" in fts
        assert new.execute("SELECT count(*) FROM sqlite_master WHERE name = 'chunks_by_name'").fetchone() == (1,)
    # the first refresh drops the builtin embedder's vectors and the removed file; its words match nothing
    report = await index.refresh()
    assert (report.version, report.removed) == (4, 1)
    assert await index.search("receipts", mode="lexical") == []
    assert [hit.logical_path for hit in await index.search("paid vacation", mode="lexical")] == [
        "ks:docs/vacation.md#vacation"
    ]
    with sqlite3.connect(database) as new:
        assert new.execute("SELECT count(*), count(vector) FROM chunks").fetchone() == (1, 0)
    await index.aclose()


LAYOUT_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, stat TEXT NOT NULL, sha TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, chunks INTEGER NOT NULL DEFAULT 0, indexed_at REAL NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, anchor TEXT NOT NULL, title TEXT NOT NULL,
    text TEXT NOT NULL, first_line INTEGER NOT NULL, last_line INTEGER NOT NULL, kind TEXT NOT NULL, vector BLOB,
    UNIQUE (path, anchor));
CREATE INDEX chunks_by_path ON chunks (path, first_line);
CREATE VIRTUAL TABLE chunks_fts USING fts5(title, path, body, content = '',
    tokenize = 'porter unicode61 remove_diacritics 2');
INSERT INTO meta VALUES ('version', '5'), ('embedder', 'builtin:no-vectors'), ('schema', '2');
INSERT INTO files VALUES ('store.py', 'k1', 'sha1', 'indexed', NULL, 1, 0);
INSERT INTO chunks VALUES (1, 'store.py', 'Store.search', 'Store.search', 'def search(self, query): ...', 1, 2,
    'definition', NULL);
INSERT INTO chunks_fts (rowid, title, path, body) VALUES (1, 'Store.search Store search', 'store py',
    'def search(self, query): ...' || char(10));
PRAGMA user_version = 2;
"""
"""A space as the second layout stored it (contentless FTS5, no vectors; no index of definitions by name)."""


async def test_an_index_of_the_second_layout_gains_the_index_of_definitions_by_name(tmp_path: Path) -> None:
    service = KnowledgeService(tmp_path / "knowledge")
    database = service.store_path("bundle", "code")
    database.parent.mkdir(parents=True)
    with sqlite3.connect(database) as old:
        old.executescript(LAYOUT_2)
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(tmp_path / "src")))
    assert await index.store.version() == 5
    found = await index.search("query", mode="lexical", within=ChunkFilter(symbol="search"))
    assert [hit.logical_path for hit in found] == ["ks:code/store.py#Store.search"]
    with sqlite3.connect(database) as new:
        assert new.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert new.execute("SELECT count(*) FROM sqlite_master WHERE name = 'chunks_by_name'").fetchone() == (1,)
        (fts,) = new.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
        assert "content = ''" in fts
        plan = new.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM chunks WHERE kind = 'definition' AND "
            "substr(title, length(rtrim(title, replace(title, '.', ''))) + 1) COLLATE NOCASE = 'search'"
        ).fetchall()
        assert any("chunks_by_name" in str(row) for row in plan)
    await index.aclose()


def test_identifier_words_do_not_depend_on_the_hash_seed() -> None:
    """A contentless index deletes a row by restating what it indexed, possibly in another process."""
    program = "from berth.knowledge.store import identifier_words as w; print(w(open(0).read()))"
    text = " ".join(f"KnowledgeIndex{i} HttpServerError{i} parseTreeNode{i}" for i in range(30))
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


# -- changes against a fresh index ----------------------------------------------------------------------

_FRESH = itertools.count()
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "KnowledgeIndex", "HttpServer", "parseTree", "café", "zulu"]


def page(words: list[str], name: str) -> str:
    """A markdown page of two sections made of ``words``, each naming the page (no chunk of one page repeats
    another's text: the refresh drops such copies, keeping the first it meets)."""
    half = len(words) // 2
    return (
        f"# {words[0]} page\n\n{name}: {' '.join(words[:half])}\n\n"
        f"## {words[-1]} part\n\n{name}: {' '.join(words[half:])}\n"
    )


async def same_as_fresh(index: SpaceIndex, folder: Path, root: Path, stores: SpaceStoreFactory | None) -> None:
    """Every word ranks the same chunks with the same scores in ``index`` and in a fresh index of ``folder``."""
    fresh = KnowledgeService(root, stores=stores).open(
        "bundle", KnowledgeSpace(name=f"fresh{next(_FRESH)}", indexer=MarkdownFolder(folder))
    )
    await fresh.refresh()
    for word in WORDS:
        assert await ranked(index, word) == await ranked(fresh, word), word
    await fresh.aclose()


async def test_removed_and_changed_files_leave_the_index_as_a_fresh_one_would_be(
    tmp_path: Path, stores: SpaceStoreFactory | None
) -> None:
    folder = tmp_path / "pages"
    write(folder, {f"p{i}.md": page(WORDS[i : i + 5], f"p{i}") for i in range(6)})
    index = KnowledgeService(tmp_path / "knowledge", stores=stores).open(
        "bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(folder))
    )
    await index.refresh()
    assert [hit.chunk.path for hit in await index.search("zulu", mode="lexical")] == ["p5.md"]
    (folder / "p5.md").unlink()
    write(folder, {"p0.md": page(["echo", "delta", "echo"], "p0"), "p9.md": page(["café", "KnowledgeIndex"], "p9")})
    await index.refresh()
    assert await index.search("zulu", mode="lexical") == []  # the removed file's words match nothing
    assert "p9.md" in [hit.chunk.path for hit in await index.search("Knowledge", mode="lexical")]
    await same_as_fresh(index, folder, tmp_path / "fresh", stores)
    await index.aclose()


CHANGES = st.lists(
    st.tuples(st.integers(0, 4), st.one_of(st.none(), st.lists(st.sampled_from(WORDS), min_size=1, max_size=8))),
    min_size=1,
    max_size=8,
)
"""(file number, its new words — None: the file is removed), several changes between refreshes."""


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(CHANGES, min_size=1, max_size=3))
def test_any_sequence_of_changes_leaves_the_sqlite_index_as_a_fresh_one_would_be(
    steps: list[list[tuple[int, list[str] | None]]],
) -> None:
    async def run(root: Path) -> None:
        folder = root / "pages"
        folder.mkdir()
        index = KnowledgeService(root / "knowledge").open(
            "bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(folder))
        )
        for changes in steps:
            for number, words in changes:
                target = folder / f"p{number}.md"
                if words is None:
                    target.unlink(missing_ok=True)
                else:
                    target.write_text(page(words, f"p{number}"), encoding="utf-8")
            await index.refresh()
            await same_as_fresh(index, folder, root / "fresh", None)
        await index.aclose()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run(Path(root)))


# -- PostgreSQL ----------------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_postgres_keeps_its_document_frequencies_with_the_index(tmp_path: Path) -> None:
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.migrations import available_migrations, connect
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        stores = PostgresKnowledgeStores(dsn)
        folder = tmp_path / "pages"
        write(folder, {f"p{i}.md": page(WORDS[i : i + 5], f"p{i}") for i in range(6)})
        index = KnowledgeService(tmp_path / "knowledge", stores=stores).open(
            "bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(folder))
        )
        await index.refresh()
        (folder / "p2.md").unlink()
        write(folder, {"p0.md": page(["zulu", "zulu", "bravo"], "p0")})
        await index.refresh()
        recount = (
            "SELECT term, count(*) AS chunks FROM knowledge_chunks, unnest(tsvector_to_array(document)) AS term "
            "GROUP BY term ORDER BY term"
        )
        connection = await connect(dsn)
        try:
            kept = await connection.fetch("SELECT term, chunks FROM knowledge_terms ORDER BY term")
            assert [tuple(row) for row in kept] == [tuple(row) for row in await connection.fetch(recount)]
            assert await connection.fetchval("SELECT chunks FROM knowledge_spaces") == 10
            # the migration counts what an index of the earlier schema holds
            await connection.execute("DELETE FROM knowledge_terms")
            (terms,) = [m for m in available_migrations() if m.version == "0007_knowledge_terms"]
            for statement in terms.sql.split(";\n"):  # the backfill (the table and column exist already)
                if statement.strip().startswith(("INSERT", "UPDATE")):
                    await connection.execute(statement)
            kept = await connection.fetch("SELECT term, chunks FROM knowledge_terms ORDER BY term")
            assert [tuple(row) for row in kept] == [tuple(row) for row in await connection.fetch(recount)]
        finally:
            await connection.close()
        await index.aclose()
        await stores.aclose()


class Synthetic:
    """``count`` one-chunk files: every one holds ``common``, every tenth ``rare``, every hundredth ``rarest``."""

    def __init__(self, count: int) -> None:
        self.texts = [
            f"common word {i}" + (" rare" if i % 10 == 0 else "") + (" rarest rarest" if i % 100 == 0 else "")
            for i in range(count)
        ]

    def files(self) -> Iterable[SourceFile]:
        """One file per chunk."""
        for i, text in enumerate(self.texts):
            yield SourceFile(f"f{i:05d}.txt", str(i), len(text), data=text.encode())

    def chunk(self, file: SourceFile, data: bytes) -> tuple[list[Chunk], str | None]:
        """The file is one chunk."""
        return [Chunk(file.path, "all", file.path, data.decode(), 1, 1, "window")], None


@pytest.mark.postgres
async def test_postgres_ranks_common_words_only_when_they_could_change_the_top(tmp_path: Path) -> None:
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        pruning, exhaustive = PostgresKnowledgeStores(dsn, common_chunks=100), PostgresKnowledgeStores(dsn)
        space = KnowledgeSpace(name="synthetic", indexer=Synthetic(1_200))
        index = KnowledgeService(tmp_path / "a", stores=pruning).open("bundle", space)
        await index.refresh()
        every = KnowledgeService(tmp_path / "b", stores=exhaustive).open("bundle", space)
        # a filter changes which chunks qualify: both passes rank only those, and the result is still exact
        filters = (None, ChunkFilter(path="f000*.txt"), ChunkFilter(path="f011*"))
        for query, limit, within in itertools.product(
            ("common rarest", "common rare", "common word rare rarest", "common"), (5, 50), filters
        ):
            pruned = await index.store.lexical(query, limit, within=within)
            exact = await every.store.lexical(query, limit, within=within)
            assert [(i, round(score, 9)) for i, score in pruned] == [(i, round(score, 9)) for i, score in exact]
            if within is not None:
                assert pruned
                assert {row.path[:4] for row in (await index.store.chunk_rows(i for i, _ in pruned)).values()} == {
                    within.path[:4]
                }
        await pruning.aclose()
        await exhaustive.aclose()


TOPICS = {
    "backups.md": "# Backups\n\nThe database is backed up every night; backups are kept for 30 days.\n",
    "vacation.md": "# Vacation policy\n\nEvery employee has 25 days of paid vacation per year.\n",
    "expenses.md": "# Expenses\n\nSubmit receipts within 30 days in the finance portal.\n",
    "onboarding.md": "# Onboarding\n\nYour laptop is ready on the first day; IT sets up your accounts.\n",
    "parking.md": "# Parking\n\nThe garage is on level -2; a badge opens the gate for employees.\n",
    "deploys.md": "# Deploys\n\nDeploy the service with the release pipeline after the tests pass.\n",
    "kitchen.md": "# Kitchen\n\nThe kitchen closes at three; the coffee machine is cleaned every day.\n",
    "security.md": "# Security\n\nReport a lost badge or laptop to the security desk at once.\n",
}
QUESTIONS = {
    "when are backups taken": "backups.md",
    "paid vacation days": "vacation.md",
    "receipts finance portal": "expenses.md",
    "laptop accounts first day": "onboarding.md",
    "garage level badge": "parking.md",
    "release pipeline deploy": "deploys.md",
    "coffee machine kitchen": "kitchen.md",
    "lost badge security desk": "security.md",
}


@pytest.mark.postgres
async def test_postgres_and_sqlite_put_the_same_chunk_first_on_a_fixed_corpus(tmp_path: Path) -> None:
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    write(tmp_path / "topics", TOPICS)
    async with async_scratch_database() as dsn:
        stores = PostgresKnowledgeStores(dsn)
        opened: list[Callable[[], SpaceIndex]] = [
            lambda: KnowledgeService(tmp_path / "sqlite").open(
                "bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(tmp_path / "topics"))
            ),
            lambda: KnowledgeService(tmp_path / "pg", stores=stores).open(
                "bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(tmp_path / "topics"))
            ),
        ]
        firsts = []
        for open_index in opened:
            index = open_index()
            await index.refresh()
            firsts.append({q: (await index.search(q, limit=3, mode="lexical"))[0].chunk.path for q in QUESTIONS})
            await index.aclose()
        assert firsts[0] == firsts[1] == QUESTIONS
        await stores.aclose()
