"""Attachments are honest in the web UI (issue 37): an image over the model's limits is sent downscaled, and the
turn says so under the user's message and marks the thumbnail, live and when the conversation is opened again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import yaml
from web_ui_kit import OPEN_DESCRIPTORS, BerthHost, save_screenshot, start_host, stop_host

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>A long teal banner.</channel:answer>'


@pytest.fixture(scope="module")
def vision_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """A host whose (scripted) model reads images, within Anthropic's limits: 8000 px a side, 5 MB."""
    root = tmp_path_factory.mktemp("vision-host")
    descriptors = root / "descriptors"
    descriptors.mkdir()
    for name, text in OPEN_DESCRIPTORS.items():
        (descriptors / name).write_text(text)
    (root / "script.yaml").write_text(yaml.safe_dump({"responses": [ANSWER], "repeat": True}))
    assembly = yaml.safe_load(OPEN_DESCRIPTORS["assembly.yaml"])
    model = {"provider": "scripted", "model": str(root / "script.yaml"), "modalities": ["text", "image"]}
    assembly["platform"] = {"models": {"default": model}, "react": {"conversation_titles": False}}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    host = start_host(descriptors, root / "var", root / "berth.log", demo=False)
    yield host
    stop_host(host)


def wait_for_completed_turn(page: Page) -> None:
    page.wait_for_function(
        "() => { const t = document.querySelectorAll('article.turn');"
        " return t.length === 1 && t[0].dataset.state === 'completed'; }"
    )


def test_an_oversize_image_is_downscaled_and_the_turn_says_so_beside_its_thumbnail(
    page: Page, vision_host: BerthHost
) -> None:
    from berth.testing.documents import png_bytes

    page.goto(vision_host.url + "/")
    page.wait_for_selector("body[data-ready='true']")
    banner = png_bytes(9000, 120, "teal")  # wider than the 8000 px a side the model takes
    page.set_input_files("#file-input", files=[{"name": "banner.png", "mimeType": "image/png", "buffer": banner}])
    page.fill("#composer-input", "What is on this banner?")
    page.press("#composer-input", "Enter")
    wait_for_completed_turn(page)

    user = page.locator("article.turn .message.user")
    notice = user.locator(".attachment-notice")
    assert notice.count() == 1
    text = notice.inner_text()
    assert "banner.png is shown to the model downscaled, from 9000x120" in text
    assert "to 8000x107" in text
    assert notice.get_attribute("data-code") == "attachment_downscaled"
    thumb = user.locator("li.thumb")
    assert thumb.get_attribute("data-sent") == "attachment_downscaled"
    assert thumb.locator(".model-view").inner_text() == "downscaled for the model"
    assert page.locator("article.turn .message.assistant .notices .notice").count() == 0  # not among the answer's
    save_screenshot(page, "web-ui-attachment-downscaled.png")

    page.reload()  # the stored turn marks its thumbnail too
    page.wait_for_selector("body[data-ready='true']")
    page.locator("#conversation-list .conversation-item").first.click()
    wait_for_completed_turn(page)
    stored = page.locator("article.turn .message.user li.thumb")
    assert stored.get_attribute("data-sent") == "attachment_downscaled"
    assert stored.locator(".model-view").inner_text() == "downscaled for the model"
    assert "from 9000x120" in (stored.get_attribute("title") or "")
