"""Reopening a conversation shows the work as it was shown live (issue 37, item 1), in headless Chromium.

A scripted model thinks, calls ``hello.greet`` while the user adds a follow-up, answers; then writes a long answer
that the user stops. Reopened, the conversation shows the reasoning, the tool card with its parameters and result,
the follow-up where it arrived, and the stopped turn's partial answer marked as stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, save_doc_image, start_scripted_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = pytest.mark.browser

GREET = {
    "text": "<channel:thinking>Ada asked for a greeting: call hello.greet with her name, then answer."
    "</channel:thinking>"
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}'
    "</channel:action>",
    "pause_s": 2,  # the action's last chunk comes late: the user adds a follow-up meanwhile
}
ANSWER = (
    '<channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>**Hello, Ada!** And yes: it is sunny today.</channel:answer>"
    '<channel:followups>{"followups": ["Tell me more"]}</channel:followups>'
)
LONG_TEXT = (
    "Here is the long story of greetings.\n\n1. People bowed.\n2. People shook hands.\n3. People waved, and then"
)
LONG = {  # the model pauses before its follow-ups: the whole text so far is on screen when the user stops it
    "text": f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{LONG_TEXT}</channel:answer>'
    '<channel:followups>{"followups": ["never shown"]}</channel:followups>',
    "pause_s": 30,
}


def activity_of(turn: Locator) -> list[str]:
    """The tool cards (by tool id) and live events (by kind) of a turn, in the order shown."""
    return [
        item.get_attribute("data-tool-id") or item.get_attribute("data-kind") or "?"
        for item in turn.locator(".activity > .tool-card, .activity > .live-event").all()
    ]


@pytest.fixture(scope="module")
def history_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    host = start_scripted_host(tmp_path_factory.mktemp("history-host"), [GREET, ANSWER, LONG])
    yield host
    stop_host(host)


def test_a_reopened_conversation_shows_tool_cards_reasoning_followups_and_the_stopped_turn(
    page: Page, history_host: BerthHost
) -> None:
    page.goto(history_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    page.fill("#composer-input", "Greet Ada")
    page.press("#composer-input", "Enter")
    page.wait_for_selector("article.turn details.reasoning:not([hidden])")  # the model is at it
    current = page.locator("#conversation-list [aria-current='true'] .conversation-title")
    assert current.inner_text() == "Greet Ada", "the first message stands for the title while there is none"
    page.fill("#composer-input", "and is it sunny?")
    page.click("#send-button")
    page.wait_for_selector("article.turn[data-state='completed']")
    live_activity = activity_of(page.locator("article.turn").first)
    assert live_activity == ["followup", "hello.greet"], "the follow-up came while the model was still deciding"

    page.fill("#composer-input", "Tell me the long story")
    page.press("#composer-input", "Enter")
    page.wait_for_function(
        "(text) => document.querySelectorAll('article.turn').length === 2"
        " && document.querySelectorAll('article.turn')[1].querySelector('.answer').innerText.includes(text)",
        arg="People waved, and then",
    )
    page.click("#stop-button")
    stopped = page.locator("article.turn").nth(1)
    page.wait_for_selector("article.turn[data-state='cancelled']")
    assert stopped.locator(".stopped-mark").is_visible()
    assert "People waved, and then" in stopped.locator(".answer").inner_text()

    conversation = page.locator("#conversation-list [aria-current='true']").get_attribute("data-conversation-id")
    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    page.click(f"#conversation-list [data-conversation-id='{conversation}']")
    page.wait_for_selector("article.turn[data-state='cancelled']")
    first, second = page.locator("article.turn").all()

    greet = first.locator(".tool-card[data-tool-id='hello.greet']")
    assert greet.get_attribute("data-ok") == "true"
    assert greet.locator(".badge").inner_text() == "ok"
    assert greet.locator(".tool-result").text_content() == "Hello, Ada!"
    assert '"name": "Ada"' in (greet.locator(".tool-params").text_content() or "")
    assert first.locator("details.reasoning").is_visible()
    assert "call hello.greet with her name" in (first.locator(".reasoning-text").text_content() or "")
    followup = first.locator(".live-event[data-kind='followup']")
    assert followup.inner_text().endswith("and is it sunny?")
    assert activity_of(first) == live_activity, "in the order they were shown live"
    assert first.locator(".answer strong").inner_text() == "Hello, Ada!"
    assert first.locator("button.followup").all_inner_texts() == ["Tell me more"]
    assert "tokens" in first.locator(".turn-footer .usage").inner_text()

    assert second.get_attribute("data-state") == "cancelled"
    assert second.locator(".stopped-mark").is_visible()
    assert "cut off" in second.locator(".stopped-mark").inner_text()
    assert second.locator(".answer ol li").all_inner_texts() == [
        "People bowed.",
        "People shook hands.",
        "People waved, and then",
    ]
    assert second.locator("button.followup").count() == 0

    greet.locator("summary").click()  # open the card and the reasoning for the picture
    first.locator("details.reasoning summary").click()
    page.set_viewport_size({"width": 1400, "height": 1250})
    page.locator("#messages").evaluate("(box) => { box.scrollTop = 0; }")
    save_doc_image(page, "web-ui-reopened-conversation.png")
