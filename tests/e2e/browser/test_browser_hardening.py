"""The web UI under its Content-Security-Policy, and widgets that can never reach the UI's origin."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

pytestmark = pytest.mark.browser


@pytest.fixture
def strict_page(browser: Browser) -> Iterator[Page]:
    """A page with the site's Content-Security-Policy enforced (the shared ``page`` fixture bypasses it)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def test_the_ui_works_under_its_policy_without_a_single_violation(strict_page: Page, keyed_host: BerthHost) -> None:
    page = strict_page
    refused: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            refused.append(message.text)

    page.on("console", watch)
    sign_in(page, keyed_host, "support")
    page.select_option("#bundle-select", "hello")
    page.fill("#composer-input", "Hello there")
    page.press("#composer-input", "Enter")
    page.wait_for_selector("article.turn[data-state='completed']")
    widget = page.frame_locator("#widgets iframe")
    widget.locator("input[name='name']").fill("Ada")
    widget.locator("button").click()
    assert widget.locator("#out").inner_text() == "Hello, Ada!"  # the widget's own script runs, sandboxed
    shown = page.evaluate(  # markdown-it's aligned columns come as classes: the policy forbids style attributes
        """async (text) => {
            const ui = await import('/static/app.js');
            const box = document.createElement('div');
            box.innerHTML = ui.renderMarkdown(text);
            document.getElementById('messages').append(box);
            const count = (selector) => box.querySelectorAll(selector).length;
            return {cells: count('td.align-right'), keywords: count('.hljs-number')};
        }""",
        "| a | b |\n|:-:|--:|\n| 1 | 2 |\n\n```python\nx = 1\n```",
    )
    assert shown == {"cells": 1, "keywords": 1}
    assert refused == []


def test_a_widget_opened_directly_cannot_read_the_uis_storage(strict_page: Page, keyed_host: BerthHost) -> None:
    page = strict_page
    sign_in(page, keyed_host, "support")
    assert page.evaluate("localStorage.getItem('berth.apiKey')") == "acme-web-dev-key"
    page.select_option("#bundle-select", "hello")  # the greeter is hello's widget
    page.wait_for_selector("#widgets iframe", state="attached")
    widget = page.locator("#widgets iframe").get_attribute("src")  # the greeter's URL, with its ticket
    assert widget is not None
    page.goto(keyed_host.url + widget)
    page.wait_for_selector("#greet")
    probe = page.evaluate(
        """() => {
            let storage;
            try { storage = localStorage.getItem('berth.apiKey'); }
            catch (error) { storage = 'blocked: ' + error.name; }
            return {origin: window.origin, storage};
        }"""
    )
    assert probe["origin"] == "null"  # an opaque origin: the sandbox, not the UI's
    assert probe["storage"].startswith("blocked: SecurityError")
