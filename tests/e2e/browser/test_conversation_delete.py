"""Renaming and deleting conversations in the web UI (headless Chromium against ``berth run --demo``): a renamed
conversation keeps the user's title; a deleted one, once confirmed, leaves the list, every route answers 404 for it
and no file under the host's storage folder holds anything it said."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, save_doc_image, save_screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Dialog, Locator, Page

pytestmark = pytest.mark.browser

SECRET = "umbrellagazebo"
KEPT = "lanternpeacock"
TITLE = "Plans for quillmarmot"


def open_ui(page: Page, host: BerthHost) -> None:
    page.goto(host.url + "/")
    page.wait_for_selector("body[data-ready='true']")


def chat(page: Page, message: str) -> tuple[str, str]:
    """Send ``message`` in the open conversation (a new one first if none is open); return its id and the turn's."""
    before = page.locator("article.turn").count()
    page.fill("#composer-input", message)
    page.press("#composer-input", "Enter")
    page.wait_for_function(
        "n => { const t = document.querySelectorAll('article.turn');"
        " return t.length === n + 1 && t[n].dataset.state === 'completed'; }",
        arg=before,
    )
    conversation = page.locator("#conversation-list [aria-current='true']").get_attribute("data-conversation-id")
    turn = page.locator("article.turn").last.get_attribute("data-turn-id")
    assert conversation and turn
    return conversation, turn


def row_of(page: Page, conversation: str) -> Locator:
    return page.locator("#conversation-list li", has=page.locator(f"[data-conversation-id='{conversation}']"))


def stored_files_holding(host: BerthHost, words: list[str]) -> dict[str, list[str]]:
    """Each file under the host's storage folder whose bytes hold one of ``words`` (or its tail: the FTS index keeps
    a word after the prefix it shares with the one before), with the words found."""
    assert host.var_root is not None
    found: dict[str, list[str]] = {}
    for path in sorted(host.var_root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            hits = [word for word in words if word.encode() in data or word[-8:].encode() in data]
            if hits:
                found[str(path.relative_to(host.var_root))] = hits
    return found


def test_a_conversation_is_renamed_then_deleted_and_nothing_of_it_is_left(page: Page, open_host: BerthHost) -> None:
    open_ui(page, open_host)
    conversation, turn = chat(page, f"Please remember {SECRET} for me")
    page.click("#new-conversation")
    kept, _ = chat(page, f"Keep {KEPT} safe")
    assert stored_files_holding(open_host, [SECRET, KEPT]) != {}, "the conversations are stored before"

    row = row_of(page, conversation)
    row.hover()
    save_screenshot(page, "conversation-actions.png")
    row.locator("button.conversation-rename-button").click()
    page.fill(".conversation-rename-input", TITLE)
    page.press(".conversation-rename-input", "Enter")
    row_of(page, conversation).locator(".conversation-title", has_text=TITLE).wait_for()
    row_of(page, conversation).hover()  # the renamed conversation with its actions, as docs/web-ui.md shows it
    save_doc_image(page, "web-ui-conversation-actions.png")
    api = open_host.api()
    base = f"/v1/default/default/conversations/{conversation}"
    detail = api.get(base).json()
    assert (detail["title"], detail["title_source"]) == (TITLE, "user")

    dialogs: list[str] = []

    def answer(accept: bool) -> Callable[[Dialog], None]:
        def handle(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            if accept:
                dialog.accept()
            else:
                dialog.dismiss()

        return handle

    page.once("dialog", answer(False))  # cancelled: nothing happens
    row_of(page, conversation).hover()
    row_of(page, conversation).locator("button.conversation-delete-button").click()
    assert dialogs == [f"Delete “{TITLE}”? Its messages, files and feedback are erased for good."]
    assert api.get(base).status_code == 200

    page.click(f"#conversation-list [data-conversation-id='{conversation}']")  # open it, then delete it
    page.wait_for_function("() => document.querySelectorAll('article.turn').length === 1")
    with page.expect_response(lambda r: r.request.method == "DELETE") as deleted:
        page.once("dialog", answer(True))
        row_of(page, conversation).hover()
        row_of(page, conversation).locator("button.conversation-delete-button").click()
    assert deleted.value.status == 204
    page.wait_for_selector(f"#conversation-list [data-conversation-id='{conversation}']", state="detached")
    assert page.locator("article.turn").count() == 0, "the open conversation was closed"
    assert page.locator("#conversation-list [data-conversation-id]").count() == 1

    routes = {
        "GET conversation": api.get(base),
        "PATCH conversation": api.patch(base, json={"title": "again"}),
        "DELETE conversation": api.delete(base),
        "POST turn": api.post(f"{base}/turns", json={"message": "again"}),
        "GET events": api.get(f"{base}/turns/{turn}/events"),
        "POST live event": api.post(f"{base}/turns/{turn}/events", json={"kind": "followup", "message": "again"}),
        "POST cancel": api.post(f"{base}/turns/{turn}/cancel"),
        "POST feedback": api.post(f"{base}/turns/{turn}/feedback", json={"reaction": "ok"}),
        "GET file": api.get(f"{base}/files/fi:{turn}.outputs/greeting.txt"),
    }
    assert {name: response.status_code for name, response in routes.items()} == dict.fromkeys(routes, 404)
    listed = api.get("/v1/default/default/conversations").json()["items"]
    assert conversation not in [item["id"] for item in listed] and kept in [item["id"] for item in listed]

    left = stored_files_holding(open_host, [SECRET, "quillmarmot"])
    assert left == {}, f"the deleted conversation's text is still stored: {left}"
    assert stored_files_holding(open_host, [KEPT]) != {}, "the other conversation is still stored"
