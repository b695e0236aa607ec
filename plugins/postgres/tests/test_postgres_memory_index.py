"""The PostgreSQL memory index: ``tsvector`` ranking plus stored embeddings, fused by the runtime exactly as for the
embedded index, and never beyond the caller's scope."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from berth_postgres.memory import PostgresMemoryIndex, tsquery
from hypothesis import given
from hypothesis import strategies as st
from pg_fixtures import migrated_database, truncate

from berth.runtime.blocks import Block, BlockType
from berth.runtime.memory import HashedNgramEmbedder, MemorySearch, MemsearchRequest
from berth.storage.memory import MemoryEntry, MemoryFilter
from berth.storage.scope import ConversationScope, OwnerScope

pytestmark = pytest.mark.postgres

EMBEDDER = HashedNgramEmbedder()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=60)
OWNER = OwnerScope(tenant="acme", project="support", user_id="ada")
SCOPE = OWNER.conversation("c1")
TOPICS = [
    ("How do I migrate the database schema?", "Use alembic revisions for the schema migration."),
    ("What is the weather in Berlin?", "Sunny, 21 degrees."),
    ("Draft a birthday card for Grete", "Happy birthday, Grete!"),
    ("Compare PostgreSQL and SQLite for analytics", "PostgreSQL scales to larger analytical workloads."),
]


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from migrated_database()


@pytest.fixture
async def index(database: str) -> AsyncIterator[PostgresMemoryIndex]:
    await truncate(database, "memory_entries")
    opened = PostgresMemoryIndex(database)
    await opened.open()
    yield opened
    await opened.aclose()


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


async def remember(index: PostgresMemoryIndex, scope: ConversationScope, topics: list[tuple[str, str]]) -> MemorySearch:
    """Index one turn per topic, a day apart, and return a search bound to ``scope``."""
    memory = MemorySearch(index, EMBEDDER, scope=scope)
    blocks: list[Block] = []
    for n, (question, reply) in enumerate(topics, start=1):
        at = T0 + timedelta(days=n)
        blocks += [prompt(f"turn_{n}", question, at=at), answer(f"turn_{n}", reply, at=at + timedelta(minutes=1))]
    await memory.index_blocks(blocks, turn_ordinals={f"turn_{n}": n for n in range(1, len(topics) + 1)})
    return memory


async def search(memory: MemorySearch, **params: object) -> list[str]:
    hits = await memory.search(MemsearchRequest.model_validate(params), now=NOW)
    return [hit.path for hit in hits]


@given(st.text(max_size=100))
def test_tsqueries_are_always_quoted_words(text: str) -> None:
    query = tsquery(text)
    assert query is None or all(
        term.startswith("'") and term.endswith("'") and "'" not in term[1:-1] for term in query.split(" | ")
    )


async def test_lexical_search_ranks_the_best_match_first_and_survives_query_syntax(
    index: PostgresMemoryIndex,
) -> None:
    await remember(index, SCOPE, TOPICS)
    hits = await index.search_lexical(MemoryFilter(owner=OWNER), "schema migration", limit=5)
    assert hits[0].entry.path == "ar:turn_1.assistant.completion"  # both words, against one in the prompt
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert {hit.entry.turn_id for hit in hits} == {"turn_1"}
    odd = await index.search_lexical(MemoryFilter(owner=OWNER), "schema' | !(:* & \\ <->", limit=5)
    assert odd and odd[0].entry.turn_id == "turn_1"
    assert await index.search_lexical(MemoryFilter(owner=OWNER), "?!", limit=5) == ()
    assert await index.search_lexical(MemoryFilter(owner=OWNER), "schema", limit=0) == ()


async def test_entries_round_trip_with_their_vectors_oldest_first(index: PostgresMemoryIndex) -> None:
    await remember(index, SCOPE, TOPICS[:2])
    entries = await index.list_entries(MemoryFilter(owner=OWNER))
    assert [e.path for e in entries] == [
        "ar:turn_1.user.prompt",
        "ar:turn_1.assistant.completion",
        "ar:turn_2.user.prompt",
        "ar:turn_2.assistant.completion",
    ]
    first = entries[0]
    assert (first.scope, first.turn_ordinal, first.kind, first.ts) == (SCOPE, 1, "user", T0 + timedelta(days=1))
    expected = EMBEDDER.embed_one(TOPICS[0][0])
    assert len(first.vector) == len(expected)
    assert max(abs(a - b) for a, b in zip(first.vector, expected, strict=True)) < 1e-6  # stored as 32-bit floats


async def test_hybrid_fuses_words_and_embeddings(index: PostgresMemoryIndex) -> None:
    memory = await remember(index, SCOPE, TOPICS)
    assert set(await search(memory, query="schema migration", top_k=2)) == {
        "ar:turn_1.user.prompt",
        "ar:turn_1.assistant.completion",
    }
    # no lexical match for the plural; the embedding finds it
    assert await index.search_lexical(MemoryFilter(owner=OWNER), "migrations", limit=5) == ()
    assert (await search(memory, query="migrations", top_k=1))[0].startswith("ar:turn_1.")


async def test_recency_lifts_the_newer_of_two_equal_matches(index: PostgresMemoryIndex) -> None:
    memory = await remember(
        index, SCOPE, [("Tell me about invoices", "x"), ("filler", "y"), ("Tell me about invoices", "z")]
    )
    assert await search(memory, query="invoices", top_k=2, targets=["user"]) == [
        "ar:turn_3.user.prompt",
        "ar:turn_1.user.prompt",
    ]


async def test_timeline_ordinal_and_temporal_modes_read_by_time(index: PostgresMemoryIndex) -> None:
    memory = await remember(index, SCOPE, TOPICS)
    assert await search(memory, mode="timeline", targets=["user"], order="desc", top_k=1) == ["ar:turn_4.user.prompt"]
    assert await search(memory, mode="ordinal", ordinal=2) == [
        "ar:turn_2.user.prompt",
        "ar:turn_2.assistant.completion",
    ]
    window = {"from": (T0 + timedelta(days=2)).isoformat(), "to": (T0 + timedelta(days=3)).isoformat()}
    assert await search(memory, mode="temporal", **window, top_k=10) == [
        "ar:turn_2.user.prompt",
        "ar:turn_2.assistant.completion",
    ]


async def test_no_search_ever_returns_another_scopes_rows(index: PostgresMemoryIndex) -> None:
    elsewhere = OWNER.conversation("c2")
    colleague = OwnerScope(tenant="acme", project="support", user_id="bob").conversation("c1")
    other_project = OwnerScope(tenant="acme", project="sales", user_id="ada").conversation("c1")
    other_tenant = OwnerScope(tenant="globex", project="support", user_id="ada").conversation("c1")
    memory = await remember(index, SCOPE, [("weather in Berlin", "sunny")])
    for foreign in (elsewhere, colleague, other_project, other_tenant):
        await remember(index, foreign, [(f"secret zebra plan {foreign.conversation_id}", "classified zebra")])

    assert await search(memory, query="zebra", top_k=10) == []
    user_hits = await memory.search(MemsearchRequest(query="zebra", scope="user", top_k=10), now=NOW)
    assert {(hit.conversation_id) for hit in user_hits} == {"c2"}
    lexical = await index.search_lexical(MemoryFilter(owner=OWNER), "zebra", limit=50)
    assert {hit.entry.scope for hit in lexical} == {elsewhere}
    listed = await index.list_entries(MemoryFilter(owner=OWNER))
    assert {entry.scope for entry in listed} == {SCOPE, elsewhere}


async def test_reindexing_a_path_replaces_its_entry(index: PostgresMemoryIndex) -> None:
    memory = await remember(index, SCOPE, [("old words about llamas", "ok")])
    await memory.index_blocks([prompt("turn_1", "new words about alpacas", at=T0)], turn_ordinals={"turn_1": 1})
    assert await index.search_lexical(MemoryFilter(owner=OWNER), "llamas", limit=5) == ()
    (hit,) = await index.search_lexical(MemoryFilter(owner=OWNER), "alpacas", limit=5)
    assert hit.entry.path == "ar:turn_1.user.prompt"
    assert len(await index.list_entries(MemoryFilter(owner=OWNER))) == 2


async def test_a_naive_timestamp_is_refused(index: PostgresMemoryIndex) -> None:
    naive = MemoryEntry(SCOPE, "ar:t.user.prompt", "t", 1, "user", datetime(2026, 1, 1), "text", (1.0,))
    with pytest.raises(ValueError, match="timezone-aware"):
        await index.add((naive,))
