"""The ``web`` pack factory: options → ``web.fetch`` always, ``web.search`` when a backend is configured.

The fetcher (httpx, trafilatura) and the search backends are imported when a bundle's pack is built, not when the
host loads this plugin at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from berth.config.errors import ConfigError
from berth.default_plugins.tools.web.options import parse_web_pack_options
from berth.tools.results import ToolOutput  # in the tools' signatures, which build_tool_spec resolves

if TYPE_CHECKING:
    from berth.config.secrets import Secret
    from berth.default_plugins.tools.web.fetching import PageFetcher
    from berth.default_plugins.tools.web.search import SearchBackend, SearchBackendFactory, WebSearcher
    from berth.tools.packs import PackContext, PackTools, ToolPackFactory
    from berth.tools.spec import ToolSpec

PACK_ID = "web"
NO_SEARCH_BACKEND = "no search backend configured"
SEARXNG = "searxng"
""":data:`berth.default_plugins.tools.web.searxng.BACKEND_NAME` (named here: listing it imports nothing)."""


def searxng_backend(options: Mapping[str, Any], secret: Callable[[str], Secret]) -> SearchBackend:
    """The SearXNG backend (:meth:`~berth.default_plugins.tools.web.searxng.SearxngBackend.from_options`)."""
    from berth.default_plugins.tools.web.searxng import SearxngBackend

    return SearxngBackend.from_options(options, secret)


SEARCH_BACKENDS: Mapping[str, SearchBackendFactory] = MappingProxyType({SEARXNG: searxng_backend})
"""The search backends shipped with Berth, by the name ``search.backend`` selects."""


def make_web_pack(search_backends: Mapping[str, SearchBackendFactory] = SEARCH_BACKENDS) -> ToolPackFactory:
    """A ``web`` pack factory that knows ``search_backends`` (the shipped ones unless given).

    A plugin that brings its own search service registers ``make_web_pack({**SEARCH_BACKENDS, "mine": ...})``
    under its own pack id, or passes it to tests.
    """
    backends = dict(search_backends)

    def web_pack(ctx: PackContext) -> PackTools:
        """Build the pack's tools for one bundle generation and scope (see :func:`build_web_tools`)."""
        return build_web_tools(ctx, backends)

    return web_pack


def build_web_tools(ctx: PackContext, search_backends: Mapping[str, SearchBackendFactory]) -> PackTools:
    """The pack's tools for ``ctx``.

    Raises :class:`ConfigError` ``tool_pack_options`` for options that do not validate or name an
    unknown backend. A backend whose secret cannot be read in this scope leaves ``web.search``
    inactive with the reason, so one tenant's missing key does not break the bundle elsewhere.
    """
    from berth.default_plugins.tools.web.fetching import PageFetcher
    from berth.default_plugins.tools.web.search import WebSearcher
    from berth.tools.packs import PackTools

    options = parse_web_pack_options(ctx.pack_id, ctx.options)
    tools = [_fetch_tool(PageFetcher(options.fetch))]
    inactive: dict[str, str] = {}
    search_id = f"{ctx.pack_id}.search"
    if options.search is None:
        inactive[search_id] = NO_SEARCH_BACKEND
        return PackTools(tools=tools, inactive=inactive)
    name = options.search.backend
    factory = search_backends.get(name)
    if factory is None:
        known = ", ".join(sorted(search_backends)) or "none installed"
        message = f"tool pack '{ctx.pack_id}' options: search.backend '{name}' is unknown (known: {known})"
        raise ConfigError("tool_pack_options", message)
    try:
        backend = factory(options.search.backend_options, ctx.secret)
    except ConfigError as exc:
        if exc.code == "tool_pack_options":
            raise
        inactive[search_id] = f"search backend '{name}' unavailable: {exc}"
        return PackTools(tools=tools, inactive=inactive)
    tools.append(_search_tool(WebSearcher(backend, name, options.search.max_results)))
    return PackTools(tools=tools, inactive=inactive)


def _fetch_tool(fetcher: PageFetcher) -> ToolSpec:
    async def fetch(url: str, max_chars: int | None = None) -> ToolOutput:
        """Fetch a web page (http or https) and return its main text, title and final URL.

        HTML pages are reduced to their main text (no navigation or boilerplate); text and JSON come back
        as they are; PDFs and other binary content are refused. The page joins the sources pool, so its
        SID can be cited.

        Args:
            url: the absolute http(s) URL to fetch.
            max_chars: how many characters of text to return (the pack's default when omitted).
        """
        return await fetcher.fetch(url, max_chars)

    from berth.tools.spec import build_tool_spec

    return build_tool_spec(fetch, name="fetch", read_only=True)


def _search_tool(searcher: WebSearcher) -> ToolSpec:
    async def search(query: str, max_results: int | None = None) -> ToolOutput:
        """Search the web and return the best hits (url, title, snippet, published date).

        Every hit joins the sources pool; fetch a hit with web.fetch to read the whole page.

        Args:
            query: what to search for, as you would type it into a search engine.
            max_results: how many hits to return (the pack's limit when omitted).
        """
        return await searcher.search(query, max_results)

    from berth.tools.spec import build_tool_spec

    return build_tool_spec(search, name="search", read_only=True)
