"""Memory search: BM25 (FTS5) + embeddings fused by RRF with a recency lift, four modes, never beyond scope."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from storage_builders import T0

from berth.default_plugins.storage.sqlite_memory import SqliteMemoryIndex, fts_query
from berth.runtime.blocks import Block, BlockType
from berth.runtime.memory import (
    HashedNgramEmbedder,
    MemorySearch,
    MemsearchRequest,
    cosine,
    fuse_rankings,
    memorable_blocks,
)
from berth.storage.memory import MemoryFilter
from berth.storage.scope import ConversationScope, OwnerScope

run = asyncio.run
EMBEDDER = HashedNgramEmbedder()
NOW = T0 + timedelta(days=60)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SqliteMemoryIndex]:
    """An open memory index in a real SQLite file."""
    opened = SqliteMemoryIndex(tmp_path / "var")
    run(opened.open())
    yield opened
    run(opened.aclose())


def prompt(turn_id: str, text: str, *, at: datetime) -> Block:
    return Block(
        type=BlockType.USER_PROMPT, path=f"ar:{turn_id}.user.prompt", turn_id=turn_id, ts=at, author="user", text=text
    )


def answer(turn_id: str, text: str, *, at: datetime) -> Block:
    return Block(
        type=BlockType.ASSISTANT_COMPLETION,
        path=f"ar:{turn_id}.assistant.completion",
        turn_id=turn_id,
        ts=at,
        author="assistant",
        text=text,
    )


TOPICS = [
    ("How do I migrate the database schema?", "Use alembic revisions for the schema migration."),
    ("What is the weather in Berlin?", "Sunny, 21 degrees."),
    ("Draft a birthday card for Grete", "Happy birthday, Grete!"),
    ("Compare PostgreSQL and SQLite for analytics", "PostgreSQL scales to larger analytical workloads."),
]


def remember(index: SqliteMemoryIndex, scope: ConversationScope, topics: list[tuple[str, str]]) -> MemorySearch:
    """Index one turn per topic, a day apart, and return a search bound to ``scope``."""
    search = MemorySearch(index, EMBEDDER, scope=scope)
    blocks: list[Block] = []
    for n, (question, reply) in enumerate(topics, start=1):
        at = T0 + timedelta(days=n)
        blocks += [prompt(f"turn_{n}", question, at=at), answer(f"turn_{n}", reply, at=at + timedelta(minutes=1))]
    ordinals = {f"turn_{n}": n for n in range(1, len(topics) + 1)}
    run(search.index_blocks(blocks, turn_ordinals=ordinals))
    return search


def search(memory: MemorySearch, **params: object) -> list[str]:
    hits = run(memory.search(MemsearchRequest.model_validate(params), now=NOW))
    return [hit.path for hit in hits]


def test_hashed_embeddings_are_deterministic_unit_vectors() -> None:
    first = EMBEDDER.embed_one("Database schema migration")
    assert first == HashedNgramEmbedder().embed_one("Database schema migration")
    assert abs(cosine(first, first) - 1.0) < 1e-9
    assert EMBEDDER.embed_one("   ") == (0.0,) * EMBEDDER.dimensions


def test_word_pieces_bring_related_texts_closer_than_unrelated_ones() -> None:
    query = EMBEDDER.embed_one("databases")
    assert cosine(query, EMBEDDER.embed_one("the database schema")) > cosine(query, EMBEDDER.embed_one("sunny day"))


@given(st.text(max_size=200))
def test_any_text_embeds_to_a_unit_or_zero_vector(text: str) -> None:
    vector = EMBEDDER.embed_one(text)
    norm = cosine(vector, vector)
    assert len(vector) == EMBEDDER.dimensions
    assert norm == 0.0 or abs(norm - 1.0) < 1e-9


def reference_embedding(text: str, dimensions: int = 256) -> list[float]:
    """The hashed n-gram embedding by its definition, one feature at a time: each word adds +-1 to the bucket
    BLAKE2b picks for it, each of its boundary-marked 3- and 4-grams +-0.5; the sum is scaled to unit length."""
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        marked = f"<{word}>"
        grams = [marked[i : i + size] for size in (3, 4) for i in range(max(len(marked) - size + 1, 1))]
        for feature, weight in [("w:" + word, 1.0), *(("g:" + gram, 0.5) for gram in grams)]:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % dimensions] += weight if digest[4] & 1 else -weight
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector] if norm else vector


@given(st.text(max_size=200))
def test_the_embedding_is_its_definition(text: str) -> None:
    assert EMBEDDER.embed_one(text) == pytest.approx(reference_embedding(text), abs=1e-12)


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    scores = fuse_rankings([["a", "b", "c"], ["b", "d"]], k=60)
    assert max(scores, key=scores.__getitem__) == "b"
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)


@given(st.lists(st.permutations(["a", "b", "c", "d", "e"]), min_size=1, max_size=4))
def test_an_item_first_in_every_ranking_is_first_after_fusion(rankings: list[list[str]]) -> None:
    leader = "z"
    scores = fuse_rankings([[leader, *ranking] for ranking in rankings])
    assert max(scores, key=scores.__getitem__) == leader


@settings(deadline=None)
@given(st.text(max_size=100))
def test_fts_queries_are_always_well_formed(text: str) -> None:
    query = fts_query(text)
    assert query is None or all(term.startswith('"') and term.endswith('"') for term in query.split(" OR "))


def test_lexical_search_survives_fts_syntax_in_the_query(index: SqliteMemoryIndex, owner: OwnerScope) -> None:
    remember(index, owner.conversation("c1"), TOPICS)
    hits = run(index.search_lexical(MemoryFilter(owner=owner), 'schema" OR NEAR( * -"', limit=5))
    assert hits[0].entry.path in {"ar:turn_1.user.prompt", "ar:turn_1.assistant.completion"}
    assert run(index.search_lexical(MemoryFilter(owner=owner), "?!", limit=5)) == ()


def test_hybrid_finds_the_turn_by_its_words(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, TOPICS)
    paths = search(memory, query="schema migration", top_k=2)
    assert set(paths) == {"ar:turn_1.user.prompt", "ar:turn_1.assistant.completion"}


def test_hybrid_finds_word_variants_the_lexical_index_misses(
    index: SqliteMemoryIndex, scope: ConversationScope
) -> None:
    memory = remember(index, scope, TOPICS)
    assert run(index.search_lexical(MemoryFilter(owner=scope.owner), "migrations", limit=5)) == ()
    assert search(memory, query="migrations", top_k=1)[0].startswith("ar:turn_1.")


def test_recency_lifts_the_newer_of_two_equal_matches(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, [("Tell me about invoices", "x"), ("filler", "y"), ("Tell me about invoices", "z")])
    paths = search(memory, query="invoices", top_k=2, targets=["user"])
    assert paths == ["ar:turn_3.user.prompt", "ar:turn_1.user.prompt"]


def test_timeline_mode_lists_entries_in_time_order(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, TOPICS)
    assert search(memory, mode="timeline", targets=["user"], top_k=3) == [
        "ar:turn_1.user.prompt",
        "ar:turn_2.user.prompt",
        "ar:turn_3.user.prompt",
    ]
    assert search(memory, mode="timeline", targets=["user"], order="desc", top_k=1) == ["ar:turn_4.user.prompt"]


def test_ordinal_mode_returns_the_nth_turn(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, TOPICS)
    assert search(memory, mode="ordinal", ordinal=2) == ["ar:turn_2.user.prompt", "ar:turn_2.assistant.completion"]


def test_temporal_mode_keeps_the_half_open_window(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, TOPICS)
    window = {"from": (T0 + timedelta(days=2)).isoformat(), "to": (T0 + timedelta(days=3)).isoformat()}
    assert search(memory, mode="temporal", **window, top_k=10) == [
        "ar:turn_2.user.prompt",
        "ar:turn_2.assistant.completion",
    ]
    assert search(memory, mode="temporal", query="birthday", top_k=10, **{"from": T0.isoformat()})[0].startswith(
        "ar:turn_3."
    )


def test_user_scope_reaches_the_users_other_conversations_and_nothing_beyond(
    index: SqliteMemoryIndex, owner: OwnerScope
) -> None:
    here, elsewhere = owner.conversation("c1"), owner.conversation("c2")
    colleague = OwnerScope(tenant="acme", project="support", user_id="bob").conversation("c1")
    other_project = OwnerScope(tenant="acme", project="sales", user_id="ada").conversation("c9")
    other_tenant = OwnerScope(tenant="globex", project="support", user_id="ada").conversation("c1")
    memory = remember(index, here, [("weather in Berlin", "sunny")])
    for foreign in (elsewhere, colleague, other_project, other_tenant):
        remember(index, foreign, [(f"secret zebra plan {foreign.conversation_id}", "classified zebra")])

    assert search(memory, query="zebra", top_k=10) == []
    user_hits = run(memory.search(MemsearchRequest(query="zebra", scope="user", top_k=10), now=NOW))
    assert {hit.conversation_id for hit in user_hits} == {"c2"}
    timeline_hits = run(memory.search(MemsearchRequest(mode="timeline", scope="user", top_k=50), now=NOW))
    assert {hit.conversation_id for hit in timeline_hits} == {"c1", "c2"}


def test_reindexing_a_path_replaces_its_entry(index: SqliteMemoryIndex, scope: ConversationScope) -> None:
    memory = remember(index, scope, [("old words about llamas", "ok")])
    run(memory.index_blocks([prompt("turn_1", "new words about alpacas", at=T0)], turn_ordinals={"turn_1": 1}))
    assert search(memory, query="llamas", targets=["user"]) == []
    assert search(memory, query="alpacas", targets=["user"]) == ["ar:turn_1.user.prompt"]


def test_only_visible_memorable_text_is_indexed() -> None:
    hidden = prompt("turn_1", "secret", at=T0).model_copy(update={"hidden": True, "replacement": "hidden"})
    notes = Block(
        type=BlockType.REACT_NOTES, path="ar:turn_1.react.notes", turn_id="turn_1", ts=T0, author="assistant", text="n"
    )
    kept = memorable_blocks([hidden, notes, answer("turn_1", "Done", at=T0)], turn_ordinals={"turn_1": 1})
    assert [(b.path, kind) for b, kind in kept] == [("ar:turn_1.assistant.completion", "assistant")]


@pytest.mark.parametrize(
    "params",
    [{"mode": "hybrid"}, {"mode": "ordinal"}, {"mode": "temporal"}, {"mode": "timeline", "top_k": 0}],
)
def test_requests_missing_what_their_mode_needs_are_refused(params: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        MemsearchRequest.model_validate(params)


class QueryRewritingEmbedder(HashedNgramEmbedder):
    """An asymmetric embedder: queries are embedded differently from indexed texts (as E5 does)."""

    async def embed_query(self, query: str) -> tuple[float, ...]:
        return self.embed_one("birthday card for Grete" if query == "greetings" else query)


def test_queries_go_through_the_embedders_query_side(index: SqliteMemoryIndex, owner: OwnerScope) -> None:
    scope = owner.conversation("c1")
    remember(index, scope, TOPICS)
    memory = MemorySearch(index, QueryRewritingEmbedder(), scope=scope)
    assert search(memory, mode="hybrid", query="greetings")[0] == "ar:turn_3.user.prompt"
