"""Browser hardening headers on every UI, static and widget response; who may read ``/metrics``."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_stack import api_stack

from berth.api.security_headers import UI_POLICY, WIDGET_POLICY

pytestmark = pytest.mark.usefixtures("clean_berth_env")

DONE = ['<channel:action>{"action": "complete", "notes": ""}</channel:action><channel:answer>ok</channel:answer>']


async def test_the_ui_and_its_static_files_carry_a_strict_policy(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        for path in ("/", "/static/app.js", "/static/style.css"):
            answer = await stack.client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-security-policy"] == UI_POLICY
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
            assert answer.headers["x-frame-options"] == "DENY"
        assert "'unsafe-inline'" not in UI_POLICY and "frame-ancestors 'none'" in UI_POLICY


async def test_every_widget_response_is_sandboxed_even_errors(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        for path in ("/b/hello/widgets/greeter/", "/b/hello/widgets/greeter/index.html", "/b/hello/widgets/nope/x"):
            answer = await stack.client.get(path)
            assert answer.headers["content-security-policy"] == WIDGET_POLICY, path
            assert answer.headers["content-security-policy"].startswith("sandbox allow-scripts")
            assert answer.headers["x-content-type-options"] == "nosniff"


async def test_api_answers_are_nosniff(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        answer = await stack.client.get("/healthz")
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in answer.headers


async def test_metrics_need_an_admin_key_by_default(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        anonymous = await stack.client.get("/metrics")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"
        tenant = await stack.client.get("/metrics", headers=stack.auth("acme"))
        assert tenant.status_code == 403
        assert "acme" not in tenant.text
        admin = await stack.client.get("/metrics", headers=stack.auth("admin"))
        assert admin.status_code == 200
        assert "berth_turns_running" in admin.text


async def test_metrics_can_be_opened_in_assembly_yaml(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE, platform={"metrics": {"access": "open"}}) as stack:
        assert (await stack.client.get("/metrics")).status_code == 200
