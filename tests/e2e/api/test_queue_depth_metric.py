"""``berth_turn_queue_depth``, what the Helm chart's worker autoscaling follows (KEDA's ``metrics-api`` trigger on the
API Service's ``/metrics``, or an HPA through prometheus-adapter): the turns of the shared queue not yet committed,
as an API process's ``/metrics`` and a worker's health port report it to a global admin key, in the Prometheus text
those readers parse (one unlabelled gauge sample)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from api_stack import ApiStack, api_stack, free_port
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate
from prometheus_client.parser import text_string_to_metric_families

from berth.distributed.health import WorkerHealthServer
from berth.distributed.worker import TurnWorker, WorkerSettings

pytestmark = [
    pytest.mark.usefixtures("clean_berth_env"),
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True),
]

METRIC = "berth_turn_queue_depth"


def queue_depth(exposition: str) -> float:
    """The value a metrics-api trigger with ``valueLocation: berth_turn_queue_depth`` reads."""
    [family] = [family for family in text_string_to_metric_families(exposition) if family.name == METRIC]
    assert family.type == "gauge"
    [sample] = family.samples
    assert sample.labels == {}, "every process reports the same shared queue: no label tells them apart"
    return float(sample.value)


async def depths(stack: ApiStack, health: httpx.AsyncClient) -> tuple[float, float]:
    """The depth the API's /metrics and the worker health port's /metrics report, read as a scraper would."""
    api = await stack.client.get("/metrics", headers=stack.auth("admin"))
    assert api.status_code == 200, api.text
    worker = await health.get("/metrics", headers=stack.auth("admin"))
    assert worker.status_code == 200, worker.text
    return queue_depth(api.text), queue_depth(worker.text)


async def until_depth(stack: ApiStack, health: httpx.AsyncClient, expected: float, timeout_s: float = 30.0) -> None:
    """Wait until both report ``expected`` (a committed turn leaves the queue just after its last event)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (seen := await depths(stack, health)) != (expected, expected):
        assert asyncio.get_running_loop().time() < deadline, f"queue depth {seen}, expected {expected} on both"
        await asyncio.sleep(0.05)


@pytest.mark.usefixtures("storage_kind")
async def test_the_queue_depth_counts_the_turns_running_until_they_are_committed(tmp_path: Path) -> None:
    close_gate()
    # two turns each call gate.hold first, then answer once the gate opens
    async with api_stack(tmp_path, [HOLD, HOLD, ANSWER, ANSWER], bundles=gate_bundles(tmp_path)) as stack:
        assert stack.worker is not None
        probe = TurnWorker(stack.worker, WorkerSettings(concurrency=1), name="probe")
        port = free_port()
        health = WorkerHealthServer(probe, host="127.0.0.1", port=port)
        await health.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                assert await depths(stack, client) == (0.0, 0.0)
                started = []
                for _ in range(2):
                    conversation = await stack.conversation()
                    started.append(await stack.start_turn(conversation, "hold, then answer"))
                for turn in started:
                    await stack.wait_for(turn["events_url"], "tool.call")
                # both are taken by the worker and held: running, not committed
                assert await depths(stack, client) == (2.0, 2.0)
                open_gate()
                for turn in started:
                    await stack.wait_for(turn["events_url"], "turn.completed")
                await until_depth(stack, client, 0.0)
        finally:
            open_gate()
            await health.aclose()
