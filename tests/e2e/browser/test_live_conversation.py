"""The web UI and live conversations, in headless Chromium: a follow-up sent while a turn streams, the title."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import yaml
from web_ui_kit import OPEN_DESCRIPTORS, BerthHost, save_screenshot, start_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

THINKING_THEN_CALL = {
    # the action streams last, after a pause: the user writes a follow-up while the model is still at it
    "text": "<channel:thinking>Let me greet first, then answer.</channel:thinking>"
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}'
    "</channel:action>",
    "pause_s": 2,
}
ANSWER = (
    '<channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>Hello, Ada! And yes: it is sunny today.</channel:answer>"
)


@pytest.fixture(scope="module")
def scripted_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """An ``auth: none`` host whose default model and summarizer are scripted."""
    root = tmp_path_factory.mktemp("live-host")
    descriptors = root / "descriptors"
    descriptors.mkdir()
    (root / "turns.yaml").write_text(yaml.safe_dump({"chunk_size": 12, "responses": [THINKING_THEN_CALL, ANSWER]}))
    (root / "titles.yaml").write_text(yaml.safe_dump({"responses": ["Greeting Ada"]}))
    assembly = yaml.safe_load(OPEN_DESCRIPTORS["assembly.yaml"])
    assembly["platform"] = {
        "models": {
            "default": {"provider": "scripted", "model": str(root / "turns.yaml")},
            "roles": {"summarizer": {"provider": "scripted", "model": str(root / "titles.yaml")}},
        }
    }
    files = {**OPEN_DESCRIPTORS, "assembly.yaml": yaml.safe_dump(assembly)}
    for name, text in files.items():
        (descriptors / name).write_text(text)
    host = start_host(descriptors, root / "var", root / "berth.log", demo=False)
    yield host
    stop_host(host)


def test_a_followup_sent_while_the_turn_streams_reaches_it_and_the_title_shows(
    page: Page, scripted_host: BerthHost
) -> None:
    page.goto(scripted_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    page.fill("#composer-input", "Greet Ada")
    page.press("#composer-input", "Enter")

    page.wait_for_selector("#steer-button:not([hidden])")
    assert page.inner_text("#send-button") == "Add"
    page.wait_for_selector("article.turn details.reasoning:not([hidden])")  # the model is writing
    page.fill("#composer-input", "and is it sunny?")
    page.click("#send-button")

    turn = page.locator("article.turn").last
    page.wait_for_selector("article.turn .live-event[data-kind='followup']")
    assert turn.locator(".live-event").inner_text().endswith("and is it sunny?")
    page.wait_for_selector("article.turn[data-state='completed']")
    assert turn.locator(".answer").inner_text().strip() == "Hello, Ada! And yes: it is sunny today."
    assert page.locator("article.turn").count() == 1, "the follow-up went to the running turn"
    assert page.input_value("#composer-input") == ""
    assert page.is_hidden("#steer-button")

    page.wait_for_selector(".conversation-item .conversation-title:text-is('Greeting Ada')")
    save_screenshot(page, "live-followup-and-title.png")
