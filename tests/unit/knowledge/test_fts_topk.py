"""The SQLite store's lexical ranking without scoring every matching row (:mod:`berth.knowledge.fts_topk`) gives
the rows, order and scores of FTS5's own ``ORDER BY bm25(...) LIMIT``, on a corpus where common words match most
chunks and rare ones few (the budget lowered so that a small corpus prunes)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

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
