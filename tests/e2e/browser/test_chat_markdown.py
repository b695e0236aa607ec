"""Answers as chat users expect them (issue 37, item 3), in headless Chromium: markdown-it tables, strikethrough and
highlighted code (DOMPurify-sanitized, no javascript: link, no external image fetched), copy buttons on code blocks
and answers, regenerate and edit-and-resend of the last message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, save_doc_image, start_scripted_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

CODE = 'def greet(name: str) -> str:\n    """Say hello."""\n    return f"Hello, {name}!"  # friendly'
SAMPLE = f"""## Greeting customs

| Country | Greeting | Distance |
|:--------|:--------:|---------:|
| Japan | bow | 1.0 m |
| France | ~~handshake~~ la bise | 0.2 m |
| Brazil | hug | 0.1 m |

~~Always shake hands~~: it depends on the place.

```python
{CODE}
```

Inline `code`, a [safe link](https://en.wikipedia.org/wiki/Greeting), a [bad link](javascript:alert(1)) and an image \
from elsewhere: ![tracker](https://tracker.example/pixel.gif)"""
ANSWER = f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{SAMPLE}</channel:answer>'


@pytest.fixture(scope="module")
def markdown_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    host = start_scripted_host(tmp_path_factory.mktemp("markdown-host"), [ANSWER], repeat=True, chunk_size=40)
    yield host
    stop_host(host)


def wait_for_turns(page: Page, count: int) -> None:
    page.wait_for_function(
        "(n) => { const t = document.querySelectorAll('article.turn');"
        " return t.length === n && t[n - 1].dataset.state === 'completed'; }",
        arg=count,
    )


def test_tables_strikethrough_and_highlighted_code_render_safely_with_copy_buttons(
    page: Page, markdown_host: BerthHost
) -> None:
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=markdown_host.url)
    page.goto(markdown_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    page.fill("#composer-input", "Show me the greeting customs")
    page.press("#composer-input", "Enter")
    wait_for_turns(page, 1)
    answer = page.locator("article.turn .answer")

    assert answer.locator("h2").inner_text() == "Greeting customs"
    assert answer.locator("table thead th").all_inner_texts() == ["Country", "Greeting", "Distance"]
    assert answer.locator("table tbody tr").count() == 3
    assert answer.locator("table tbody tr").nth(1).locator("td").first.inner_text() == "France"
    assert answer.locator("td.align-right").first.inner_text() == "1.0 m"
    assert answer.locator("table s").inner_text() == "handshake"
    assert answer.locator("p > s").inner_text() == "Always shake hands"
    assert "|" not in answer.inner_text() and "~~" not in answer.inner_text()

    code = answer.locator("pre code.language-python")
    assert code.inner_text().strip() == CODE
    assert code.locator(".hljs-keyword").first.inner_text() == "def"
    assert code.locator(".hljs-string").count() >= 2
    assert code.locator(".hljs-comment").inner_text() == "# friendly"
    assert answer.locator(".code-header .code-language").inner_text() == "python"

    assert answer.locator("a[href^='javascript']").count() == 0
    assert "[bad link](javascript:alert(1))" in answer.inner_text()
    safe = answer.locator("a", has_text="safe link")
    assert (safe.get_attribute("href"), safe.get_attribute("rel")) == (
        "https://en.wikipedia.org/wiki/Greeting",
        "noopener noreferrer",
    )
    assert answer.locator("img").count() == 0
    external = answer.locator("a.external-image")
    assert external.get_attribute("href") == "https://tracker.example/pixel.gif"
    assert external.inner_text() == "tracker (image at tracker.example, not loaded)"
    assert not [url for url in fetched if "tracker.example" in url], "an image from elsewhere is never fetched"

    page.set_viewport_size({"width": 1400, "height": 1000})
    save_doc_image(page, "web-ui-markdown.png")

    answer.locator(".copy-code").click()
    page.wait_for_selector(".copy-code[data-copied='true']")
    assert page.evaluate("navigator.clipboard.readText()") == CODE + "\n"
    page.locator("article.turn .copy-answer").click()
    page.wait_for_selector(".copy-answer[data-copied='true']")
    assert page.evaluate("navigator.clipboard.readText()") == SAMPLE


def test_regenerate_and_edit_and_resend_the_last_message(page: Page, markdown_host: BerthHost) -> None:
    page.goto(markdown_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    page.fill("#composer-input", "Greeting customs, please")
    page.press("#composer-input", "Enter")
    wait_for_turns(page, 1)

    page.locator("article.turn .regenerate").click()
    wait_for_turns(page, 2)
    turns = page.locator("article.turn")
    assert turns.nth(1).locator(".message.user").inner_text() == "Greeting customs, please"
    assert turns.nth(1).locator(".answer table").count() == 1
    assert not turns.nth(0).locator(".regenerate").is_visible(), "only the last turn can be regenerated"
    assert not turns.nth(0).locator(".edit-prompt").is_visible(), "only the last message can be edited"

    turns.nth(1).locator(".edit-prompt").click()
    assert page.input_value("#composer-input") == "Greeting customs, please"
    assert page.evaluate("document.activeElement.id") == "composer-input"
    page.fill("#composer-input", "Greeting customs in Japan, please")
    page.press("#composer-input", "Enter")
    wait_for_turns(page, 3)
    assert turns.nth(2).locator(".message.user").inner_text() == "Greeting customs in Japan, please"
    assert turns.nth(2).locator(".regenerate").is_visible()
    assert not turns.nth(1).locator(".regenerate").is_visible()
