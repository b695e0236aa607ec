"""Prometheus metrics of an API process (``GET /metrics``) and of a worker (its health port's ``/metrics``).

In distributed mode a worker also counts what happens to the queued turns it takes (reclaims, takeovers, requeues,
attempts, retries, turns that could not be run, time in the queue); the turn runner and the store report through
:meth:`Metrics.turn_attempt`, :meth:`Metrics.turn_retry`, :meth:`Metrics.turn_unrunnable` and
:meth:`Metrics.store_retry`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from berth.runtime.events import TurnEvent
from berth.runtime.loop import TurnResult
from berth.tools.threads import ToolThreadsStatus


class Metrics:
    """Counters and histograms in a registry of their own (several apps may live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.turns = Counter("berth_turns", "Turns finished, by outcome", ["tenant", "outcome"], registry=self.registry)
        self.rounds = Counter("berth_rounds", "Rounds run", ["tenant"], registry=self.registry)
        self.tokens = Counter("berth_tokens", "Model tokens by kind", ["tenant", "kind"], registry=self.registry)
        self.tool_calls = Counter(
            "berth_tool_calls", "Tool calls by tool and result", ["tool", "ok"], registry=self.registry
        )
        self.reloads = Counter(
            "berth_bundle_reloads", "Bundle reload transactions", ["bundle", "ok"], registry=self.registry
        )
        self.admission_rejections = Counter(
            "berth_admission_rejections",
            "Requests and turns refused by gateway.yaml's limits (rate, concurrent_turns, backpressure)",
            ["tenant", "reason"],
            registry=self.registry,
        )
        self.turns_running = Gauge("berth_turns_running", "Turns running in this worker", registry=self.registry)
        self.turns_queued = Gauge(
            "berth_turns_queued", "Turns admitted and waiting for a slot in this worker", registry=self.registry
        )
        self.turn_queue_depth = Gauge(
            "berth_turn_queue_depth",
            "Distributed mode: turns in the shared queue, waiting or running, not yet committed (what worker "
            "autoscaling follows)",
            registry=self.registry,
        )
        self._queue_metrics()
        self._tool_thread_metrics()
        self._resident_metrics()
        self.http = Histogram(
            "berth_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=self.registry,
        )

    def _queue_metrics(self) -> None:
        """Distributed mode: the turn queue as the workers see it (each worker counts what it did)."""
        registry = self.registry
        self.turn_queue_wait = Histogram(
            "berth_turn_queue_wait_seconds",
            "Distributed mode: how long a turn waited in the queue, from being queued to a worker taking it",
            ["tenant"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=registry,
        )
        self.oldest_unfinished_turn_age = Gauge(
            "berth_oldest_unfinished_turn_age_seconds",
            "Distributed mode: age of the oldest turn the queue holds, waiting or running (0: none)",
            registry=registry,
        )
        self.worker_slots = Gauge(
            "berth_worker_slots",
            "Distributed mode: turns this worker runs at once at most (--concurrency, capped by "
            "backpressure.max_inflight_turns_per_worker)",
            registry=registry,
        )
        self.turn_reclaims = Counter(
            "berth_turn_reclaims",
            "Queue entries this worker took over because their worker stopped renewing them (it died or stalled)",
            ["tenant"],
            registry=registry,
        )
        self.turn_takeovers = Counter(
            "berth_turn_takeovers",
            "Turns this worker ran to their end after taking their entry over",
            ["tenant"],
            registry=registry,
        )
        self.turn_requeues = Counter(
            "berth_turn_requeues",
            "Unfinished turns the reconciler queued again because the queue had lost them (Redis restarted, or an "
            "API process died before queueing)",
            ["tenant"],
            registry=registry,
        )
        self.turn_duplicate_entries = Counter(
            "berth_turn_duplicate_entries",
            "Queue entries read for a turn this worker was running already (settled with it, never run twice)",
            ["tenant"],
            registry=registry,
        )
        self.turn_attempts = Counter(
            "berth_turn_attempts",
            "Attempts at queued turns: claims that went on to run the turn",
            ["tenant"],
            registry=registry,
        )
        self.turn_retries = Counter(
            "berth_turn_retries",
            "Attempts at queued turns that failed and left the turn to a next attempt after the lease",
            ["tenant"],
            registry=registry,
        )
        self.turns_unrunnable = Counter(
            "berth_turns_unrunnable",
            "Queued turns given up on without running them to their end, by reason (e.g. poisoned: out of attempts)",
            ["tenant", "reason"],
            registry=registry,
        )
        self.store_retries = Counter(
            "berth_store_retries",
            "Store operations retried after a lost connection or an unavailable server",
            ["operation"],
            registry=registry,
        )

    def _resident_metrics(self) -> None:
        """The idle conversations kept in memory for their next turn (``platform.resident_conversations``)."""
        registry = self.registry
        self.resident_conversations = Gauge(
            "berth_resident_conversations", "Idle conversations kept in memory for their next turn", registry=registry
        )
        self.resident_bytes = Gauge(
            "berth_resident_conversations_bytes",
            "What the idle conversations kept in memory hold, as estimated from their size",
            registry=registry,
        )
        self.resident_budget_bytes = Gauge(
            "berth_resident_conversations_budget_bytes",
            "platform.resident_conversations.max_mb, in bytes",
            registry=registry,
        )
        self.resident_dropped = Counter(
            "berth_resident_conversations_dropped",
            "Idle conversations dropped from memory for the budget (their next turn reads them from the store)",
            registry=registry,
        )
        self._resident_dropped_seen = 0

    def observe_resident(self, conversations: int, held: int, budget: int, dropped: int) -> None:
        """Set the ``berth_resident_conversations*`` gauges, and advance the dropped counter to ``dropped`` (at a
        scrape)."""
        self.resident_conversations.set(conversations)
        self.resident_bytes.set(held)
        self.resident_budget_bytes.set(budget)
        self.resident_dropped.inc(max(dropped - self._resident_dropped_seen, 0))
        self._resident_dropped_seen = max(dropped, self._resident_dropped_seen)

    def _tool_thread_metrics(self) -> None:
        """The bundles' sync tool threads, per bundle and tenant (:mod:`berth.tools.threads`), read at each scrape."""
        registry, labels = self.registry, ["bundle", "tenant"]
        self.tool_threads_busy = Gauge(
            "berth_tool_threads_busy", "Threads a bundle's sync tools hold for a tenant", labels, registry=registry
        )
        self.tool_threads_stuck = Gauge(
            "berth_tool_threads_stuck",
            "Threads whose call timed out (or was cancelled) and that have not returned",
            labels,
            registry=registry,
        )
        self.tool_threads_degraded = Gauge(
            "berth_tool_threads_degraded",
            "1 while a bundle's stuck threads reach platform.tool_threads.degraded_at for a tenant: its sync tool "
            "calls are refused with tool_pool_exhausted",
            labels,
            registry=registry,
        )
        self.tool_calls_stuck = Counter(
            "berth_tool_calls_stuck", "Sync tool calls whose thread outlived their caller", labels, registry=registry
        )
        self.tool_calls_refused = Counter(
            "berth_tool_calls_refused",
            "Sync tool calls refused with tool_pool_exhausted (their bundle degraded for the tenant)",
            labels,
            registry=registry,
        )
        self._tool_totals: dict[tuple[str, str], tuple[int, int]] = {}

    def observe_tool_threads(self, statuses: Iterable[ToolThreadsStatus]) -> None:
        """Set the ``berth_tool_threads_*`` gauges from the pools, and advance the counters by what they counted
        since the last scrape."""
        for status in statuses:
            key = (status.bundle_id, status.tenant)
            self.tool_threads_busy.labels(*key).set(status.busy)
            self.tool_threads_stuck.labels(*key).set(status.stuck)
            self.tool_threads_degraded.labels(*key).set(1 if status.degraded else 0)
            stuck_seen, refused_seen = self._tool_totals.get(key, (0, 0))
            self.tool_calls_stuck.labels(*key).inc(status.stuck_total - stuck_seen)
            self.tool_calls_refused.labels(*key).inc(status.refused_total - refused_seen)
            self._tool_totals[key] = (status.stuck_total, status.refused_total)

    def turn_attempt(self, tenant: str) -> None:
        """Count one attempt at a queued turn of ``tenant`` (a claim that goes on to run it)."""
        self.turn_attempts.labels(tenant=tenant).inc()

    def turn_retry(self, tenant: str) -> None:
        """Count one failed attempt at a queued turn of ``tenant`` that leaves it to a next attempt."""
        self.turn_retries.labels(tenant=tenant).inc()

    def turn_unrunnable(self, tenant: str, reason: str) -> None:
        """Count one queued turn of ``tenant`` given up on for ``reason`` (e.g. ``poisoned``)."""
        self.turns_unrunnable.labels(tenant=tenant, reason=reason).inc()

    def store_retry(self, operation: str) -> None:
        """Count one retry of a store ``operation`` (a transaction tried again on a fresh connection)."""
        self.store_retries.labels(operation=operation).inc()

    def observe_event(self, event: TurnEvent, tenant: str) -> None:
        """Count tool results as they stream."""
        if event.type == "tool.result":
            self.tool_calls.labels(
                tool=str(event.data.get("tool_id")), ok=str(bool(event.data.get("ok"))).lower()
            ).inc()

    def observe_result(self, result: TurnResult, tenant: str) -> None:
        """Count a finished turn, its rounds and its tokens."""
        self.turns.labels(tenant=tenant, outcome=result.outcome).inc()
        self.rounds.labels(tenant=tenant).inc(result.rounds)
        usage = result.usage
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_input_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
        ):
            self.tokens.labels(tenant=tenant, kind=kind).inc(value)

    def render(self, tenant: str | None = None) -> bytes:
        """The Prometheus text exposition: every series, or with ``tenant`` only the series labelled with that
        tenant (what a tenant's admin key reads; series without a ``tenant`` label mix every tenant's work)."""
        if tenant is None:
            return generate_latest(self.registry)
        return generate_latest(TenantSeries(self.registry, tenant))


class TenantSeries:
    """A collector that yields the metric families of ``registry`` with only the samples labelled ``tenant``
    (families left without a sample are left out)."""

    def __init__(self, registry: CollectorRegistry, tenant: str) -> None:
        self._registry = registry
        self._tenant = tenant

    def collect(self) -> Iterator[Metric]:
        """The tenant's samples, family by family."""
        for family in self._registry.collect():
            samples = [sample for sample in family.samples if sample.labels.get("tenant") == self._tenant]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept
