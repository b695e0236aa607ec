"""The SQLite store's lexical ranking without scoring every matching row (:mod:`berth.knowledge.fts_topk`) gives
the rows, order and scores of FTS5's own ``ORDER BY bm25(...) LIMIT``, on a corpus where common words match most
chunks and rare ones few (the budget lowered so that a small corpus prunes). Queries whose words are common are
summed from the stored term scores (:mod:`berth.knowledge.term_postings`) to the bit: the same rows, scores and
order."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.fts_topk import FtsTopK
from berth.knowledge.service import KnowledgeService
from berth.knowledge.sqlite_store import TOKENIZER, SqliteSpaceStore, fts_query

COMMON = ["self", "return", "value", "name", "data", "result", "import", "none", "list", "error"]
RARE = [f"{stem}{n}" for stem in ("parse", "render", "token", "frame", "cache", "socket") for n in range(12)]
FULL = (
    "SELECT rowid, -bm25(chunks_fts, 3.0, 2.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY bm25(chunks_fts, 3.0, 2.0, 1.0) LIMIT ?"
)


def corpus(folder: Path, files: int = 40) -> None:
    """Python files of definitions mixing common words (in most chunks) and rare ones (in a few)."""
    rng = random.Random(38)
    for number in range(files):
        functions = []
        for index in range(8):
            words = rng.choices(COMMON, k=rng.randint(3, 30)) + rng.sample(RARE, k=rng.randint(0, 3))
            body = "\n".join(f"    {' '.join(words[i : i + 6])}" for i in range(0, len(words), 6))
            functions.append(f"def {rng.choice(RARE)}_{index}(self):\n{body}\n")
        (folder / f"module_{number}.py").write_text("\n\n".join(functions), encoding="utf-8")


@pytest.fixture
async def store(tmp_path: Path) -> SqliteSpaceStore:
    (tmp_path / "src").mkdir()
    corpus(tmp_path / "src")
    service = KnowledgeService(tmp_path / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(tmp_path / "src")))
    await index.refresh()
    await index.aclose()
    return SqliteSpaceStore(service.store_path("bundle", "code"))


async def test_pruned_rankings_are_fts5_s_own(store: SqliteSpaceStore) -> None:
    store._top = FtsTopK("chunks_fts", TOKENIZER, (3.0, 2.0, 1.0), budget=60)
    rng = random.Random(5)
    pruned = 0
    for _ in range(150):
        query = " ".join(rng.sample(COMMON, k=rng.randint(1, 3)) + rng.sample(RARE, k=rng.randint(0, 2)))
        for limit in (5, 10):
            full = store._read(FULL, (fts_query(query), limit))
            answer = store._pruned(query, limit)
            if answer is None:
                continue
            pruned += 1
            # the same rows with the same scores, in the same order but among rows whose scores differ only in
            # the last bits (the sums are added in another order: FTS5's own tie order is not kept there)
            assert {rowid for rowid, _ in answer} == {rowid for rowid, _ in full}, query
            for (_, mine), (_, its) in zip(answer, full, strict=True):
                assert mine == pytest.approx(its, rel=1e-9, abs=1e-12), query
            assert await store.lexical(query, limit) == answer
    assert pruned >= 100, f"only {pruned} rankings were pruned: the fixture no longer exercises pruning"
    store.close()


async def test_a_query_pruning_cannot_answer_runs_in_full(store: SqliteSpaceStore) -> None:
    store._top = FtsTopK("chunks_fts", TOKENIZER, (3.0, 2.0, 1.0), budget=60)
    two_tokens = "self\u2014return value"  # an em dash: one query word, two tokens to FTS5
    assert store._pruned(two_tokens, 5) is None, "a phrase of two tokens: the full query"
    assert store._pruned("parse3", 5) is None, "one word: nothing to prune"
    assert await store.lexical(two_tokens, 5) == store._read(FULL, (fts_query(two_tokens), 5))
    store.close()


EVERY = (
    "SELECT rowid, -bm25(chunks_fts, 3.0, 2.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY bm25(chunks_fts, 3.0, 2.0, 1.0)"
)


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteSpaceStore]:
    """A space of 40 files whose common words are in most chunks, the scores of each word in over 30 rows stored."""
    folder = tmp_path_factory.mktemp("stored")
    (folder / "src").mkdir()
    corpus(folder / "src")
    restemmed = "\n\n".join(  # 'erase' → 'eras' → 'era': a stem that a second stemming changes
        f"def erase_{i}(self):\n    return self.erase(value) or EventGenerator(name)\n" for i in range(6)
    )
    (folder / "src" / "erasing.py").write_text(restemmed, encoding="utf-8")
    service = KnowledgeService(folder / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(folder / "src")))
    asyncio.run(index.refresh())
    asyncio.run(index.aclose())
    opened = SqliteSpaceStore(service.store_path("bundle", "code"))
    opened._top = FtsTopK("chunks_fts", TOKENIZER, (3.0, 2.0, 1.0), budget=60, stored=30)
    ((version,),) = opened._read("SELECT value FROM meta WHERE key = 'version'")
    opened.save_term_scores(int(version))
    yield opened
    opened.close()


async def test_each_refresh_leaves_the_term_scores_of_its_version(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    corpus(tmp_path / "src", files=6)
    service = KnowledgeService(tmp_path / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(tmp_path / "src")))
    stamps = "SELECT key, value FROM meta WHERE key IN ('version', 'term_scores') ORDER BY key"
    try:
        for change in ("first index", "a file changed", "nothing changed"):
            if change == "a file changed":
                (tmp_path / "src" / "module_0.py").write_text("def parse0(self):\n    return value\n", encoding="utf-8")
            await index.refresh()
            store = SqliteSpaceStore(service.store_path("bundle", "code"))
            (_, scored), (_, version) = store._read(stamps)
            store.close()
            assert scored == version, change
    finally:
        await index.aclose()


def test_common_word_queries_are_summed_from_stored_scores_to_fts5_s_bits(listed: SqliteSpaceStore) -> None:
    pruned = 0
    for first in range(len(COMMON)):
        for second in range(first, len(COMMON)):
            query = " ".join(dict.fromkeys([COMMON[first], COMMON[second]]))
            for limit in (1, 5, 10):
                answer = listed._pruned(query, limit)
                if answer is not None:
                    pruned += 1
                    assert answer == listed._read(FULL, (fts_query(query), limit)), query
    assert pruned >= 100, f"only {pruned} rankings were pruned: the fixture no longer stores term scores"


def test_term_scores_of_another_version_are_never_read(listed: SqliteSpaceStore) -> None:
    ((version,),) = listed._read("SELECT value FROM meta WHERE key = 'version'")
    listed._read("UPDATE meta SET value = 'stale' WHERE key = 'term_scores'")
    listed._read("UPDATE chunks_fts_postings SET scores = zeroblob(length(scores))")  # read, they would rank wrongly
    try:
        listed._term_scores_tried = version  # not rebuilt on the way
        for query in ("self return", "value", "name data error"):
            answer = listed._pruned(query, 5)
            assert answer is None or {r for r, _ in answer} == {r for r, _ in listed._read(FULL, (fts_query(query), 5))}
    finally:
        listed._term_scores_tried = ""
        listed.save_term_scores(int(version))
    assert listed._read("SELECT value FROM meta WHERE key = 'term_scores'") == [(version,)]
    assert listed._pruned("value", 5) == listed._read(FULL, (fts_query("value"), 5))


def test_a_search_while_the_scores_are_being_stored_neither_waits_nor_stores_them_again(
    listed: SqliteSpaceStore,
) -> None:
    ((version,),) = listed._read("SELECT value FROM meta WHERE key = 'version'")
    listed._read("UPDATE meta SET value = 'stale' WHERE key = 'term_scores'")
    with listed._storing_scores:  # what a refresh holds while it stores its version's scores
        answer = listed._pruned("self return", 5)
        assert answer is None or answer == listed._read(FULL, (fts_query("self return"), 5))
        assert listed._read("SELECT value FROM meta WHERE key = 'term_scores'") == [("stale",)]
    assert listed._pruned("self return", 5) == listed._read(FULL, (fts_query("self return"), 5))
    assert listed._read("SELECT value FROM meta WHERE key = 'term_scores'") == [(version,)], "stored by that search"


def test_a_word_whose_stem_stems_again_to_another_is_asked_as_written(listed: SqliteSpaceStore) -> None:
    assert listed._top.tokens("erase") == ("eras",) and listed._top.tokens("eras") != ("eras",)
    for query in ("self erase", "return value erase", "name EventGenerator self"):
        answer = listed._pruned(query, 10)
        assert answer is not None, query
        assert answer == listed._read(FULL, (fts_query(query), 10)), query


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(st.sampled_from(COMMON), min_size=1, max_size=4)
    | st.lists(st.sampled_from(COMMON + RARE[:6]), min_size=1, max_size=4),
    limit=st.integers(min_value=1, max_value=20),
)
def test_a_pruned_ranking_is_the_full_ranking(listed: SqliteSpaceStore, words: list[str], limit: int) -> None:
    query = " ".join(words)
    answer = listed._pruned(query, limit)
    full = listed._read(FULL, (fts_query(query), limit))
    common = all(len(listed._read(EVERY, (fts_query(word),))) > 30 for word in words)
    if answer is not None and common:  # summed from the stored scores: to the bit
        assert answer == full, query
    elif answer is not None:  # the rare-phrase pruning: its sums are added in another order (last bits)
        assert {rowid for rowid, _ in answer} == {rowid for rowid, _ in full}, query
