"""Errors and usage where people look (issue 37, items 5 and 6), in headless Chromium: a failed bundle reload shown to
an admin with file:line, no empty conversation left by a refused first message, a follow-up that starts a turn shown
with its own text, tokens and cost in each turn's footer, and the usage page of admin keys."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, sign_in, start_scripted_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Done.</channel:answer>'
SLOW_ANSWER = {
    "text": '<channel:action>{"action": "complete"}</channel:action><channel:answer>A first answer, written '
    "slowly</channel:answer>",
    "pause_s": 3,  # before its last chunk: the user adds a follow-up while the answer is being written
}
PRICE = {"input": 3.0, "output": 15.0}
BUNDLE = """
from berth import AgentSpec, BundleInfo, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="fragile", version="1", title="Fragile")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="answer")
"""
BROKEN = BUNDLE.replace("\n@hookimpl\ndef berth_bundle", "\nSETTING = 1 / 0\n@hookimpl\ndef berth_bundle", 1)


def open_ui(page: Page, host: BerthHost) -> None:
    page.goto(host.url + "/")
    page.wait_for_selector("body[data-ready='true']")


def send(page: Page, message: str) -> None:
    page.fill("#composer-input", message)
    page.press("#composer-input", "Enter")


def reopen_workspace(page: Page) -> None:
    """Open the workspace again (the bundles and conversations are read anew)."""
    page.click("#scope-form button[type='submit']")
    page.wait_for_selector("body[data-ready='true']")


def test_a_failed_reload_shows_the_admin_which_generation_failed_and_where(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("reload-host")
    folder = root / "fragile"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE))
    host = start_scripted_host(root, [ANSWER], repeat=True, bundles={"fragile": {"source": {"path": str(folder)}}})
    try:
        open_ui(page, host)
        assert page.is_hidden("#bundle-warning")
        (folder / "__init__.py").write_text(BROKEN)
        with host.api() as api:
            assert api.post("/v1/admin/bundles/fragile/reload").json()["ok"] is False
        reopen_workspace(page)
        assert page.inner_text("#bundle-select option[value='fragile']").endswith("⚠")
        assert page.inner_text("#bundle-warning-title") == "⚠ Generation 2 failed to load"
        page.click("#bundle-warning summary")
        body = page.locator("#bundle-warning-body")
        assert "ZeroDivisionError: division by zero" in body.inner_text()
        assert body.locator("code.load-error-where").inner_text() == f"{folder / '__init__.py'}:4"
        assert "Generation 1 still serves" in body.inner_text()
        send(page, "still there?")
        page.wait_for_selector("article.turn[data-state='completed']")  # the old generation answers

        (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE))
        with host.api() as api:
            assert api.post("/v1/admin/bundles/fragile/reload").json()["ok"] is True
        reopen_workspace(page)
        assert page.is_hidden("#bundle-warning")
    finally:
        stop_host(host)


def test_a_refused_first_message_leaves_no_empty_conversation_behind(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    budget = {"budgets": [{"scope": "default", "period": "day", "tokens": 1}]}  # used up by the first turn
    host = start_scripted_host(tmp_path_factory.mktemp("budget-host"), [ANSWER], repeat=True, gateway=budget)
    try:
        open_ui(page, host)
        send(page, "The first question")
        page.wait_for_selector("article.turn[data-state='completed']")
        page.click("#new-conversation")
        send(page, "A question over budget")
        error = page.locator("article.turn .notices .error")
        error.wait_for()
        assert "(budget_exceeded)" in error.inner_text()
        assert page.input_value("#composer-input") == "A question over budget", "nothing typed is lost"
        titles = page.locator("#conversation-list .conversation-title")
        assert titles.all_inner_texts() == ["The first question"]
        page.reload()
        page.wait_for_selector("body[data-ready='true']")
        assert titles.all_inner_texts() == ["The first question"]
    finally:
        stop_host(host)


def test_a_followup_that_starts_the_next_turn_shows_its_own_text(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    host = start_scripted_host(tmp_path_factory.mktemp("next-turn-host"), [SLOW_ANSWER, ANSWER])
    try:
        open_ui(page, host)
        send(page, "Write something")
        page.wait_for_function(
            "() => document.querySelector('article.turn .answer')?.innerText.includes('written')"
        )  # the answer is being written: the model's decision is made, a follow-up now starts the next turn
        page.fill("#composer-input", "and add a summary")
        page.click("#send-button")
        page.wait_for_function(
            "() => { const t = document.querySelectorAll('article.turn');"
            " return t.length === 2 && t[1].dataset.state === 'completed'; }"
        )
        turns = page.locator("article.turn")
        assert turns.nth(0).locator(".answer").inner_text() == "A first answer, written slowly"
        assert turns.nth(1).locator(".message.user").inner_text() == "and add a summary"
        assert turns.nth(1).locator(".answer").inner_text() == "Done."
    finally:
        stop_host(host)


def test_each_turn_shows_its_tokens_and_cost_and_an_admin_sees_the_usage_page(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    host = start_scripted_host(tmp_path_factory.mktemp("usage-host"), [ANSWER], repeat=True, price=PRICE)
    try:
        open_ui(page, host)
        send(page, "How much does this cost?")
        page.wait_for_selector("article.turn[data-state='completed']")
        usage = page.locator("article.turn .turn-footer .usage")
        assert re.fullmatch(r"[\d,]+ tokens · \$0\.\d{4}", usage.inner_text()), usage.inner_text()
        assert "input" in (usage.get_attribute("title") or "") and "output" in (usage.get_attribute("title") or "")
        live = usage.inner_text()
        conversation = page.locator("#conversation-list [aria-current='true']").get_attribute("data-conversation-id")
        page.reload()
        page.wait_for_selector("body[data-ready='true']")
        page.click(f"#conversation-list [data-conversation-id='{conversation}']")
        page.wait_for_selector("article.turn[data-state='completed']")
        assert page.locator("article.turn .turn-footer .usage").inner_text() == live, "the same when reopened"

        page.click("#usage-button")
        table = page.locator("#usage-table[data-loaded='true']")
        table.wait_for()
        assert page.locator("#usage-rows tr th, #usage-rows tr td:first-child").first.inner_text() == "local"
        total = page.locator("#usage-total tr").first
        cells = total.locator("th, td").all_inner_texts()
        assert cells[0] == "total" and cells[1] == "1", cells  # one model call
        assert re.fullmatch(r"0\.\d{4}", cells[-1]), cells
        page.select_option("#usage-group", "bundle")
        page.click("#usage-form button[type='submit']")
        page.wait_for_function("document.getElementById('usage-key-title').textContent === 'bundle'")
        table.wait_for()
        assert page.locator("#usage-rows tr td").first.inner_text() == "hello"
        page.click("#usage-close")
        assert not page.locator("#usage-dialog").is_visible()
    finally:
        stop_host(host)


def test_a_key_without_the_admin_role_has_no_usage_page(page: Page, keyed_host: BerthHost) -> None:
    sign_in(page, keyed_host, "support")
    assert page.is_hidden("#usage-button")
