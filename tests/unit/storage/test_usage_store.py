"""Usage rows in the embedded meta store: stored in one transaction, summed per user, bundle, day or model in a
period, and read back as what each user spent per day (where budgets start)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from berth.default_plugins.storage.sqlite_meta import DATABASE_FILE, SqliteMetaStore
from berth.storage.scope import ConversationScope
from berth.storage.usage import SpentRow, UsageRecord

DAY1 = datetime(2025, 6, 1, 10, tzinfo=UTC)
DAY2 = datetime(2025, 6, 2, 23, 59, 59, 999_999, tzinfo=UTC)


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


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetaStore]:
    store = SqliteMetaStore(tmp_path)
    await store.open()
    await store.record_usage(ROWS)
    yield store
    await store.aclose()


async def test_totals_are_grouped_by_user_bundle_day_and_model_within_one_tenant_and_project(
    meta: SqliteMetaStore,
) -> None:
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


async def test_a_period_includes_its_start_and_excludes_its_end(meta: SqliteMetaStore) -> None:
    (first_day,) = await meta.usage_totals("acme", "support", DAY1, DAY2, None)
    assert first_day.calls == 3
    (second_day,) = await meta.usage_totals("acme", "support", DAY2, DAY2 + timedelta(microseconds=1), None)
    assert second_day.calls == 1
    (none,) = await meta.usage_totals("acme", "support", DAY1 + timedelta(seconds=6), DAY2, None)
    assert (none.calls, none.turns, none.total_tokens, none.cost_usd, none.unpriced_calls) == (0, 0, 0, None, 0)
    assert await meta.usage_totals("acme", "support", DAY1 + timedelta(seconds=6), DAY2, "user") == []


async def test_what_was_spent_is_read_per_user_and_day_and_narrowed_to_a_scope(meta: SqliteMetaStore) -> None:
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


async def test_usage_survives_a_reopen_and_an_older_database_gains_the_table(tmp_path: Path) -> None:
    older = sqlite3.connect(tmp_path / DATABASE_FILE)
    older.execute(
        "CREATE TABLE conversations (tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, "
        "conversation_id TEXT NOT NULL, title TEXT, bundle TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
        "PRIMARY KEY (tenant, project, user_id, conversation_id))"
    )
    older.commit()
    older.close()
    store = SqliteMetaStore(tmp_path)
    await store.open()
    await store.record_usage(ROWS[:2])
    await store.aclose()
    reopened = SqliteMetaStore(tmp_path)
    await reopened.open()
    try:
        (total,) = await reopened.usage_totals("acme", "support", DAY1, DAY2, None)
        assert (total.calls, total.turns) == (2, 1)
    finally:
        await reopened.aclose()
