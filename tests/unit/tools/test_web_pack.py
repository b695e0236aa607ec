"""The ``web`` tool pack: ``web.fetch`` against real pages on 127.0.0.1, ``web.search`` on a SearxNG-style API."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pluggy
import pytest
from web_playground import HUGE_BODY_BYTES, PlaygroundServer

import berth.default_plugins.tools.web as web_plugin
from berth import hooks
from berth.config.errors import ConfigError
from berth.config.secrets import Secret
from berth.default_plugins.tools.web import NO_SEARCH_BACKEND, SearchHit, make_web_pack
from berth.default_plugins.tools.web.errors import WebToolError
from berth.tools.packs import PackContext, PackTools
from berth.tools.results import ToolOutput
from berth.tools.spec import ToolSpec

API_KEY = "sk-test-5f1c2a"
LOCAL = {"allow_private_addresses": True}


def secret_reader(values: Mapping[str, str]) -> Callable[[str], Secret]:
    """A ``ctx.secret`` that knows ``values`` and refuses any other name like the real one does."""

    def read(name: str) -> Secret:
        if name not in values:
            raise ConfigError("secret_missing", f"secret '{name}' is not set for this scope")
        return Secret(name, values[name])

    return read


def web_tools(options: Mapping[str, Any] | None = None, secrets: Mapping[str, str] | None = None) -> PackTools:
    """Instantiate the pack the way the runtime does: the plugin's factory called with a PackContext."""
    factory = web_plugin.berth_tool_packs()["web"]
    ctx = PackContext(
        pack_id="web",
        options=options or {},
        bundle_id="docs-assistant",
        tenant="acme",
        project="support",
        settings=None,
        secret=secret_reader(secrets or {}),
    )
    return factory(ctx)


def tool(pack: PackTools, name: str) -> ToolSpec:
    return next(spec for spec in pack.tools if spec.name == name)


async def fetch(url: str, fetch_options: Mapping[str, Any] | None = None, **params: Any) -> ToolOutput:
    spec = tool(web_tools({"fetch": {**LOCAL, **(fetch_options or {})}}), "fetch")
    output = await spec.invoke({"url": url, **params})
    assert isinstance(output, ToolOutput)
    return output


def searxng(server: PlaygroundServer, path: str = "/search", **options: Any) -> dict[str, Any]:
    return {"search": {"backend": "searxng", "endpoint": server.url(path), **options}}


async def search(pack: PackTools, query: str, **params: Any) -> ToolOutput:
    output = await tool(pack, "search").invoke({"query": query, **params})
    assert isinstance(output, ToolOutput)
    return output


def error_code(output: ToolOutput) -> str:
    assert output.is_error, output
    assert output.sources == []
    assert set(output.value) >= {"code", "message"}
    return str(output.value["code"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the pack and its registration ---------------------------------------------------------------


def test_the_plugin_contributes_the_web_pack_through_the_hook() -> None:
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    manager.register(web_plugin, name="web")
    (contribution,) = manager.hook.berth_tool_packs()
    assert list(contribution) == ["web"]


def test_without_a_search_backend_only_fetch_is_offered_and_search_is_listed_inactive() -> None:
    pack = web_tools()
    assert [spec.name for spec in pack.tools] == ["fetch"]
    assert pack.inactive == {"web.search": NO_SEARCH_BACKEND}
    assert NO_SEARCH_BACKEND == "no search backend configured"


def test_both_tools_are_read_only_with_typed_params(playground: PlaygroundServer) -> None:
    pack = web_tools(searxng(playground))
    assert pack.inactive == {}
    fetch_spec, search_spec = tool(pack, "fetch"), tool(pack, "search")
    assert fetch_spec.read_only and search_spec.read_only
    assert fetch_spec.is_async and search_spec.is_async
    assert fetch_spec.input_schema["required"] == ["url"]
    assert search_spec.input_schema["required"] == ["query"]
    assert "max_chars" in fetch_spec.input_schema["properties"]
    assert "max_results" in search_spec.input_schema["properties"]


def test_invalid_options_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError) as caught:
        web_tools({"fetch": {"max_bytes": 0, "colour": "blue"}})
    assert caught.value.code == "tool_pack_options"
    assert "fetch.max_bytes" in str(caught.value)
    assert "fetch.colour" in str(caught.value)


def test_an_unknown_search_backend_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"search.backend 'bing' is unknown \(known: searxng\)"):
        web_tools({"search": {"backend": "bing"}})


def test_searxng_without_an_endpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match="endpoint"):
        web_tools({"search": {"backend": "searxng"}})


# -- web.fetch: content ---------------------------------------------------------------------------


async def test_fetch_returns_the_main_text_of_an_html_page_without_boilerplate(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/article"))
    assert not output.is_error
    page = output.value
    assert page["status"] == 200
    assert page["content_type"] == "text/html"
    assert "Harbour Berths" in page["title"]
    assert "designated location in a port" in page["text"]
    assert "Cookie settings" not in page["text"]
    assert "About us" not in page["text"]
    assert page["truncated"] is False
    assert page["url"] == page["final_url"] == playground.url("/article")


async def test_a_fetched_page_becomes_a_web_source_for_the_pool(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/article"))
    (source,) = output.sources
    assert source.url == output.value["final_url"]
    assert source.title == output.value["title"]
    assert source.text == output.value["text"]
    assert source.mime == "text/html"
    assert source.source_type == "web"


async def test_an_html_page_sent_without_content_type_is_recognised(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/untyped-article"))
    assert output.value["content_type"] == "text/html"
    assert "designated location in a port" in output.value["text"]


async def test_a_page_with_little_text_still_gives_its_title_and_text(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/tiny"))
    assert output.value["title"] == "Tiny & Short"
    assert output.value["text"] == "Hello harbour."


async def test_an_html_page_without_text_gives_its_title_and_empty_text(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/empty-page"))
    assert not output.is_error
    assert (output.value["title"], output.value["text"]) == ("Nothing here", "")


async def test_plain_text_comes_back_as_it_is(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/plain.txt"))
    assert output.value["text"] == "Line one\nLine two: café\n"
    assert output.value["content_type"] == "text/plain"
    assert output.value["title"] == ""
    assert output.sources[0].mime == "text/plain"


async def test_text_is_decoded_with_its_declared_charset(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/latin1.txt"))
    assert output.value["text"] == "Crème brûlée"


async def test_json_comes_back_as_text(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/data.json"))
    assert json.loads(output.value["text"]) == {"berths": 12, "port": "Example"}
    assert output.value["content_type"] == "application/json"


async def test_text_longer_than_max_chars_is_cut_and_marked_truncated(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/plain.txt"), max_chars=8)
    assert output.value["text"] == "Line one"
    assert output.value["truncated"] is True
    assert output.value["text_chars"] == len("Line one\nLine two: café\n")
    assert output.sources[0].text == "Line one"


async def test_max_chars_never_exceeds_the_pack_limit(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/plain.txt"), {"max_chars_limit": 4}, max_chars=1000)
    assert output.value["text"] == "Line"


async def test_a_pdf_is_refused_as_unsupported_content(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/paper.pdf"))
    assert error_code(output) == "unsupported_content"
    assert "PDF" in output.value["message"]
    assert output.value["content_type"] == "application/pdf"


async def test_a_redirect_is_followed_and_the_source_is_the_final_url(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/redirect"))
    assert output.value["url"] == playground.url("/redirect")
    assert output.value["final_url"] == playground.url("/article")
    assert output.sources[0].url == playground.url("/article")


# -- web.fetch: limits and failures ----------------------------------------------------------------


async def test_a_body_over_max_bytes_is_cut_early_and_reported_too_large(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/huge"), {"max_bytes": 100_000})
    assert error_code(output) == "fetch_too_large"
    assert "100000 bytes" in output.value["message"]
    assert playground.huge_finished.wait(10)
    assert playground.huge_bytes_sent < HUGE_BODY_BYTES


async def test_a_declared_length_over_max_bytes_is_refused_before_reading(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/huge-declared"), {"max_bytes": 100_000})
    assert error_code(output) == "fetch_too_large"


async def test_a_page_slower_than_the_time_limit_is_a_timeout(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/slow"), {"timeout_s": 0.2})
    assert error_code(output) == "fetch_timeout"
    assert "0.2 s" in output.value["message"]


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/broken", 500)])
async def test_an_http_error_status_is_reported_with_the_status(
    playground: PlaygroundServer, path: str, status: int
) -> None:
    output = await fetch(playground.url(path))
    assert error_code(output) == "fetch_http_error"
    assert output.value["status"] == status
    assert str(status) in output.value["message"]


async def test_a_redirect_loop_stops_at_max_redirects(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/redirect-loop"), {"max_redirects": 3})
    assert error_code(output) == "fetch_too_many_redirects"
    assert "3 times" in output.value["message"]


async def test_a_redirect_to_another_scheme_is_refused(playground: PlaygroundServer) -> None:
    output = await fetch(playground.url("/redirect-to-file"))
    assert error_code(output) == "unsafe_url"


async def test_a_refused_connection_is_reported_unreachable() -> None:
    output = await fetch(f"http://127.0.0.1:{free_port()}/")
    assert error_code(output) == "fetch_unreachable"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://files.example/a.txt", "javascript:alert(1)"])
async def test_non_http_schemes_are_refused_as_unsafe(url: str) -> None:
    output = await fetch(url)
    assert error_code(output) == "unsafe_url"
    assert "only http and https" in output.value["message"]


@pytest.mark.parametrize("url", ["not a url at all", "http://", "https:///path-only"])
async def test_malformed_urls_are_refused_as_invalid(url: str) -> None:
    output = await fetch(url)
    assert error_code(output) == "invalid_url"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.8/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost/",
    ],
)
async def test_private_and_local_addresses_are_refused_by_default(url: str) -> None:
    spec = tool(web_tools(), "fetch")
    output = await spec.invoke({"url": url})
    assert error_code(output) == "unsafe_url"
    assert "private or local address" in output.value["message"]


async def test_every_redirect_hop_is_checked_for_private_addresses(
    playground: PlaygroundServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The playground is on 127.0.0.1, so the check is narrowed to refuse only the name 'localhost'.
    async def refuse_localhost(url: httpx.URL) -> None:
        if url.host == "localhost":
            raise WebToolError("unsafe_url", "host 'localhost' is a private or local address")

    monkeypatch.setattr("berth.default_plugins.tools.web.fetching.ensure_public_host", refuse_localhost)
    spec = tool(web_tools(), "fetch")
    assert not (await spec.invoke({"url": playground.url("/article")})).is_error
    output = await spec.invoke({"url": playground.url("/redirect-to-localhost")})
    assert error_code(output) == "unsafe_url"


# -- web.search ----------------------------------------------------------------------------------


async def test_search_hits_come_back_once_each_and_become_sources(playground: PlaygroundServer) -> None:
    output = await search(web_tools(searxng(playground)), "berths")
    assert not output.is_error
    assert output.value["query"] == "berths"
    hits = output.value["results"]
    assert [hit["url"] for hit in hits] == ["https://ports.example/berths", "https://harbours.example/moorings"]
    assert hits[0] == {
        "url": "https://ports.example/berths",
        "title": "What is a berth?",
        "snippet": "A berth is a designated location in a port.",
        "published_at": "2024-05-01T10:00:00",
    }
    assert [(s.url, s.title, s.text, s.source_type) for s in output.sources] == [
        (hit["url"], hit["title"], hit["snippet"], "web") for hit in hits
    ]
    assert output.sources[0].published_at is not None


async def test_search_sends_the_query_as_searxng_json_request(playground: PlaygroundServer) -> None:
    await search(web_tools(searxng(playground, params={"language": "en"})), "harbour berths")
    (request,) = playground.search_requests
    assert request["params"] == {"q": "harbour berths", "format": "json", "language": "en"}


async def test_max_results_bounds_the_hits(playground: PlaygroundServer) -> None:
    output = await search(web_tools(searxng(playground)), "berths", max_results=1)
    assert [hit["url"] for hit in output.value["results"]] == ["https://ports.example/berths"]
    assert len(output.sources) == 1


async def test_the_api_key_is_sent_as_a_bearer_header_and_never_shown(playground: PlaygroundServer) -> None:
    pack = web_tools(searxng(playground, api_key="secret:SEARCH_KEY"), secrets={"SEARCH_KEY": API_KEY})
    output = await search(pack, "berths")
    (request,) = playground.search_requests
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in output.model_dump_json()


async def test_a_bundle_secret_may_hold_the_api_key_sent_as_a_query_parameter(playground: PlaygroundServer) -> None:
    options = searxng(playground, api_key="b:searx_token", api_key_param="token")
    pack = web_tools(options, secrets={"b:searx_token": API_KEY})
    await search(pack, "berths")
    (request,) = playground.search_requests
    assert request["params"]["token"] == API_KEY
    assert "Authorization" not in request["headers"]


async def test_a_custom_header_carries_the_bare_key(playground: PlaygroundServer) -> None:
    options = searxng(playground, api_key="secret:SEARCH_KEY", api_key_header="X-API-Key", api_key_scheme="")
    await search(web_tools(options, secrets={"SEARCH_KEY": API_KEY}), "berths")
    assert playground.search_requests[0]["headers"]["X-API-Key"] == API_KEY


def test_an_api_key_written_inline_is_refused_without_echoing_it(playground: PlaygroundServer) -> None:
    with pytest.raises(ConfigError) as caught:
        web_tools(searxng(playground, api_key=API_KEY))
    assert caught.value.code == "tool_pack_options"
    assert API_KEY not in str(caught.value)


def test_a_missing_search_secret_leaves_search_inactive_with_the_reason(playground: PlaygroundServer) -> None:
    pack = web_tools(searxng(playground, api_key="secret:SEARCH_KEY"))
    assert [spec.name for spec in pack.tools] == ["fetch"]
    assert pack.inactive["web.search"].startswith("search backend 'searxng' unavailable:")
    assert "SEARCH_KEY" in pack.inactive["web.search"]


@pytest.mark.parametrize(
    ("path", "code"),
    [("/search-broken", "search_failed"), ("/search-not-json", "search_failed"), ("/search-slow", "search_timeout")],
)
async def test_search_failures_are_error_results_that_never_show_the_key(
    playground: PlaygroundServer, path: str, code: str
) -> None:
    options = searxng(playground, path, api_key="secret:K", api_key_param="token", timeout_s=0.2)
    output = await search(web_tools(options, secrets={"K": API_KEY}), "berths")
    assert error_code(output) == code
    assert API_KEY not in output.model_dump_json()
    assert playground.base_url not in output.value["message"]


async def test_an_unreachable_search_backend_is_a_search_failure() -> None:
    options = {"search": {"backend": "searxng", "endpoint": f"http://127.0.0.1:{free_port()}/search"}}
    output = await search(web_tools(options), "berths")
    assert error_code(output) == "search_failed"


async def test_an_empty_query_is_refused() -> None:
    output = await search(web_tools({"search": {"backend": "searxng", "endpoint": "http://127.0.0.1:9/"}}), "  ")
    assert error_code(output) == "search_failed"


# -- the search seam ----------------------------------------------------------------------------


class ListBackend:
    """An in-memory backend: answers every query with the same hits, or raises what it is given."""

    def __init__(self, hits: list[SearchHit], failure: Exception | None = None) -> None:
        self.hits = hits
        self.failure = failure
        self.calls: list[tuple[str, int]] = []

    async def search(self, query: str, limit: int) -> list[SearchHit]:
        self.calls.append((query, limit))
        if self.failure is not None:
            raise self.failure
        return self.hits[:limit]


def pack_with_backend(backend: ListBackend, **search_options: Any) -> PackTools:
    factory = make_web_pack({"memory": lambda options, secret: backend})
    ctx = PackContext(
        pack_id="web",
        options={"search": {"backend": "memory", **search_options}},
        bundle_id="b",
        tenant=None,
        project=None,
        settings=None,
        secret=secret_reader({}),
    )
    return factory(ctx)


async def test_another_search_backend_plugs_in_by_name() -> None:
    backend = ListBackend([SearchHit(url="https://a.example/", title="A"), SearchHit(url="https://b.example/")])
    output = await search(pack_with_backend(backend, max_results=5), "ships", max_results=50)
    assert backend.calls == [("ships", 5)]
    assert [source.url for source in output.sources] == ["https://a.example/", "https://b.example/"]


async def test_a_backend_that_raises_unexpectedly_becomes_a_search_failure() -> None:
    backend = ListBackend([], failure=RuntimeError(f"boom with {API_KEY}"))
    output = await search(pack_with_backend(backend), "ships")
    assert error_code(output) == "search_failed"
    assert API_KEY not in output.model_dump_json()
    assert "RuntimeError" in output.value["message"]
