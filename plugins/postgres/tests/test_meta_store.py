"""The PostgreSQL meta store: the contract of the embedded one (titles and who set them, feedback, usage totals and
what budgets read back), with every read and write held to its tenant, project and user."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from berth_postgres.meta import PostgresMetaStore
from pg_fixtures import migrated_database, scratch_database, truncate

from berth.config.errors import ConfigError
from berth.storage.meta import ConversationMeta, Feedback
from berth.storage.scope import ConversationScope, OwnerScope
from berth.storage.usage import SpentRow, UsageRecord

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 11, 25, tzinfo=UTC)
SCOPE = ConversationScope(tenant="acme", project="support", user_id="u1", conversation_id="c_1")
DAY1 = datetime(2025, 6, 1, 10, tzinfo=UTC)
DAY2 = datetime(2025, 6, 2, 23, 59, 59, 999_999, tzinfo=UTC)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from migrated_database()


@pytest.fixture
async def meta(database: str) -> AsyncIterator[PostgresMetaStore]:
    await truncate(database, "meta_conversations", "meta_feedback", "meta_usage")
    store = PostgresMetaStore(database)
    await store.open()
    yield store
    await store.aclose()


def record(
    user: str,
    turn: str,
    at: datetime,
    *,
    conversation: str = "c1",
    bundle: str = "hello",
    model: str = "anthropic:claude-sonnet-5-5",
    tenant: str = "acme",
    project: str = "support",
    cost: float | None = 0.01,
    tokens: tuple[int, int, int, int] = (100, 10, 1000, 50),
) -> UsageRecord:
    scope = ConversationScope(tenant=tenant, project=project, user_id=user, conversation_id=conversation)
    return UsageRecord(scope, turn, bundle, model, "round", *tokens, cost, at)


ROWS = [
    record("ada", "turn_1", DAY1),
    record("ada", "turn_1", DAY1 + timedelta(seconds=5), model="anthropic:claude-haiku-5-5", cost=None),
    record("ada", "turn_1", DAY1, conversation="c2", bundle="docs"),  # the same turn id in another conversation
    record("bob", "turn_9", DAY2, bundle="docs", tokens=(1, 2, 3, 4), cost=0.5),
    record("bob", "turn_9", DAY2, project="sales"),
    record("cy", "turn_5", DAY2, tenant="globex"),
]


async def test_a_provisional_title_gives_way_to_the_summary_and_the_summary_never_to_the_user(
    meta: PostgresMetaStore,
) -> None:
    await meta.create_conversation(ConversationMeta(SCOPE, None, "hello", NOW, NOW))
    await meta.touch_conversation(SCOPE, at=NOW, title="what is the weather")
    got = await meta.get_conversation(SCOPE)
    assert got is not None and (got.title, got.title_source) == ("what is the weather", "message")
    await meta.touch_conversation(SCOPE, at=NOW, title="a later message")  # keeps the first
    assert await meta.set_title(SCOPE, "Weather", source="summary")
    assert await meta.set_title(SCOPE, "Mine", source="user")
    assert not await meta.set_title(SCOPE, "Summary again", source="summary")
    got = await meta.get_conversation(SCOPE)
    assert got is not None and (got.title, got.title_source) == ("Mine", "user")
    other = ConversationScope(tenant="acme", project="support", user_id="u2", conversation_id="c_1")
    assert not await meta.set_title(other, "Not theirs", source="user")
    assert await meta.get_conversation(other) is None


async def test_a_conversation_round_trips_and_its_id_is_new_per_owner(meta: PostgresMetaStore) -> None:
    created = ConversationMeta(SCOPE, "Given", "hello", NOW, NOW)
    await meta.create_conversation(created)
    got = await meta.get_conversation(SCOPE)
    assert got == ConversationMeta(SCOPE, "Given", "hello", NOW, NOW, "user")
    with pytest.raises(asyncpg.UniqueViolationError):
        await meta.create_conversation(created)
    # the same id for another user is another conversation
    await meta.create_conversation(ConversationMeta(SCOPE.model_copy(update={"user_id": "u2"}), None, None, NOW, NOW))


async def test_conversations_list_most_recent_first_per_owner_only(meta: PostgresMetaStore) -> None:
    owner = SCOPE.owner
    for n in range(4):
        at = NOW + timedelta(minutes=n)
        await meta.create_conversation(ConversationMeta(owner.conversation(f"c_{n}"), None, "hello", at, at))
    for foreign in (
        OwnerScope(tenant="acme", project="support", user_id="u2"),
        OwnerScope(tenant="acme", project="sales", user_id="u1"),
        OwnerScope(tenant="globex", project="support", user_id="u1"),
    ):
        await meta.create_conversation(ConversationMeta(foreign.conversation("c_9"), None, "hello", NOW, NOW))
    await meta.touch_conversation(owner.conversation("c_0"), at=NOW + timedelta(hours=1))
    listed = await meta.list_conversations(owner, limit=10)
    assert [m.scope.conversation_id for m in listed] == ["c_0", "c_3", "c_2", "c_1"]
    page = await meta.list_conversations(owner, limit=2, before=NOW + timedelta(minutes=3))
    assert [m.scope.conversation_id for m in page] == ["c_2", "c_1"]


async def test_feedback_is_replaced_per_origin_and_read_per_conversation_or_period(meta: PostgresMetaStore) -> None:
    await meta.put_feedback(Feedback(SCOPE, "turn_1", "ok", "", "user", NOW))
    await meta.put_feedback(Feedback(SCOPE, "turn_1", "not_ok", "wrong", "user", NOW + timedelta(seconds=1)))
    await meta.put_feedback(Feedback(SCOPE, "turn_1", "neutral", "auto", "machine", NOW + timedelta(seconds=2)))
    other_user = SCOPE.model_copy(update={"user_id": "u2"})
    await meta.put_feedback(Feedback(other_user, "turn_1", "ok", "", "user", NOW + timedelta(seconds=3)))
    other_project = SCOPE.model_copy(update={"project": "sales"})
    await meta.put_feedback(Feedback(other_project, "turn_1", "ok", "", "user", NOW))

    mine = await meta.feedback_for(SCOPE)
    assert [(f.origin, f.reaction, f.text) for f in mine] == [
        ("user", "not_ok", "wrong"),
        ("machine", "neutral", "auto"),
    ]
    period = await meta.feedback_between("acme", "support", NOW, NOW + timedelta(seconds=3))
    assert [(f.scope.user_id, f.origin) for f in period] == [("u1", "user"), ("u1", "machine")]  # end excluded
    assert len(await meta.feedback_between("acme", "support", NOW, NOW + timedelta(days=1))) == 3


async def test_totals_are_grouped_by_user_bundle_day_and_model_within_one_tenant_and_project(
    meta: PostgresMetaStore,
) -> None:
    await meta.record_usage(ROWS)
    start, end = DAY1 - timedelta(hours=10), DAY2 + timedelta(microseconds=1)
    by_user = await meta.usage_totals("acme", "support", start, end, "user")
    assert [(g.key, g.calls, g.turns, g.total_tokens) for g in by_user] == [("ada", 3, 2, 3480), ("bob", 1, 1, 10)]
    by_bundle = await meta.usage_totals("acme", "support", start, end, "bundle")
    assert [(g.key, g.calls, g.input_tokens, g.output_tokens) for g in by_bundle] == [
        ("docs", 2, 101, 12),
        ("hello", 2, 200, 20),
    ]
    by_day = await meta.usage_totals("acme", "support", start, end, "day")
    assert [(g.key, g.calls, g.cache_read_input_tokens, g.cache_creation_input_tokens) for g in by_day] == [
        ("2025-06-01", 3, 3000, 150),
        ("2025-06-02", 1, 3, 4),
    ]
    by_model = await meta.usage_totals("acme", "support", start, end, "model")
    assert [(g.key, g.cost_usd, g.unpriced_calls) for g in by_model] == [
        ("anthropic:claude-haiku-5-5", None, 1),
        ("anthropic:claude-sonnet-5-5", pytest.approx(0.52), 0),
    ]
    (total,) = await meta.usage_totals("acme", "support", start, end, None)
    assert (total.key, total.calls, total.turns, total.total_tokens) == (None, 4, 3, 3490)
    assert (total.cost_usd, total.unpriced_calls) == (pytest.approx(0.52), 1)


async def test_a_period_includes_its_start_and_excludes_its_end(meta: PostgresMetaStore) -> None:
    await meta.record_usage(ROWS)
    (first_day,) = await meta.usage_totals("acme", "support", DAY1, DAY2, None)
    assert first_day.calls == 3
    (second_day,) = await meta.usage_totals("acme", "support", DAY2, DAY2 + timedelta(microseconds=1), None)
    assert second_day.calls == 1
    (none,) = await meta.usage_totals("acme", "support", DAY1 + timedelta(seconds=6), DAY2, None)
    assert (none.calls, none.turns, none.total_tokens, none.cost_usd, none.unpriced_calls) == (0, 0, 0, None, 0)
    assert await meta.usage_totals("acme", "support", DAY1 + timedelta(seconds=6), DAY2, "user") == []


async def test_what_was_spent_is_read_per_user_and_day_and_narrowed_to_a_scope(meta: PostgresMetaStore) -> None:
    await meta.record_usage(ROWS)
    everything = await meta.usage_spent(DAY1 - timedelta(days=1))
    assert sorted(everything, key=lambda r: (r.tenant, r.project, r.user_id)) == [
        SpentRow("acme", "sales", "bob", "2025-06-02", 1160, pytest.approx(0.01)),
        SpentRow("acme", "support", "ada", "2025-06-01", 3480, pytest.approx(0.02)),
        SpentRow("acme", "support", "bob", "2025-06-02", 10, pytest.approx(0.5)),
        SpentRow("globex", "support", "cy", "2025-06-02", 1160, pytest.approx(0.01)),
    ]
    assert await meta.usage_spent(DAY2 + timedelta(microseconds=1)) == []
    tenant = await meta.usage_spent(DAY1 - timedelta(days=1), tenant="acme")
    assert {(r.project, r.user_id) for r in tenant} == {("sales", "bob"), ("support", "ada"), ("support", "bob")}
    project = await meta.usage_spent(DAY1 - timedelta(days=1), tenant="acme", project="support")
    assert {r.user_id for r in project} == {"ada", "bob"}
    user = await meta.usage_spent(DAY2 - timedelta(hours=1), tenant="acme", project="support", user_id="bob")
    assert user == [SpentRow("acme", "support", "bob", "2025-06-02", 10, pytest.approx(0.5))]


async def test_usage_of_one_turn_is_stored_all_or_nothing(meta: PostgresMetaStore) -> None:
    broken = replace(ROWS[1], bundle=None)  # type: ignore[arg-type] # refused by the server, after the first row
    with pytest.raises(asyncpg.NotNullViolationError):
        await meta.record_usage([ROWS[0], broken])
    (total,) = await meta.usage_totals("acme", "support", DAY1 - timedelta(days=1), DAY2, None)
    assert total.calls == 0
    await meta.record_usage([])


def test_a_store_refuses_a_database_that_was_not_migrated() -> None:
    with scratch_database() as dsn:
        store = PostgresMetaStore(dsn)
        with pytest.raises(ConfigError, match="run `berth migrate`"):
            asyncio.run(store.open())
