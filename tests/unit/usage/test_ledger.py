"""The usage ledger with a real embedded meta store: calls priced and counted at once, stored once per turn,
budgets that hold across concurrent turns, totals that start from the store and reset with the UTC period."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from berth.config.models.assembly import ModelPrice, ModelsConfig
from berth.config.models.gateway import Budget
from berth.default_plugins.storage.sqlite_database import SqliteDatabase
from berth.default_plugins.storage.sqlite_meta import DATABASE_FILE, SqliteMetaStore
from berth.models.protocol import Usage
from berth.runtime.metering import ModelCall
from berth.storage.scope import ConversationScope
from berth.usage import UsageLedger

NOON = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
PRICES = ModelsConfig(
    prices={
        "anthropic:claude-sonnet-5-5": ModelPrice(input=3, output=15, cache_read=0.3, cache_write=3.75),
        "claude-haiku-5-5": ModelPrice(input=1, output=5),
    }
)


@dataclass
class Clock:
    now: datetime = NOON

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMetaStore]:
    """The embedded meta store, tracing its SQL in ``store.statements``."""
    opened = SqliteMetaStore(tmp_path)
    statements: list[str] = []
    opened.database = SqliteDatabase(tmp_path / DATABASE_FILE, trace=statements.append)
    opened.statements = statements  # type: ignore[attr-defined]
    await opened.open()
    yield opened
    await opened.aclose()


def ledger_over(store: SqliteMetaStore, clock: Clock, *budgets: Budget) -> UsageLedger:
    return UsageLedger(store, budgets=lambda: budgets, models=lambda tenant, project: PRICES, clock=clock)


def scope(user: str = "ada", conversation: str = "c1", project: str = "support") -> ConversationScope:
    return ConversationScope(tenant="acme", project=project, user_id=user, conversation_id=conversation)


def call(at: datetime, model: str = "anthropic:claude-sonnet-5-5", **tokens: int) -> ModelCall:
    return ModelCall(model, "round", Usage(**tokens), at)


async def test_a_turns_calls_are_counted_at_once_and_stored_in_one_write_when_it_ends(store: SqliteMetaStore) -> None:
    clock = Clock()
    ledger = ledger_over(store, clock)
    meter = ledger.meter(scope(), "turn_1", "hello")
    meter.model_called(call(NOON, input_tokens=1000, output_tokens=100, cache_read_input_tokens=2000))
    meter.model_called(call(NOON, input_tokens=10, cache_creation_input_tokens=4000))

    assert ledger.totals.spent("day", ("acme", "support", "ada"), NOON).tokens == 7110
    (stored,) = await store.usage_totals("acme", "support", NOON, NOON + timedelta(1), None)
    assert stored.calls == 0, "nothing is stored before the turn ends"
    store.statements.clear()  # type: ignore[attr-defined]
    await ledger.settle(meter)
    await ledger.settle(meter)

    transactions = [s for s in store.statements if s.startswith("BEGIN")]  # type: ignore[attr-defined]
    assert len(transactions) == 1
    (total,) = await store.usage_totals("acme", "support", NOON, NOON + timedelta(1), None)
    assert (total.calls, total.turns, total.total_tokens) == (2, 1, 7110)
    expected = (1000 * 3 + 100 * 15 + 2000 * 0.3 + 10 * 3 + 4000 * 3.75) / 1e6
    assert total.cost_usd == pytest.approx(expected)
    assert meter.cost_usd() == pytest.approx(expected)


async def test_a_model_without_a_price_has_an_unknown_cost_not_a_zero_one(store: SqliteMetaStore) -> None:
    ledger = ledger_over(store, Clock())
    meter = ledger.meter(scope(), "turn_1", "hello")
    meter.model_called(call(NOON, model="anthropic:claude-haiku-5-5", input_tokens=1_000_000))
    assert meter.cost_usd() == pytest.approx(1.0), "the bare model name's price applies to any provider's label"
    meter.model_called(call(NOON, model="openai:gpt-9", input_tokens=5))
    assert meter.cost_usd() is None
    await ledger.settle(meter)
    groups = await store.usage_totals("acme", "support", NOON, NOON + timedelta(1), "model")
    assert [(g.key, g.cost_usd, g.unpriced_calls) for g in groups] == [
        ("anthropic:claude-haiku-5-5", pytest.approx(1.0), 0),
        ("openai:gpt-9", None, 1),
    ]


async def test_cache_tokens_are_priced_as_input_unless_their_prices_are_given(store: SqliteMetaStore) -> None:
    ledger = ledger_over(store, Clock())
    meter = ledger.meter(scope(), "turn_1", "hello")
    meter.model_called(
        call(NOON, model="x:claude-haiku-5-5", cache_read_input_tokens=1_000_000, cache_creation_input_tokens=1_000_000)
    )
    assert meter.cost_usd() == pytest.approx(2.0)


async def test_a_project_budget_holds_across_the_concurrent_turns_of_its_users(store: SqliteMetaStore) -> None:
    budget = Budget(scope="acme/support", period="day", tokens=1000)
    ledger = ledger_over(store, Clock(), budget)
    ada, bob = ledger.meter(scope("ada"), "turn_a", "hello"), ledger.meter(scope("bob", "c2"), "turn_b", "hello")
    ada.model_called(call(NOON, input_tokens=600))
    assert ada.breach() is None and bob.breach() is None
    bob.model_called(call(NOON, input_tokens=400))

    for meter in (ada, bob):
        breach = meter.breach()
        assert breach is not None
        assert breach.details["used"] == 1000 and breach.details["limit"] == 1000
        assert "the turn stopped after the round that reached it" in breach.message
    elsewhere = ledger.exhausted(scope("cy", project="sales"))
    assert elsewhere is None, "another project of the tenant is not held by this project's budget"


async def test_a_per_user_budget_refuses_only_the_user_who_used_it_up(store: SqliteMetaStore) -> None:
    budget = Budget(scope="acme/support", per_user=True, period="day", tokens=1000)
    ledger = ledger_over(store, Clock(), budget)
    ada = ledger.meter(scope("ada"), "turn_a", "hello")
    ada.model_called(call(NOON, input_tokens=700, output_tokens=300))

    exhausted = ledger.exhausted(scope("ada"))
    assert exhausted is not None
    assert exhausted.details() == {
        "scope": "acme/support",
        "per_user": True,
        "user_id": "ada",
        "period": "day",
        "metric": "tokens",
        "limit": 1000,
        "used": 1000,
        "resets_at": "2025-03-15T00:00:00Z",
        "retry_after_s": 12 * 3600,
    }
    assert exhausted.message(during_turn=False) == (
        "budget exceeded: each user of acme/support may spend 1,000 tokens a day, and user ada has used 1,000 tokens "
        "this day; new turns may start when it resets at 2025-03-15T00:00:00Z (in 12 h 0 min)"
    )
    assert ledger.exhausted(scope("bob")) is None


async def test_a_cost_budget_counts_priced_calls_and_of_several_budgets_the_latest_reset_is_told(
    store: SqliteMetaStore,
) -> None:
    monthly = Budget(scope="acme", period="month", cost_usd=0.5)
    daily = Budget(scope="acme", period="day", tokens=10)
    ledger = ledger_over(store, Clock(), monthly, daily)
    meter = ledger.meter(scope(), "turn_1", "hello")
    meter.model_called(call(NOON, output_tokens=40_000))  # $0.60

    exhausted = ledger.exhausted(scope())
    assert exhausted is not None
    assert (exhausted.metric, exhausted.limit, exhausted.used) == ("cost_usd", 0.5, 0.6)
    assert exhausted.resets_at == "2025-04-01T00:00:00Z"
    assert exhausted.retry_after_s == int((datetime(2025, 4, 1, tzinfo=UTC) - NOON).total_seconds())
    assert "acme may spend $0.50 a month" in exhausted.message(during_turn=False)


async def test_a_budget_resets_with_its_utc_period(store: SqliteMetaStore) -> None:
    clock = Clock(datetime(2025, 3, 31, 23, 59, 59, tzinfo=UTC))
    daily = Budget(scope="acme/support", period="day", tokens=100)
    ledger = ledger_over(store, clock, daily)
    meter = ledger.meter(scope(), "turn_1", "hello")
    meter.model_called(call(clock.now, input_tokens=100))
    assert ledger.exhausted(scope()) is not None
    clock.now += timedelta(seconds=1)
    assert ledger.exhausted(scope()) is None
    meter.model_called(call(clock.now - timedelta(seconds=1), input_tokens=500))
    assert ledger.exhausted(scope()) is None, "a call of yesterday does not count against today"


async def test_totals_start_from_the_stored_calls_of_the_current_period(store: SqliteMetaStore) -> None:
    earlier = ledger_over(store, Clock())
    for at, tokens in ((NOON - timedelta(days=30), 5000), (NOON - timedelta(days=2), 700), (NOON, 250)):
        meter = earlier.meter(scope(), f"turn_{tokens}", "hello")
        meter.model_called(call(at, input_tokens=tokens))
        await earlier.settle(meter)

    daily = Budget(scope="acme/support", per_user=True, period="day", tokens=300)
    monthly = Budget(scope="acme", period="month", tokens=2000)
    restarted = ledger_over(store, Clock(), daily, monthly)
    await restarted.load([("acme", "support"), ("acme", "sales")])
    assert restarted.totals.spent("day", ("acme", "support", "ada"), NOON).tokens == 250
    assert restarted.totals.spent("month", ("acme", None, None), NOON).tokens == 950, "last month's call is out"
    assert restarted.exhausted(scope()) is None
    restarted.meter(scope(), "turn_more", "hello").model_called(call(NOON, input_tokens=50))
    exhausted = restarted.exhausted(scope())
    assert exhausted is not None and exhausted.budget == daily
    assert restarted.exhausted(scope("bob")) is None


async def test_a_call_outside_a_turn_is_stored_at_once_with_its_purpose(store: SqliteMetaStore) -> None:
    ledger = ledger_over(store, Clock())
    title = ModelCall("anthropic:claude-haiku-5-5", "title", Usage(input_tokens=200, output_tokens=8), NOON)
    await ledger.record_call(scope(), "turn_1", "hello", title)
    rows = await store.database.read_now(
        lambda connection: connection.execute("SELECT purpose, turn_id, cost_usd FROM usage").fetchall()
    )
    assert rows == [("title", "turn_1", pytest.approx((200 * 1 + 8 * 5) / 1e6))]
    assert ledger.totals.spent("day", ("acme", None, None), NOON).tokens == 208
