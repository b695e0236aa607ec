"""Citations end to end: ``web.fetch`` reads a page, the page joins the sources pool, the answer cites it.

A folder bundle enables the real ``web`` tool pack (from the plugin's ``berth_tool_packs()``) with
private addresses allowed, and the model — scripted — fetches a page served on 127.0.0.1. The streamed
answer's ``[[S:1]]`` reaches the client as a markdown link to the page, ``turn.completed`` lists the
source, and the pool is persisted with the conversation.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from turn_harness import action, complete, turn_harness

from berth.default_plugins.tools.web import berth_tool_packs
from berth.runtime.blocks import BlockType
from berth.runtime.persistence import restore_conversation
from berth.testing.fakes.serving import LocalServer

PAGE_TITLE = "Tide tables of the Wadden Sea"
PAGE = f"""<!doctype html>
<html><head><title>{PAGE_TITLE}</title></head>
<body>
<nav><a href="/">Home</a> · <a href="/about">About</a></nav>
<main><article>
<h1>{PAGE_TITLE}</h1>
<p>High tide at Den Helder on 22 November 2026 is at 09:41, and low tide follows at 16:05.</p>
<p>The tidal range in the Wadden Sea grows from about 1.4 metres in the west to over 3 metres near the
Elbe estuary, which is why walkers cross the mudflats only with a licensed guide.</p>
<p>Spring tides arrive a day or two after full and new moon; neap tides follow the quarter moons.</p>
</article></main>
<footer>© 2026 Coastal Office. Cookie settings.</footer>
</body></html>
"""

BUNDLE = '''
"""A reader that fetches pages with the web pack and cites them."""

from berth import AgentSpec, BundleContext, BundleInfo, ToolPack, hookimpl


@hookimpl
def berth_bundle() -> BundleInfo:
    return BundleInfo(id="reader", version="0.1.0", title="Reader")


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    return AgentSpec(instructions="Read pages with web.fetch and cite them as [[S:n]].")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    return [ToolPack(id="web", options={"fetch": {"allow_private_addresses": True}})]
'''


class PageServer(LocalServer):
    """A small website on 127.0.0.1 with one article; counts the pages it served."""

    def __init__(self) -> None:
        self.served: list[str] = []
        super().__init__(Starlette(routes=[Route("/articles/tides", self._article)]))

    async def _article(self, request: Request) -> HTMLResponse:
        self.served.append(request.url.path)
        return HTMLResponse(PAGE)


@pytest.fixture
def site() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


@pytest.fixture
def reader_bundle(tmp_path: Path) -> dict[str, object]:
    """The ``reader`` folder bundle, written to ``tmp_path``."""
    folder = tmp_path / "reader"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE))
    return {"reader": {"source": {"path": str(folder)}}}


async def test_a_fetched_page_is_cited_in_the_streamed_answer(
    tmp_path: Path, site: PageServer, reader_bundle: dict[str, object]
) -> None:
    url = f"{site.origin}/articles/tides"
    async with turn_harness(tmp_path, reader_bundle, tool_packs=berth_tool_packs()) as harness:
        result = await harness.turn(
            "reader",
            "When is high tide at Den Helder today?",
            script=[
                action("web.fetch", url=url),
                complete("High tide at Den Helder is at 09:41 [[S:1]].", ["And low tide?"]),
            ],
        )
        assert (result.outcome, result.rounds) == ("completed", 2)
        assert site.served == ["/articles/tides"]

        # the tool result reached the model with the page's text and its SID
        fetched = harness.of_type("tool.result")[0]
        assert (fetched["tool_id"], fetched["ok"]) == ("web.fetch", True)
        second = harness.model.requests[1].prompt
        assert "High tide at Den Helder on 22 November 2026 is at 09:41" in second.section_text("current_turn")
        assert "sources: [[S:1]]" in second.section_text("current_turn")
        assert "Cookie settings" not in second.section_text("current_turn")  # boilerplate is not the text
        assert PAGE_TITLE in second.section_text("sources")
        assert harness.of_type("citation.sources") == [
            {"sids": [1], "sources": [{"sid": 1, "url": url, "title": PAGE_TITLE}]}
        ]

        # the client saw the citation as a markdown link, streamed in pieces
        answer_deltas = [e for e in harness.of_type("channel.delta") if e["marker"] == "answer"]
        assert len(answer_deltas) > 1
        assert harness.streamed() == f"High tide at Den Helder is at 09:41 [{PAGE_TITLE}]({url})."
        completed = harness.of_type("turn.completed")[0]
        assert completed["sources_used"] == [{"sid": 1, "url": url, "title": PAGE_TITLE}]
        assert completed["answer"] == harness.streamed()  # clients get citations rendered, never raw tokens
        assert result.answer == "High tide at Den Helder is at 09:41 [[S:1]]."  # the stored answer stays raw
        assert result.sources_used == ({"sid": 1, "url": url, "title": PAGE_TITLE},)

        # the pool and the cited answer are persisted with the conversation
        restored = await restore_conversation(harness.store.conversation(harness.scope), now=harness.clock())
        assert [(row.sid, row.url, row.title) for row in restored.sources.rows] == [(1, url, PAGE_TITLE)]
        results = [b for b in restored.timeline.blocks if b.type == BlockType.REACT_TOOL_RESULT]
        assert results[0].meta["sids"] == [1]


async def test_a_source_fetched_in_an_earlier_turn_keeps_its_sid(
    tmp_path: Path, site: PageServer, reader_bundle: dict[str, object]
) -> None:
    url = f"{site.origin}/articles/tides"
    async with turn_harness(tmp_path, reader_bundle, tool_packs=berth_tool_packs()) as harness:
        await harness.turn("reader", "Read the tide page", script=[action("web.fetch", url=url), complete("Read it.")])
        result = await harness.turn(
            "reader",
            "How big is the tidal range?",
            script=[
                action("web.fetch", url=url + "#range"),  # the same page: the same pool row
                complete("Up to 3 metres near the Elbe [[S:1]]; see also [[S:2]]."),
            ],
        )
        assert result.sources_used == ({"sid": 1, "url": url, "title": PAGE_TITLE},)
        # an unknown SID is not invented, and never shown raw: its token is dropped with the space before it
        # (docs/streaming.md)
        assert harness.streamed().endswith(f"Up to 3 metres near the Elbe [{PAGE_TITLE}]({url}); see also.")
        assert [event["sids"] for event in harness.of_type("citation.sources")] == [[1], [1]]


async def test_web_search_without_a_backend_is_listed_inactive(
    tmp_path: Path, site: PageServer, reader_bundle: dict[str, object]
) -> None:
    async with turn_harness(tmp_path, reader_bundle, tool_packs=berth_tool_packs()) as harness:
        result = await harness.turn(
            "reader", "Search the web", script=[action("web.search", query="tides"), complete("I cannot search.")]
        )
        assert result.outcome == "completed"
        first = harness.model.requests[0].prompt
        assert "web.search: no search backend configured" in first.section_text("announce")
        assert "## web.fetch (read-only)" in first.section_text("system")
        assert [n["code"] for n in harness.of_type("notice")] == ["tool_inactive"]


async def test_a_fetched_page_is_listed_where_it_arrived_and_not_again_in_the_next_turns_pool(
    tmp_path: Path, site: PageServer, reader_bundle: dict[str, object]
) -> None:
    url = f"{site.origin}/articles/tides"
    async with turn_harness(tmp_path, reader_bundle, tool_packs=berth_tool_packs()) as harness:
        await harness.turn("reader", "High tide?", script=[action("web.fetch", url=url), complete("At 09:41 [[S:1]].")])
        await harness.turn("reader", "And low tide?", script=[complete("At 16:05 [[S:1]].")])
        fetched_round = harness.model.requests[1].prompt
        assert f"[S:1] {PAGE_TITLE} — {url}" in fetched_round.section_text("current_turn")
        next_turn = harness.model.requests[2].prompt
        assert f"[S:1] {PAGE_TITLE} — {url}" in next_turn.section_text("history")  # cached with the history
        assert PAGE_TITLE not in next_turn.section_text("sources")
        assert "1 more source is listed in the earlier turns' tool results above." in next_turn.section_text("sources")
        assert "[Tide tables of the Wadden Sea](" in harness.streamed()  # still cited and rendered as a link
