"""The web UI in headless Chromium against a real ``berth run --demo`` host (the scripted demo model).

The demo model loads the greeting-etiquette skill (its Wikipedia source joins the pool), calls
``hello.greet``, then answers with a citation and two follow-ups.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import BerthHost, save_screenshot, sse_frames

if TYPE_CHECKING:
    from playwright.sync_api import Page, Request, Route

pytestmark = pytest.mark.browser

WIKIPEDIA = "https://en.wikipedia.org/wiki/Greeting"
ANSWER = (
    "Hello! This is Berth's demo model answering through the Hello bundle. hello.greet answered: Hello, friend! "
    "Read more: Greeting (Wikipedia). Set a real model (an Anthropic key, or an OpenAI-compatible server) to get real "
    "answers."
)
EVENTS = "**/turns/*/events*"


def open_ui(page: Page, host: BerthHost) -> None:
    """Load the UI and wait until it has opened its workspace."""
    page.goto(host.url + "/")
    page.wait_for_selector("body[data-ready='true']")


def send(page: Page, message: str) -> None:
    """Type a message and press Enter."""
    page.fill("#composer-input", message)
    page.press("#composer-input", "Enter")


def wait_for_turns(page: Page, count: int, state: str = "completed") -> None:
    """Wait until ``count`` turns are on screen and the last one reached ``state``."""
    page.wait_for_function(
        "([n, s]) => { const t = document.querySelectorAll('article.turn');"
        " return t.length === n && t[n - 1].dataset.state === s; }",
        arg=[count, state],
    )


def test_chat_streams_an_answer_with_citation_tool_card_followups_and_widget(page: Page, open_host: BerthHost) -> None:
    open_ui(page, open_host)
    assert page.is_hidden("#login"), "auth: none needs no sign-in"
    assert page.input_value("#bundle-select") == "hello"
    assert "(default)" in page.inner_text("#bundle-select option[value='hello']")
    widget = page.frame_locator("#widgets iframe[title='Greeter']")
    assert widget.locator("h3").inner_text() == "Greeter"

    send(page, "Hello there")
    wait_for_turns(page, 1)
    turn = page.locator("article.turn").last

    answer = turn.locator(".answer")
    assert answer.inner_text().strip() == ANSWER
    assert int(answer.get_attribute("data-deltas") or 0) > 1, "the answer was rendered delta by delta"
    assert answer.locator("strong").inner_text() == "Hello!"
    citation = answer.locator("a.cite")
    assert citation.get_attribute("href") == WIKIPEDIA
    assert citation.get_attribute("rel") == "noopener noreferrer"

    greet = turn.locator(".tool-card[data-tool-id='hello.greet']")
    assert greet.get_attribute("data-ok") == "true"
    assert greet.locator(".tool-result").text_content() == "Hello, friend!"
    assert turn.locator(".tool-card[data-tool-id='react.read']").count() == 1

    reasoning = turn.locator("details.reasoning")
    assert reasoning.get_attribute("open") is None, "the reasoning panel starts collapsed"
    reasoning.locator("summary").click()
    assert "greeting-etiquette skill" in reasoning.locator(".reasoning-text").inner_text()

    chips = turn.locator("button.followup")
    assert chips.all_inner_texts() == ["What can this bundle do?", "Show me another example"]
    assert page.locator("#conversation-list .conversation-title").first.inner_text() == "Hello there"
    save_screenshot(page, "web-ui.png")


def test_follow_up_chip_starts_a_turn_and_feedback_is_saved_and_reloaded(page: Page, open_host: BerthHost) -> None:
    open_ui(page, open_host)
    send(page, "First question")
    wait_for_turns(page, 1)
    first = page.locator("article.turn").first

    with page.expect_response(lambda r: r.url.endswith("/feedback") and r.request.method == "POST") as posted:
        first.locator("button.feedback[data-reaction='ok']").click()
    assert posted.value.status == 200
    assert json.loads(posted.value.request.post_data or "{}") == {"reaction": "ok"}
    # the button is marked once the UI has handled the response, a moment after it arrives
    first.locator("button.feedback[data-reaction='ok'][aria-pressed='true']").wait_for()

    first.locator("button.followup", has_text="Show me another example").click()
    wait_for_turns(page, 2)
    assert page.locator("article.turn").last.locator(".message.user").inner_text() == "Show me another example"

    conversation = page.locator("#conversation-list [aria-current='true']").get_attribute("data-conversation-id")
    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    page.click(f"#conversation-list [data-conversation-id='{conversation}']")
    wait_for_turns(page, 2)
    stored = page.locator("article.turn")
    assert stored.first.locator(".message.user").inner_text() == "First question"
    assert stored.first.locator(".answer a.cite").get_attribute("href") == WIKIPEDIA
    assert stored.first.locator(".answer").inner_text().strip() == ANSWER
    assert stored.first.locator("button.feedback[data-reaction='ok']").get_attribute("aria-pressed") == "true"
    assert stored.last.locator("button.followup").count() == 2


def test_reconnect_resumes_from_the_last_event_id_without_duplicated_text(page: Page, open_host: BerthHost) -> None:
    attempts: list[dict[str, str]] = []
    cut: dict[str, str] = {}

    def drop_then_resume(route: Route, request: Request) -> None:
        attempts.append(request.headers)
        if len(attempts) == 1:  # deliver the stream up to the middle of the answer, then end it
            frames = sse_frames(route.fetch().text())
            answer_deltas = [i for i, f in enumerate(frames) if '"marker":"answer"' in f.get("data", "")]
            kept = frames[: answer_deltas[len(answer_deltas) // 2] + 1]
            cut["last_id"] = kept[-1]["id"]
            route.fulfill(status=200, content_type="text/event-stream", body="".join(f["raw"] for f in kept))
        elif len(attempts) == 2:  # the first reconnect fails at the network level
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route(EVENTS, drop_then_resume)
    open_ui(page, open_host)
    send(page, "Please survive a dropped connection")
    wait_for_turns(page, 1)

    assert len(attempts) == 3
    assert "last-event-id" not in attempts[0]
    assert attempts[1]["last-event-id"] == cut["last_id"]
    assert attempts[2]["last-event-id"] == cut["last_id"]
    turn = page.locator("article.turn").last
    assert turn.locator(".answer").inner_text().strip() == ANSWER
    assert turn.locator(".tool-card").count() == 2, "no tool card twice"
    assert int(turn.get_attribute("data-reconnects") or 0) == 2
    assert turn.get_attribute("data-last-event-id", timeout=1000) != cut["last_id"]


def test_plan_notices_failed_tools_and_unsafe_markdown_render_safely(page: Page, open_host: BerthHost) -> None:
    def synthetic_stream(route: Route, request: Request) -> None:
        turn_id = request.url.split("/turns/")[1].split("/")[0]
        plan = {
            "plan_id": "p1",
            "status": "open",
            "steps": [
                {"n": 1, "label": "Find the docs", "status": "done"},
                {"n": 2, "label": "Call the API", "status": "failed"},
                {"n": 3, "label": "Summarize", "status": "in_progress"},
                {"n": 4, "label": "Ask for feedback", "status": "pending"},
            ],
        }
        answer = (
            'Unsafe: <img src=x onerror="window.__xss=1"> and [bad](javascript:window.__xss=2) stay text.\n\n'
            "- one\n- **two**\n\n```python\nprint('<b>hi</b>')\n```\n"
        )
        events = [
            ("turn.started", {"turn_id": turn_id}),
            ("plan", {"plan": plan}),
            ("notice", {"code": "iteration_limit", "message": "Running low on iterations"}),
            ("tool.call", {"call_id": "c9", "tool_id": "web.fetch", "params": {"url": "https://example.org"}}),
            ("tool.result", {"call_id": "c9", "tool_id": "web.fetch", "ok": False, "summary": "timeout", "paths": []}),
            ("channel.delta", {"channel": "answer", "instance": 0, "marker": "answer", "text": answer}),
            ("turn.completed", {"turn_id": turn_id, "answer": answer, "followups": [], "sources_used": []}),
        ]
        body = "".join(
            f"id: {turn_id}:{seq}\nevent: {name}\ndata: {json.dumps(data)}\n\n"
            for seq, (name, data) in enumerate(events, 1)
        )
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    page.route(EVENTS, synthetic_stream)
    open_ui(page, open_host)
    send(page, "Show me everything")
    wait_for_turns(page, 1)
    turn = page.locator("article.turn").last

    answer = turn.locator(".answer")
    assert answer.locator("img").count() == 0
    assert answer.locator("a").count() == 0
    assert '<img src=x onerror="window.__xss=1">' in answer.inner_text()
    assert page.evaluate("window.__xss") is None
    assert answer.locator("ul li").all_inner_texts() == ["one", "two"]
    assert answer.locator("pre code.language-python").inner_text().strip() == "print('<b>hi</b>')"
    assert answer.locator("pre code.language-python .hljs-built_in").inner_text() == "print", "highlighted"

    assert page.is_visible("#plan-panel")
    markers = page.locator("#plan-steps .marker").all_inner_texts()
    assert markers == ["✓", "✗", "…", "□"]
    assert "Running low on iterations" in turn.locator(".notices").inner_text()
    failed = turn.locator(".tool-card[data-tool-id='web.fetch']")
    assert failed.get_attribute("data-ok") == "false"
    assert failed.locator(".badge").inner_text() == "failed"
    save_screenshot(page, "web-ui-plan.png")


def test_attachments_are_sent_as_multipart_and_listed_with_the_turn(page: Page, open_host: BerthHost) -> None:
    open_ui(page, open_host)
    page.set_input_files("#file-input", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hi\n"}])
    assert "notes.txt" in page.inner_text("#attachment-list")
    with page.expect_request(lambda r: r.url.endswith("/turns") and r.method == "POST") as started:
        send(page, "Read my notes")
    assert started.value.headers["content-type"].startswith("multipart/form-data")
    wait_for_turns(page, 1)
    assert page.is_hidden("#attachment-list"), "the composer forgets sent files"

    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    page.locator("#conversation-list .conversation-item").first.click()
    wait_for_turns(page, 1)
    assert "notes.txt" in page.locator("article.turn .message.user").inner_text()


def test_an_attached_image_shows_as_a_thumbnail_with_the_answer(page: Page, open_host: BerthHost) -> None:
    from berth.testing.documents import pdf_bytes, png_bytes

    open_ui(page, open_host)
    png = png_bytes(40, 30, "green")
    files = [
        {"name": "screen.png", "mimeType": "image/png", "buffer": png},
        {"name": "invoice.pdf", "mimeType": "application/pdf", "buffer": pdf_bytes(["Invoice 42"])},
    ]
    page.set_input_files("#file-input", files=files)
    send(page, "What is on my screen?")
    wait_for_turns(page, 1)
    turn = page.locator("article.turn").last
    thumbnail = turn.locator(".message.user img.thumbnail")
    thumbnail.wait_for()
    page.wait_for_function("document.querySelector('article.turn img.thumbnail').naturalWidth === 40")
    assert thumbnail.get_attribute("alt") == "screen.png"
    assert "invoice.pdf (PDF," in turn.locator(".message.user .chip").inner_text()
    assert turn.locator(".message.assistant").inner_text().strip()  # the answer arrived beside it

    page.reload()  # from the stored conversation: the thumbnail is fetched through the files route
    page.wait_for_selector("body[data-ready='true']")
    page.locator("#conversation-list .conversation-item").first.click()
    wait_for_turns(page, 1)
    page.wait_for_function("document.querySelector('article.turn img.thumbnail')?.naturalHeight === 30")
    save_screenshot(page, "web-ui-image-attachment.png")


def test_the_answer_shows_an_image_of_the_conversation_it_refers_to(
    page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import yaml
    from web_ui_kit import OPEN_DESCRIPTORS, start_host, stop_host

    from berth.testing.documents import png_bytes

    root = tmp_path_factory.mktemp("image-answer-host")
    descriptors = root / "descriptors"
    descriptors.mkdir()
    for name, text in OPEN_DESCRIPTORS.items():
        (descriptors / name).write_text(text)
    answer = "Here it is: ![your screen](fi:turn_pic1.attachments/screen.png) and nothing else."
    script = {
        "responses": [
            f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{answer}</channel:answer>'
        ]
    }
    (root / "script.yaml").write_text(yaml.safe_dump(script))
    assembly = yaml.safe_load(OPEN_DESCRIPTORS["assembly.yaml"])
    assembly["platform"] = {"models": {"default": {"provider": "scripted", "model": str(root / "script.yaml")}}}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    host = start_host(descriptors, root / "var", root / "berth.log", demo=False)
    try:
        with host.api() as api:
            conversation = api.post("/v1/default/default/conversations", json={}).json()["id"]
            files = {"file": ("screen.png", png_bytes(24, 18, "purple"), "image/png")}
            data = {"message": "show my screen", "turn_id": "turn_pic1"}
            started = api.post(f"/v1/default/default/conversations/{conversation}/turns", data=data, files=files)
            assert started.status_code == 202, started.text
            with api.stream("GET", started.json()["events_url"]) as events:
                assert "turn.completed" in "".join(events.iter_text())
        open_ui(page, host)
        page.locator("#conversation-list .conversation-item").first.click()
        wait_for_turns(page, 1)
        page.wait_for_function("document.querySelector('.message.assistant img.answer-image')?.naturalWidth === 24")
        image = page.locator(".message.assistant img.answer-image")
        assert image.get_attribute("alt") == "your screen"
        assert "and nothing else" in page.locator(".message.assistant").inner_text()
    finally:
        stop_host(host)


def test_conversation_list_pages_and_the_workspace_can_be_switched(page: Page, open_host: BerthHost) -> None:
    with open_host.api() as api:
        for n in range(25):
            created = api.post("/v1/default/paging/conversations", json={"title": f"Paged {n:02d}"})
            assert created.status_code == 201
    open_ui(page, open_host)
    page.fill("#project-input", "paging")
    page.press("#project-input", "Enter")
    page.wait_for_function("document.querySelectorAll('#conversation-list li').length === 20")
    assert page.locator("#conversation-list .conversation-title").first.inner_text() == "Paged 24"
    page.click("#load-more")
    page.wait_for_function("document.querySelectorAll('#conversation-list li').length === 25")
    assert page.is_hidden("#load-more")

    page.fill("#project-input", "nowhere")
    page.press("#project-input", "Enter")
    page.wait_for_selector("#scope-error:not([hidden])")
    assert "default/nowhere" in page.inner_text("#scope-error")


def test_sign_in_with_an_api_key_then_chat_in_the_keys_project(page: Page, keyed_host: BerthHost) -> None:
    bearer: list[str | None] = []
    page.on("request", lambda r: bearer.append(r.headers.get("authorization")) if "/events" in r.url else None)
    open_ui_login = keyed_host.url + "/"
    page.goto(open_ui_login)
    page.wait_for_selector("#login-form", state="visible")

    page.fill("#login-key", "not-a-key")
    page.fill("#login-tenant", "acme")
    page.fill("#login-project", "support")
    page.click("#login-form button[type='submit']")
    page.wait_for_selector("#login-error:not([hidden])")
    assert "not known" in page.inner_text("#login-error")

    page.fill("#login-key", "acme-web-dev-key")
    page.fill("#login-tenant", "globex")
    page.fill("#login-project", "research")
    page.click("#login-form button[type='submit']")
    page.wait_for_function("document.getElementById('login-error').textContent.includes('does not cover')")

    page.fill("#login-tenant", "acme")
    page.fill("#login-project", "support")
    page.click("#login-form button[type='submit']")
    page.wait_for_selector("body[data-ready='true']")
    options = page.locator("#bundle-select option")
    assert options.count() == 2
    assert "(default)" in page.inner_text("#bundle-select option[value='docs']")
    page.select_option("#bundle-select", "hello")
    src = page.locator("#widgets iframe").get_attribute("src")
    assert src is not None and src.startswith("/v1/acme/support/bundles/hello/widgets/greeter/")  # + its ticket

    send(page, "Hi from ACME")
    wait_for_turns(page, 1)
    assert page.locator("article.turn .answer a.cite").get_attribute("href") == WIKIPEDIA
    assert bearer == ["Bearer acme-web-dev-key"]

    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    assert page.is_hidden("#login"), "the key is remembered in local storage"
    assert page.locator("#conversation-list .conversation-title").first.inner_text() == "Hi from ACME"
    page.click("#sign-out")
    page.wait_for_selector("#login-form", state="visible")
    assert page.evaluate("localStorage.getItem('berth.apiKey')") is None


MARKDOWN_CASES = [
    ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>"),
    ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"),
    ("[m](mailto:a@b.example) [r](/relative)", "<p>[m](mailto:a@b.example) [r](/relative)</p>"),
    (
        "see [Foo](https://w.example/Foo_(bar))",
        '<p>see <a href="https://w.example/Foo_(bar)" target="_blank" rel="noopener noreferrer">Foo</a></p>',
    ),
    ("**bold** and `<b>`", "<p><strong>bold</strong> and <code>&lt;b&gt;</code></p>"),
    ("~~gone~~ and <img src=x onerror=alert(1)>", "<p><s>gone</s> and &lt;img src=x onerror=alert(1)&gt;</p>"),
    (
        "- a\n- b\n\n3. c\n4. d",
        '<ul>\n<li>a</li>\n<li>b</li>\n</ul>\n<ol start="3">\n<li>c</li>\n<li>d</li>\n</ol>',
    ),
    (
        "```js\nx = '<i>'\n```",
        '<pre><code class="language-js hljs">x = <span class="hljs-string">\'&lt;i&gt;\'</span>\n</code></pre>',
    ),
    ("```\n<b>plain</b>\n```", '<pre><code class="hljs">&lt;b&gt;plain&lt;/b&gt;\n</code></pre>'),
    ("one\ntwo\n\nthree", "<p>one<br>\ntwo</p>\n<p>three</p>"),
    (
        "| a | b |\n|:--|--:|\n| 1 | 2 |",
        '<div class="table-wrap"><table>\n<thead>\n<tr>\n<th class="align-left">a</th>\n'
        '<th class="align-right">b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td class="align-left">1</td>\n'
        '<td class="align-right">2</td>\n</tr>\n</tbody>\n</table></div>',
    ),
    (  # an image of the conversation is fetched with the key; any other becomes a link nothing fetches
        "see ![the screen](fi:turn_1.attachments/screen.png) and ![pixel](https://t.example/p.gif)",
        '<p>see <img alt="the screen" data-path="fi:turn_1.attachments/screen.png" class="answer-image"> and '
        '<a href="https://t.example/p.gif" target="_blank" rel="noopener noreferrer" class="external-image">'
        "pixel (image at t.example, not loaded)</a></p>",
    ),
    (
        '![x](fi:turn_1.outputs/a"onerror="b.png)',
        '<p><img alt="x" data-path="fi:turn_1.outputs/a%22onerror=%22b.png" class="answer-image"></p>',
    ),
    ("![t](//t.example/p.gif)", "<p>![t](//t.example/p.gif)</p>"),
    (
        "![d](data:image/png;base64,iVBORw0KGgo=)",
        '<p><img src="data:image/png;base64,iVBORw0KGgo=" alt="d" class="answer-image"></p>',
    ),
]


def test_markdown_renderer_escapes_html_and_links_only_http(page: Page, open_host: BerthHost) -> None:
    open_ui(page, open_host)
    rendered = page.evaluate(
        "async (sources) => { const ui = await import('/static/app.js');"
        " return sources.map((text) => ui.renderMarkdown(text)); }",
        [source for source, _ in MARKDOWN_CASES],
    )
    assert rendered == [expected for _, expected in MARKDOWN_CASES]
    stored = page.evaluate(
        "async () => { const ui = await import('/static/app.js');"
        " const pool = new Map([[1, {url: 'https://a.example/', title: 'A'}], [2, {url: 'javascript:x', title: 'B'}]]);"
        " return ui.renderCitationTokens('x [[S:1]] y [[S:1-2]] z [[S:7]].', pool); }"
    )
    assert stored == "x [A](https://a.example/) y [A](https://a.example/) z."


def test_a_refused_message_says_why_and_stays_in_the_composer(page: Page, limited_host: BerthHost) -> None:
    open_ui(page, limited_host)
    with limited_host.api() as client:  # use up the rest of the tenant's burst
        statuses = [client.get("/v1/default/default/conversations").status_code for _ in range(15)]
    assert statuses[-1] == 429
    send(page, "Are you there?")
    error = page.locator("article.turn .notices .error")
    error.wait_for()
    assert "over its limit of 6 requests per minute" in error.inner_text()
    assert "(rate_limited)" in error.inner_text()
    assert page.input_value("#composer-input") == "Are you there?", "nothing typed is lost"
