"""The app's one middleware layer (``berth.api.edge``): CORS, hardening headers, latency samples and the limits,
in the order the separate layers had (header limits: tests/e2e/fuzz/test_hostile_inputs.py; body limits:
test_api_admission.py; hardening headers by path: test_security_headers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_stack import api_stack

pytestmark = pytest.mark.usefixtures("clean_berth_env")

DONE = ['<channel:action>{"action": "complete", "notes": ""}</channel:action><channel:answer>ok</channel:answer>']
UI_ORIGIN = "http://localhost:8000"
"""``gateway.yaml``'s default ``cors.allow_origins``."""
SMALL_BODIES = {"limits": {"default": {"max_body_bytes": 1000}}}


def latency_count(metrics: str, method: str, route: str, status: int) -> float:
    """The ``berth_http_request_duration_seconds`` sample count of one method, route template and status."""
    labels = f'method="{method}",route="{route}",status="{status}"'
    for line in metrics.splitlines():
        if line.startswith("berth_http_request_duration_seconds_count{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_request_without_an_origin_varies_on_origin_and_carries_the_hardening_headers(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        answer = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
        assert answer.status_code == 200
        assert answer.headers.get_list("vary") == ["Origin"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in answer.headers


async def test_an_allowed_origin_is_answered_with_cors_headers_and_a_foreign_one_is_not(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        allowed = await stack.client.get(
            "/v1/acme/support/conversations", headers={**stack.auth(), "Origin": UI_ORIGIN}
        )
        assert allowed.headers["access-control-allow-origin"] == UI_ORIGIN
        assert allowed.headers["x-content-type-options"] == "nosniff"
        foreign = await stack.client.get(
            "/v1/acme/support/conversations", headers={**stack.auth(), "Origin": "http://elsewhere.example"}
        )
        assert "access-control-allow-origin" not in foreign.headers
        assert foreign.headers["x-content-type-options"] == "nosniff"


async def test_a_preflight_is_answered_before_the_routes_with_the_hardening_headers_and_no_latency_sample(
    tmp_path: Path,
) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        path = "/v1/acme/support/conversations"
        preflight = {"Origin": UI_ORIGIN, "Access-Control-Request-Method": "POST"}
        answer = await stack.client.options(path, headers=preflight)
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == UI_ORIGIN
        assert "POST" in answer.headers["access-control-allow-methods"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        metrics = (await stack.client.get("/metrics", headers=stack.auth("admin"))).text
        assert latency_count(metrics, "OPTIONS", "unmatched", 200) == 0
        assert latency_count(metrics, "OPTIONS", "/v1/{tenant}/{project}/conversations", 200) == 0


async def test_every_answer_from_the_routes_and_the_body_limit_is_sampled_by_route_and_status(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE, gateway=SMALL_BODIES) as stack:
        route = "/v1/{tenant}/{project}/conversations"
        for _ in range(3):
            listed = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
            assert listed.status_code == 200
        too_large = await stack.client.post(
            "/v1/acme/support/conversations", json={"title": "x" * 5000}, headers=stack.auth()
        )
        assert too_large.status_code == 413
        assert too_large.headers["x-content-type-options"] == "nosniff"
        metrics = (await stack.client.get("/metrics", headers=stack.auth("admin"))).text
        assert latency_count(metrics, "GET", route, 200) == 3
        assert latency_count(metrics, "POST", "unmatched", 413) == 1  # refused before any route matched


async def test_a_streamed_turn_passes_through_whole_and_is_sampled_once(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        conversation = await stack.conversation()
        path = f"/v1/acme/support/conversations/{conversation}/turns"
        headers = {**stack.auth(), "Accept": "text/event-stream"}
        async with stack.client.stream("POST", path, json={"message": "hi"}, headers=headers) as response:
            body = (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "event: turn.completed" in body
        metrics = (await stack.client.get("/metrics", headers=stack.auth("admin"))).text
        template = "/v1/{tenant}/{project}/conversations/{conversation_id}/turns"
        assert latency_count(metrics, "POST", template, 200) == 1
