"""Browser hardening headers on every UI, static and widget response (who may read ``/metrics``:
test_metrics_access.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from api_stack import api_stack

from berth.api.routes.ops import STATIC
from berth.api.security_headers import UI_POLICY, WIDGET_POLICY

pytestmark = pytest.mark.usefixtures("clean_berth_env")

DONE = ['<channel:action>{"action": "complete", "notes": ""}</channel:action><channel:answer>ok</channel:answer>']


def test_the_ui_policy_needs_no_inline_script_and_frames_only_its_own_widgets() -> None:
    directives = dict(part.strip().split(" ", 1) for part in UI_POLICY.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert directives["base-uri"] == "'none'"
    assert "'unsafe-inline'" not in UI_POLICY and "'unsafe-eval'" not in UI_POLICY
    page = (STATIC / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="/static/app.js">']
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", page)  # no inline event handler
    assert not re.search(r"<style|\sstyle\s*=", page)  # no inline style


async def test_the_ui_and_every_static_file_carry_a_strict_policy(tmp_path: Path) -> None:
    static_files = sorted(f"/static/{file.name}" for file in STATIC.iterdir() if file.is_file())
    assert {"/static/app.js", "/static/index.html", "/static/style.css"} <= set(static_files)
    async with api_stack(tmp_path, DONE) as stack:
        for method, path in [
            ("GET", "/"),
            ("HEAD", "/static/app.js"),
            *(("GET", p) for p in static_files),
            ("GET", "/static/nope"),
        ]:
            answer = await stack.client.request(method, path)
            assert answer.status_code == (404 if path == "/static/nope" else 200), path
            assert answer.headers["content-security-policy"] == UI_POLICY, path
            assert answer.headers["x-content-type-options"] == "nosniff", path
            assert answer.headers["referrer-policy"] == "no-referrer", path
            assert answer.headers["x-frame-options"] == "DENY", path


async def test_every_widget_response_is_sandboxed_even_errors_and_redirects(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        listing = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth())).json()
        url = listing[0]["widgets"][0]["url"]  # /v1/acme/support/bundles/hello/widgets/greeter/<ticket>/
        paths = {
            url: 200,
            url + "index.html": 200,
            url.rstrip("/"): 307,  # to the trailing slash
            url + "missing.js": 404,
            url.replace("/greeter/", "/nope/") + "x": 404,
            url.replace("/hello/", "/nope/"): 404,
            "/v1/acme/support/bundles/hello/widgets/greeter/forged/": 404,
        }
        for path, status in paths.items():
            answer = await stack.client.get(path)
            assert answer.status_code == status, path
            assert answer.headers["content-security-policy"] == WIDGET_POLICY, path
            assert answer.headers["content-security-policy"].startswith("sandbox allow-scripts")
            assert "allow-same-origin" not in answer.headers["content-security-policy"]
            assert answer.headers["x-content-type-options"] == "nosniff", path
            assert answer.headers["referrer-policy"] == "no-referrer", path


async def test_api_answers_are_nosniff(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        answer = await stack.client.get("/healthz")
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in answer.headers
