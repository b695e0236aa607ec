"""Prometheus metrics of an API process (``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from berth.runtime.events import TurnEvent
from berth.runtime.loop import TurnResult


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
        self.http = Histogram(
            "berth_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=self.registry,
        )

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

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
