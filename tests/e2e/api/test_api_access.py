"""Auth, scoping and bad requests: every route refuses what it must, with a JSON error, storing nothing."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from api_stack import ApiStack, api_stack, write_script, write_stack_descriptors
from openapi_spec_validator import validate

from berth.config import ConfigError
from berth.turns.build import build_services

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hi!</channel:answer>'


async def a_finished_turn(stack: ApiStack) -> tuple[str, str]:
    conversation = await stack.conversation()
    started = await stack.start_turn(conversation, "hello")
    await stack.events(started["events_url"])
    return conversation, started["turn_id"]


async def test_requests_without_a_valid_key_are_refused(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
            response = await stack.client.get("/v1/acme/support/conversations", headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"


async def test_a_key_of_one_tenant_gets_404_for_another_on_every_route(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER] * 3, repeat=True) as stack:
        conversation, turn = await a_finished_turn(stack)
        base = f"/v1/acme/support/conversations/{conversation}"
        routes = [
            ("GET", "/v1/acme/support/conversations", None),
            ("POST", "/v1/acme/support/conversations", {}),
            ("GET", base, None),
            ("POST", f"{base}/turns", {"message": "x"}),
            ("GET", f"{base}/turns/{turn}/events", None),
            ("POST", f"{base}/turns/{turn}/cancel", None),
            ("POST", f"{base}/turns/{turn}/feedback", {"reaction": "ok"}),
            ("GET", f"{base}/files/fi:{turn}.outputs/x.txt", None),
            ("GET", "/v1/acme/support/bundles", None),
            ("GET", "/v1/acme/support/feedback?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z", None),
            ("GET", "/v1/acme/support/bundles/hello/ops/anything", None),
        ]
        for method, url, body in routes:
            response = await stack.client.request(method, url, json=body, headers=stack.auth("globex"))
            assert response.status_code == 404, (method, url, response.text)
            assert response.json()["error"]["code"] == "not_found"
        # the acme key covers only acme/support: another project of the same tenant is not found either
        other = await stack.client.get("/v1/acme/sales/conversations", headers=stack.auth("acme"))
        assert other.status_code == 404
        # and an admin of every tenant still sees only its own conversations
        admin_view = await stack.client.get(base, headers=stack.auth("admin"))
        assert admin_view.status_code == 404


async def test_admin_routes_need_the_admin_role(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        for method, url in (
            ("GET", "/v1/admin/bundles"),
            ("POST", "/v1/admin/bundles/hello/reload"),
            ("GET", "/v1/admin/workers"),
        ):
            refused = await stack.client.request(method, url, headers=stack.auth("acme"))
            assert refused.status_code == 403
            allowed = await stack.client.request(method, url, headers=stack.auth("admin"))
            assert allowed.status_code == 200, allowed.text
        reloaded = (await stack.client.post("/v1/admin/bundles/hello/reload", headers=stack.auth("admin"))).json()
        if stack.worker is None:  # embedded: this process reloads and answers with its outcome
            assert (reloaded["ok"], reloaded["generation"]) == (True, 3)
        else:  # distributed: the reload is broadcast to every process (the API and the worker)
            assert reloaded == {"bundle": "hello", "broadcast": True}
            for services in (stack.services, stack.worker):
                await until(lambda s=services: s.registry.current("hello").number == 3)
        bundles = (await stack.client.get("/v1/admin/bundles", headers=stack.auth("admin"))).json()
        assert bundles["bundles"][0]["generation"] == 3
        missing = await stack.client.post("/v1/admin/bundles/ghost/reload", headers=stack.auth("admin"))
        assert missing.status_code == 404


async def conversation_count(stack: ApiStack) -> int:
    listing = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
    return len(listing.json()["items"])


async def test_bad_requests_get_the_right_status_and_change_nothing(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER] * 2, repeat=True) as stack:
        conversation, turn = await a_finished_turn(stack)
        turns_url = f"/v1/acme/support/conversations/{conversation}/turns"
        before = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        count = await conversation_count(stack)
        cases = [
            ("unknown tenant", "POST", "/v1/initech/main/conversations", {"json": {}}, 404, "not_found"),
            (
                "bad JSON",
                "POST",
                turns_url,
                {"content": b"{not json", "headers": {"content-type": "application/json"}},
                422,
                "invalid_request",
            ),
            ("unknown field", "POST", turns_url, {"json": {"message": "x", "mesage": "y"}}, 422, "invalid_request"),
            (
                "wrong content type",
                "POST",
                turns_url,
                {"content": b"message=x", "headers": {"content-type": "application/x-www-form-urlencoded"}},
                415,
                "unsupported_media_type",
            ),
            (
                "30 MB body",
                "POST",
                turns_url,
                {"content": b"x" * (30 * 1024 * 1024), "headers": {"content-type": "application/json"}},
                413,
                "payload_too_large",
            ),
            (
                "unknown bundle",
                "POST",
                turns_url,
                {"json": {"message": "x", "bundle": "ghost"}},
                404,
                "bundle_not_found",
            ),
            ("reused turn id", "POST", turns_url, {"json": {"message": "x", "turn_id": turn}}, 409, "turn_exists"),
            (
                "multipart without a message",
                "POST",
                turns_url,
                {"files": {"notes": ("notes.txt", b"hello", "text/plain")}},
                422,
                "invalid_request",
            ),
            ("bad conversation id", "GET", "/v1/acme/support/conversations/..%2F..%2Fetc", {}, 404, "not_found"),
            (
                "traversal in a file path",
                "GET",
                f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.outputs/%2E%2E/%2E%2E/x",
                {},
                400,
                "unsafe_path",
            ),
        ]
        for name, method, url, kwargs, status, code in cases:
            headers = {**stack.auth(), **kwargs.pop("headers", {})}
            response = await stack.client.request(method, url, headers=headers, **kwargs)
            assert response.status_code == status, (name, response.status_code, response.text[:300])
            assert response.json()["error"]["code"] == code, (name, response.text[:300])
            assert "Traceback" not in response.text
        after = (await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())).json()
        assert after == before
        assert await conversation_count(stack) == count


@pytest.mark.parametrize("path", ["../../../etc/passwd", "..%2F..%2Fpyproject.toml", "%2e%2e/%2e%2e/x", "nope.html"])
async def test_widget_paths_never_leave_the_widget_folder(tmp_path: Path, path: str) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        listing = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth())).json()
        url = listing[0]["widgets"][0]["url"]
        ok = await stack.client.get(url)
        assert ok.status_code == 200
        assert "Greeter" in ok.text
        response = await stack.client.get(f"{url}{path}")
        assert response.status_code == 404
        assert "root:" not in response.text


async def test_ops_endpoints_and_a_valid_openapi_document(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        await a_finished_turn(stack)
        assert (await stack.client.get("/healthz")).json() == {"status": "ok"}
        ready = await stack.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"]["bundles"] == ["hello"]
        if stack.worker is not None:  # distributed: the services every process shares answer
            services = ready.json()["checks"]["services"]
            assert set(services) == {"postgres", "redis", "artifacts"}
            assert services["artifacts"]["detail"].startswith("local: folder "), services
            assert all(service["ok"] for service in services.values()), services
        metrics = (await stack.client.get("/metrics", headers=stack.auth("admin"))).text
        for name in (
            "berth_turns_total",
            "berth_rounds_total",
            "berth_tokens_total",
            "berth_bundle_reloads_total",
            "berth_http_request_duration_seconds_bucket",
        ):
            assert name in metrics
        # the process that ran the turn counts it: with distributed storage, the worker
        ran_it = stack.worker.metrics.render().decode() if stack.worker else metrics
        assert 'berth_turns_total{outcome="completed",tenant="acme"} 1.0' in ran_it
        document = (await stack.client.get("/openapi.json")).json()
        validate(document)
        assert "/v1/{tenant}/{project}/conversations/{conversation_id}/turns" in document["paths"]
        assert json.dumps(document)


async def test_me_says_what_a_key_covers(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        me = (await stack.client.get("/v1/me", headers=stack.auth("acme"))).json()
        assert me == {
            "key_id": "acme-user",
            "tenant": "acme",
            "projects": ["support"],
            "roles": ["user"],
            "scopes": ["acme/support"],
        }
        assert (await stack.client.get("/v1/me")).status_code == 401


async def test_auth_none_serves_the_local_user(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], auth="none") as stack:
        created = await stack.client.post("/v1/acme/support/conversations", json={})
        assert created.status_code == 201
        listing = await stack.client.get("/v1/globex/research/conversations")
        assert listing.status_code == 200


async def test_a_host_whose_scope_names_an_embedder_not_installed_refuses_to_start(tmp_path: Path) -> None:
    script = write_script(tmp_path / "script.yaml", ["unused"])
    descriptors = write_stack_descriptors(tmp_path / "descriptors", script)
    assembly = yaml.safe_load((descriptors / "assembly.yaml").read_text())
    assembly["tenants"]["globex"]["embedder"] = {"provider": "word2vec"}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    services = build_services(descriptors, var_root=tmp_path / "var")
    with pytest.raises(ConfigError) as refused:
        await services.start()
    await services.stop()
    assert refused.value.code == "embedder_unknown"
    assert "globex/research" in str(refused.value) and "'word2vec'" in str(refused.value)


async def test_a_serving_host_freezes_its_startup_heap_and_still_serves(tmp_path: Path) -> None:
    """``berth run`` hides what startup made from the cyclic GC, so full collections walk only what serving made."""
    assert gc.get_freeze_count() == 0
    try:
        async with api_stack(tmp_path, [], govern_heap=True) as stack:
            frozen = gc.get_freeze_count()
            response = await stack.client.get("/healthz")
        assert response.status_code == 200
        assert frozen > 10_000  # modules, models, the host and its bundles
    finally:
        gc.unfreeze()


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds (checked every 20 ms); fail after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)
