"""A worker's health port (``berth worker --health-port``): liveness, readiness with the shared services, the turn
metrics it counts, and a clean exit on SIGTERM (what an orchestrator's probes and stop rely on)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest
from distributed_cluster import cluster, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


async def _until_ready(url: str, timeout_s: float = 60) -> httpx.Response:
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return response
            except httpx.TransportError:
                pass
            assert asyncio.get_running_loop().time() < deadline, f"{url} never answered 200"
            await asyncio.sleep(0.2)


async def test_worker_health_port_reports_liveness_readiness_and_turn_metrics(tmp_path: Path) -> None:
    port = free_port()
    async with cluster(tmp_path, workers=0) as running:
        name = running.start_worker("--health-port", str(port), "--health-host", "127.0.0.1")
        ready = (await _until_ready(f"http://127.0.0.1:{port}/readyz")).json()
        assert ready["ready"] is True
        assert {"postgres", "redis"} <= set(ready["checks"]["services"])
        assert ready["checks"]["worker"]["name"] == name
        assert ready["checks"]["bundles"] == ["fault"]

        conversation = await running.conversation()
        started = await running.start_turn(conversation)
        kind, _ = await running.ending(started["events_url"])
        assert kind == "turn.completed"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            live = await client.get("/healthz")
            assert live.status_code == 200
            assert live.json()["status"] == "ok"
            metrics = (await client.get("/metrics")).text  # auth mode none: the admin rule lets it through
            assert 'berth_turns_total{outcome="completed",tenant="acme"} 1.0' in metrics
            assert "berth_turn_queue_depth 0.0" in metrics

        process = running.workers.pop(name)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 30) == 0
        with pytest.raises(httpx.TransportError):
            async with httpx.AsyncClient(timeout=2) as client:
                await client.get(f"http://127.0.0.1:{port}/healthz")
