"""A new user's first turn, exactly as the README says: ``berth run --demo``, sign in, send a message.

In every example bundle the first answer must be clean: no failed tool card, no notice, no raw citation marker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def first_turn_is_clean(page: Page) -> str:
    """Send a first message in the bundle the picker shows; return the answer after checking the turn."""
    page.fill("#composer-input", "Hello! What can you do?")
    page.press("#composer-input", "Enter")
    turns = page.locator("article.turn")
    turn = turns.last
    page.wait_for_function(
        "() => { const t = document.querySelectorAll('article.turn');"
        " return ['completed', 'failed', 'cancelled'].includes(t.length && t[t.length - 1].dataset.state); }"
    )
    assert turn.get_attribute("data-state") == "completed", turn.inner_text()
    assert turn.locator(".tool-card").count() > 0, "the demo model used the bundle's tools"
    assert turn.locator(".tool-card[data-ok='false']").count() == 0
    assert turn.locator(".notices .notice, .notices .error").count() == 0, turn.locator(".notices").inner_text()
    answer = turn.locator(".answer").inner_text()
    assert "[[S:" not in answer
    assert "demo model" in answer
    return answer


def test_the_first_turn_is_clean_in_every_example_bundle(page: Page, keyed_host: BerthHost) -> None:
    sign_in(page, keyed_host, "support")
    assert page.input_value("#bundle-select") == "docs"  # the project's default, left as it is
    assert "Docs" in first_turn_is_clean(page)

    page.click("#new-conversation")
    page.select_option("#bundle-select", "hello")
    first_turn_is_clean(page)

    page.click("#sign-out")
    sign_in(page, keyed_host, "internal")
    assert page.input_value("#bundle-select") == "ops-copilot"
    first_turn_is_clean(page)


def test_the_web_ui_never_shows_a_citation_marker_raw(page: Page, keyed_host: BerthHost) -> None:
    sign_in(page, keyed_host, "support")
    rendered = page.evaluate(
        "async (texts) => { const ui = await import('/static/app.js');"
        " const pool = new Map([[1, {url: 'https://a.example/', title: 'A'}],"
        " [3, {url: 'https://c.example/', title: 'C'}]]);"
        " return texts.map((text) => ui.renderCitationTokens(text, pool)); }",
        ["x [[s:7]] y", "x [[ S : 9 ]] y", "x [[S:\t1 ]] y", "x [[S:3-1]] y", "x [[S:1-1000000000]] y"],
    )
    assert rendered == [
        "x y",
        "x y",
        "x [A](https://a.example/) y",
        "x [A](https://a.example/) [C](https://c.example/) y",
        "x [A](https://a.example/) [C](https://c.example/) y",
    ]
