"""The host's usage ledger: every model call recorded per tenant, project, user, conversation, turn and bundle.

A turn gets a :class:`TurnUsageMeter` (the runtime's :class:`~berth.runtime.metering.TurnMeter`): each call
it reports is priced, counted at once in the ledger's running totals (so budgets hold across the concurrent
turns of the process) and kept until the turn ends, when :meth:`UsageLedger.settle` stores the turn's calls in
one write. Calls outside a turn (a conversation's title) go through :meth:`UsageLedger.record_call`.

Totals are per process: they start from the store's rows of the current month when the host starts
(:meth:`UsageLedger.load`, for the declared tenants and projects) and then count this process's calls.
Another process on the same storage root (``berth chat --in-process`` beside ``berth run``) is seen at the
next start only. In distributed mode every API process and worker spends, so each turn's admission reloads the
totals from the store first (:meth:`UsageLedger.reload`); within a turn its worker counts its own calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from berth.config.models.assembly import ModelPrice, ModelsConfig
from berth.config.models.gateway import Budget
from berth.models.events import Usage
from berth.runtime.metering import BudgetBreach, ModelCall
from berth.storage.meta import MetaStore
from berth.storage.scope import ConversationScope, OwnerScope
from berth.storage.usage import UsageRecord
from berth.usage.budgets import ExhaustedBudget, exhausted_budget
from berth.usage.periods import window_of
from berth.usage.prices import call_cost, counted_tokens
from berth.usage.totals import SpendTotals

__all__ = ["TurnUsageMeter", "UsageLedger"]

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class UsageLedger:
    """Prices, counts and stores model calls; says when a budget of ``gateway.yaml`` is used up.

    :param store: where usage rows are kept (the meta store).
    :param budgets: the budgets in force (read at every decision, so a reloaded ``gateway.yaml`` applies).
    :param models: the effective ``platform.models`` of a tenant/project (its price table).
    :param clock: now, in UTC.
    """

    def __init__(
        self,
        store: MetaStore,
        *,
        budgets: Callable[[], Sequence[Budget]],
        models: Callable[[str, str], ModelsConfig],
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._store = store
        self._budgets = budgets
        self._models = models
        self._clock = clock
        self.totals = SpendTotals()
        self._unpriced_warned: set[str] = set()

    async def load(self, scopes: Iterable[tuple[str, str]]) -> None:
        """Start the running totals from the stored usage of the current UTC month (once, as the host starts).

        :param scopes: the declared ``(tenant, project)`` pairs (one indexed read each: the usage table has one
            index, by tenant, project and time, so that storing a turn's calls costs little).
        """
        since = window_of("month", self._clock()).start
        for tenant, project in scopes:
            self.totals.add_stored(await self._store.usage_spent(since, tenant=tenant, project=project))

    async def reload(self, scopes: Iterable[tuple[str, str]]) -> None:
        """Replace the running totals with what the store holds for the current month (distributed mode: other
        processes spend too, so a turn is admitted against the stored totals, read when it starts). Does
        nothing when no budget is set."""
        if not self._budgets():
            return
        fresh = SpendTotals()
        since = window_of("month", self._clock()).start
        for tenant, project in scopes:
            fresh.add_stored(await self._store.usage_spent(since, tenant=tenant, project=project))
        self.totals = fresh

    def exhausted(self, scope: OwnerScope) -> ExhaustedBudget | None:
        """The budget of ``scope``'s tenant, project or user that is used up now (a turn must not start)."""
        budgets = self._budgets()
        if not budgets:  # asked before every turn and after every round: nothing to do without budgets
            return None
        return exhausted_budget(budgets, self.totals, scope, self._clock())

    def meter(self, scope: ConversationScope, turn_id: str, bundle: str) -> TurnUsageMeter:
        """A meter for one turn; hand it to :meth:`settle` when the turn ends."""
        return TurnUsageMeter(self, scope, turn_id, bundle)

    async def settle(self, meter: TurnUsageMeter) -> None:
        """Store the calls of ``meter``'s turn not stored yet, in one write (a failed write is logged, not
        raised: the turn's end must reach its client; the running totals keep the calls)."""
        records = meter.take_records()
        if records:
            await self._store_records(records)

    async def record_call(self, scope: ConversationScope, turn_id: str, bundle: str, call: ModelCall) -> None:
        """Price, count and store one call made outside a turn's rounds (a conversation's title)."""
        await self._store_records([self.account(scope, turn_id, bundle, call)])

    def account(self, scope: ConversationScope, turn_id: str, bundle: str, call: ModelCall) -> UsageRecord:
        """Price one call, count it in the running totals, and return its row (not stored yet)."""
        usage = call.usage
        cost = call_cost(self._price(scope, call.model), usage)
        at = call.at if call.at.tzinfo is not None else call.at.replace(tzinfo=UTC)
        self.totals.add(scope.tenant, scope.project, scope.user_id, at, counted_tokens(usage), cost)
        if cost is None and call.model not in self._unpriced_warned:
            self._unpriced_warned.add(call.model)
            log.warning(
                "model %s has no price in platform.models.prices of assembly.yaml: its calls' cost is unknown "
                "(recorded as null) and counts toward no cost budget",
                call.model,
            )
        return UsageRecord(
            scope=scope,
            turn_id=turn_id,
            bundle=bundle,
            model=call.model,
            purpose=call.purpose,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            cost_usd=cost,
            at=at,
        )

    def cost_of(self, scope: OwnerScope, model: str, usage: Usage) -> float | None:
        """What ``usage`` costs at the price of ``model`` (a ``provider:model`` label) in ``scope``; None when
        unpriced."""
        return call_cost(self._price(scope, model), usage)

    def _price(self, scope: OwnerScope, model: str) -> ModelPrice | None:
        """The price of ``model`` in ``scope``'s settings; None when they cannot be read (a reload took the scope
        away mid-turn): accounting never fails the turn it accounts for."""
        try:
            return self._models(scope.tenant, scope.project).price_of(model)
        except Exception:
            log.warning("no price table for %s/%s: the call's cost is unknown", scope.tenant, scope.project)
            return None

    async def _store_records(self, records: Sequence[UsageRecord]) -> None:
        try:
            await self._store.record_usage(records)
        except Exception:
            first = records[0]
            log.warning(
                "could not store the usage of %d model call(s) of turn %s", len(records), first.turn_id, exc_info=True
            )


class TurnUsageMeter:
    """One turn's :class:`~berth.runtime.metering.TurnMeter`: counts its calls, prices them, watches budgets."""

    __slots__ = ("_bundle", "_cost", "_ledger", "_records", "_turn_id", "_unpriced", "scope")

    def __init__(self, ledger: UsageLedger, scope: ConversationScope, turn_id: str, bundle: str) -> None:
        self._ledger = ledger
        self.scope = scope
        self._turn_id = turn_id
        self._bundle = bundle
        self._records: list[UsageRecord] = []
        self._cost = 0.0
        self._unpriced = False

    def model_called(self, call: ModelCall) -> None:
        """Price and count one call of the turn (kept until :meth:`UsageLedger.settle`)."""
        record = self._ledger.account(self.scope, self._turn_id, self._bundle, call)
        self._records.append(record)
        if record.cost_usd is None:
            self._unpriced = True
        else:
            self._cost += record.cost_usd

    def cost_usd(self) -> float | None:
        """The turn's cost so far, or None when one of its calls' models has no price."""
        return None if self._unpriced else self._cost

    def breach(self) -> BudgetBreach | None:
        """The budget of the turn's tenant, project or user that is used up, if any (after each round)."""
        exhausted = self._ledger.exhausted(self.scope)
        return exhausted.breach(during_turn=True) if exhausted is not None else None

    def take_records(self) -> list[UsageRecord]:
        """The calls not stored yet (and forget them: each is stored once)."""
        records, self._records = self._records, []
        return records
