"""An admin key of one tenant is that tenant's admin, not a global one: ``/v1/admin/*`` and ``/metrics`` (the API's
and a worker health port's) show and act on the bundles, turns and series of its tenant only."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from api_stack import ApiStack, api_stack, free_port, key_hash
from other_bundle import TENANT_BUNDLES, both_bundles

from berth.distributed.health import WorkerHealthServer
from berth.distributed.worker import TurnWorker, WorkerSettings

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hi!</channel:answer>'
ACME_ADMIN = {"id": "acme-ops", "sha256": key_hash("acme-admin-key"), "tenant": "acme", "roles": ["admin", "user"]}
SUPPORT_ADMIN = {
    "id": "support-ops",
    "sha256": key_hash("support-admin-key"),
    "tenant": "acme",
    "projects": ["support"],
    "roles": ["admin"],
}
TENANT_ADMIN = {"Authorization": "Bearer acme-admin-key"}
PROJECT_ADMIN = {"Authorization": "Bearer support-admin-key"}


def scoped_stack(tmp_path: Path, responses: list[str]) -> object:
    """Acme enables ``hello``, globex ``orbit``; acme has a tenant admin key and a project admin key."""
    return api_stack(
        tmp_path,
        responses,
        repeat=True,
        bundles=both_bundles(tmp_path),
        tenant_bundles=TENANT_BUNDLES,
        extra_keys=[ACME_ADMIN, SUPPORT_ADMIN],
    )


async def one_turn_each(stack: ApiStack) -> None:
    """A finished turn of acme and one of globex, so that the metrics name both tenants."""
    for who, tenant, project in (("acme", "acme", "support"), ("globex", "globex", "research")):
        conversation = await stack.conversation(who, tenant, project)
        started = await stack.start_turn(conversation, "hello", who, tenant, project)
        await stack.wait_for(started["events_url"], "turn.completed", who)


async def test_a_tenant_admin_key_sees_and_reloads_only_its_tenants_bundles(tmp_path: Path) -> None:
    async with scoped_stack(tmp_path, [ANSWER]) as stack:  # type: ignore[attr-defined]
        everything = (await stack.client.get("/v1/admin/bundles", headers=stack.auth("admin"))).json()
        assert {"hello", "orbit"} <= {row["id"] for row in everything["bundles"]}
        for headers in (TENANT_ADMIN, PROJECT_ADMIN):
            mine = await stack.client.get("/v1/admin/bundles", headers=headers)
            assert mine.status_code == 200, mine.text
            assert [row["id"] for row in mine.json()["bundles"]] == ["hello"]
            assert "orbit" not in mine.text

            refused = await stack.client.post("/v1/admin/bundles/orbit/reload", headers=headers)
            assert refused.status_code == 404  # as a bundle that does not exist: it never says which
            assert refused.json()["error"]["code"] == "not_found"
            assert (await stack.client.post("/v1/admin/bundles/ghost/reload", headers=headers)).status_code == 404

            workers = await stack.client.get("/v1/admin/workers", headers=headers)
            assert workers.status_code == 200, workers.text
            assert workers.json()["workers"], workers.text
            assert all(list(report["bundles"]) == ["hello"] for report in workers.json()["workers"]), workers.text
        assert stack.services.registry.current("orbit").number == 1  # never reloaded by acme's keys
        reloaded = await stack.client.post("/v1/admin/bundles/hello/reload", headers=TENANT_ADMIN)
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["bundle"] == "hello"
        global_workers = (await stack.client.get("/v1/admin/workers", headers=stack.auth("admin"))).json()
        assert any("orbit" in report["bundles"] for report in global_workers["workers"])
        if stack.worker is None:  # embedded: the unfinished turns are not the API's to list
            for method, url in (
                ("GET", "/v1/admin/turns"),
                ("POST", "/v1/admin/turns/turn_x/end"),
                ("POST", "/v1/admin/turns/turn_x/retry"),
            ):
                answer = await stack.client.request(method, url, headers=TENANT_ADMIN)
                assert answer.status_code == 409, answer.text


async def test_a_tenant_admin_key_reads_only_its_tenants_metrics(tmp_path: Path) -> None:
    async with scoped_stack(tmp_path, [ANSWER]) as stack:  # type: ignore[attr-defined]
        await one_turn_each(stack)
        counted = stack.worker or stack.services  # the process that ran the turns counts them
        assert 'tenant="globex"' in counted.metrics.render().decode()
        every = await stack.client.get("/metrics", headers=stack.auth("admin"))
        assert every.status_code == 200
        assert "berth_http_request_duration_seconds" in every.text
        mine = await stack.client.get("/metrics", headers=TENANT_ADMIN)
        assert mine.status_code == 200, mine.text
        assert mine.headers["content-type"].startswith("text/plain")
        assert "globex" not in mine.text
        assert "berth_http_request_duration_seconds" not in mine.text  # no tenant label: every tenant's requests
        if stack.worker is None:  # the API process ran the turns
            assert 'berth_turns_total{outcome="completed",tenant="acme"} 1.0' in mine.text
            assert 'tenant="globex"' in every.text
        limited = await stack.client.get("/metrics", headers=PROJECT_ADMIN)
        assert limited.status_code == 403  # metrics are counted per tenant, not per project
        assert limited.json()["error"]["code"] == "forbidden"
        assert "acme" not in limited.text
        assert (await stack.client.get("/metrics", headers=stack.auth("acme"))).status_code == 403

        if stack.worker is None:
            return
        # a worker's health port answers /metrics by the same rule
        worker = TurnWorker(stack.worker, WorkerSettings(concurrency=1), name="probe")
        port = free_port()
        health = WorkerHealthServer(worker, host="127.0.0.1", port=port)
        await health.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                all_series = await client.get("/metrics", headers=stack.auth("admin"))
                assert 'berth_turns_total{outcome="completed",tenant="globex"} 1.0' in all_series.text
                acme_series = await client.get("/metrics", headers=TENANT_ADMIN)
                assert acme_series.status_code == 200, acme_series.text
                assert 'berth_turns_total{outcome="completed",tenant="acme"} 1.0' in acme_series.text
                assert "globex" not in acme_series.text
                assert "berth_worker_slots" not in acme_series.text
                assert (await client.get("/metrics", headers=PROJECT_ADMIN)).status_code == 403
        finally:
            await health.aclose()
