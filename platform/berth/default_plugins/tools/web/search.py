"""``web.search``: the seam between the tool and whatever search service a deployment uses.

A backend is one small protocol (:class:`SearchBackend`); a factory builds it from the pack's
``search`` options and the scope's secret reader. Backends raise
:class:`~berth.default_plugins.tools.web.errors.WebToolError` (``search_timeout``, ``search_failed``) for
failures the model should see, with messages that never contain a secret or the request URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from berth.config.errors import ConfigError
from berth.config.secrets import Secret
from berth.default_plugins.tools.web.errors import SEARCH_FAILED, WebToolError
from berth.default_plugins.tools.web.url_safety import FETCHABLE_SCHEMES
from berth.runtime.sources import normalize_url
from berth.tools.results import SourceCandidate, ToolOutput


class SearchHit(BaseModel):
    """One search result: where it is, what it is called, what the engine quoted from it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    title: str = ""
    snippet: str = ""
    published_at: datetime | None = None


class SearchBackend(Protocol):
    """A search service behind ``web.search``."""

    async def search(self, query: str, limit: int) -> list[SearchHit]:
        """Return at most ``limit`` hits for ``query``, best first."""
        ...


SearchBackendFactory = Callable[[Mapping[str, Any], Callable[[str], Secret]], SearchBackend]
"""Builds a backend from its options (the pack's ``search`` options minus ``backend`` and
``max_results``) and the scope's ``secret()`` reader; raises :class:`~berth.config.errors.ConfigError`
for options it cannot use."""


def read_secret_option(value: str, secret: Callable[[str], Secret]) -> Secret:
    """Resolve an option naming a secret: ``secret:NAME`` (a platform secret) or ``b:NAME`` (the bundle's own).

    Raises :class:`~berth.config.errors.ConfigError` when the value is not such a reference (a key
    written inline into a tools descriptor would end up in logs and version control) or the secret is missing.
    """
    if value.startswith("secret:"):
        return secret(value.removeprefix("secret:"))
    if value.startswith("b:"):
        return secret(value)
    raise ConfigError(
        "tool_pack_options", "a secret option must be 'secret:NAME' or 'b:NAME', never the secret value itself"
    )


class WebSearcher:
    """Runs ``web.search`` on one backend: bounds the hit count, keeps http(s) hits once each."""

    def __init__(self, backend: SearchBackend, backend_name: str, max_results: int) -> None:
        self._backend = backend
        self._backend_name = backend_name
        self._max_results = max_results

    async def search(self, query: str, max_results: int | None = None) -> ToolOutput:
        """Search and return the hits, each also a source for the pool; failures are error results."""
        query = query.strip()
        if not query:
            return WebToolError(SEARCH_FAILED, "the query is empty; say what to search for").to_output()
        limit = max(1, min(max_results or self._max_results, self._max_results))
        try:
            hits = await self._backend.search(query, limit)
        except WebToolError as error:
            return error.to_output()
        except Exception as exc:  # a tool reports its failures; it never raises into the turn
            return WebToolError(
                SEARCH_FAILED, f"search backend '{self._backend_name}' failed unexpectedly ({type(exc).__name__})"
            ).to_output()
        kept = _citable_once(hits)[:limit]
        return ToolOutput(
            value={"query": query, "results": [hit.model_dump(mode="json") for hit in kept]},
            sources=[
                SourceCandidate(
                    url=hit.url, title=hit.title, text=hit.snippet, source_type="web", published_at=hit.published_at
                )
                for hit in kept
            ],
        )


def _citable_once(hits: Sequence[SearchHit]) -> list[SearchHit]:
    seen: set[str] = set()
    kept: list[SearchHit] = []
    for hit in hits:
        if hit.url.split(":", 1)[0].lower() not in FETCHABLE_SCHEMES:
            continue
        key = normalize_url(hit.url)
        if key not in seen:
            seen.add(key)
            kept.append(hit)
    return kept
