"""A chart an ``exec.python`` program draws is shown in the web UI under the turn's answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import yaml
from web_ui_kit import REPO_ROOT, BerthHost, start_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.sandbox]

BUNDLE = REPO_ROOT / "tests" / "e2e" / "exec_probe_bundle"


@pytest.fixture(scope="module")
def exec_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """A host whose scripted model writes the probe bundle's chart program and then answers."""
    root = tmp_path_factory.mktemp("exec-host")
    call = {
        "action": "call_tool",
        "notes": "chart",
        "tool_call": {"tool_id": "exec.python", "params": {"purpose": "draw the chart", "outputs": ["chart.png"]}},
    }
    program = (BUNDLE / "chart_program.txt").read_text()
    script = {
        "repeat": True,
        "responses": [
            f"<channel:action>{json.dumps(call)}</channel:action><channel:code>{program}</channel:code>",
            '<channel:action>{"action": "complete"}</channel:action><channel:answer>Here it is.</channel:answer>',
        ],
    }
    (root / "script.yaml").write_text(yaml.safe_dump(script))
    descriptors = root / "descriptors"
    descriptors.mkdir()
    model = {"provider": "scripted", "model": str(root / "script.yaml")}
    tenants = {"default": {"projects": {"default": {}}}}
    files = {
        "assembly.yaml": {"platform": {"models": {"default": model}}, "tenants": tenants},
        "bundles.yaml": {"bundles": {"probe": {"source": {"path": str(BUNDLE)}}}},
        "bundles.secrets.yaml": {"bundles": {"probe": {"probe_key": "literal:probe-key-1234"}}},
        "gateway.yaml": {"auth": {"mode": "none"}},
    }  # fmt: skip
    for name, document in files.items():
        (descriptors / name).write_text(yaml.safe_dump(document))
    host = start_host(descriptors, root / "var", root / "berth.log", demo=False)
    yield host
    stop_host(host)


def test_the_chart_is_shown_under_the_answer(page: Page, exec_host: BerthHost) -> None:
    page.goto(exec_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    page.fill("#composer-input", "Chart it")
    page.press("#composer-input", "Enter")
    page.wait_for_selector("article.turn[data-state='completed'] .artifacts img[data-loaded='true']")
    image = page.locator("article.turn .artifacts img")
    assert image.get_attribute("alt") == "chart.png"
    assert page.evaluate("document.querySelector('.artifacts img').naturalWidth") == 4
    assert page.locator(".tool-card[data-tool-id='exec.python']").get_attribute("data-ok") == "true"
    assert "chart.png" in page.locator("article.turn .artifacts").inner_text()

    page.reload()  # reopened: the program, the card and the chart come back from the conversation
    page.wait_for_selector("body[data-ready='true']")
    page.locator("#conversation-list .conversation-item").first.click()
    page.wait_for_selector("article.turn[data-state='completed'] .artifacts img[data-loaded='true']")
    assert page.evaluate("document.querySelector('.artifacts img').naturalWidth") == 4
    assert page.locator(".tool-card[data-tool-id='exec.python']").get_attribute("data-ok") == "true"
    assert page.locator("article.turn figure.code-block code").count() == 1, "the program it ran"
