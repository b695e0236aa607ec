"""The ``searxng`` search backend: any HTTP endpoint that speaks SearxNG's JSON search API.

``GET <endpoint>?q=<query>&format=json`` answering ``{"results": [{"url", "title", "content",
"publishedDate"}, ...]}``. Options (``search:`` of the pack, besides ``backend: searxng``):

* ``endpoint`` (required) — the search URL, e.g. ``https://searx.example.org/search``;
* ``api_key`` — ``secret:NAME`` or ``b:NAME``, for a gateway in front of the engine;
* ``api_key_header`` (default ``Authorization``) and ``api_key_scheme`` (default ``Bearer``; empty
  sends the bare key) — how the key is sent; or ``api_key_param`` to send it as a query parameter;
* ``params`` — extra query parameters (``language``, ``categories``, ``safesearch``, …);
* ``timeout_s`` (default 10).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.config.errors import ConfigError
from berth.config.secrets import Secret
from berth.default_plugins.tools.web.errors import SEARCH_FAILED, SEARCH_TIMEOUT, WebToolError
from berth.default_plugins.tools.web.search import SearchBackend, SearchHit, read_secret_option

BACKEND_NAME = "searxng"


class SearxngOptions(BaseModel):
    """The options of the ``searxng`` backend (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str = Field(pattern=r"^https?://")
    api_key: str | None = None
    api_key_header: str = "Authorization"
    api_key_scheme: str = "Bearer"
    api_key_param: str | None = None
    params: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(10.0, gt=0)


class _SearxngResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str | None = None
    title: str | None = None
    content: str | None = None
    publishedDate: str | None = None  # noqa: N815 - SearxNG's field name


class _SearxngAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    results: list[_SearxngResult] = Field(default_factory=list)


class SearxngBackend:
    """Searches a SearxNG-compatible JSON endpoint."""

    def __init__(self, options: SearxngOptions, api_key: Secret | None = None) -> None:
        self._options = options
        self._api_key = api_key

    @classmethod
    def from_options(cls, options: Mapping[str, Any], secret: Callable[[str], Secret]) -> SearchBackend:
        """Build the backend from the pack's ``search`` options; the API key is resolved now, per scope."""
        try:
            parsed = SearxngOptions.model_validate(dict(options))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(options)'}: {e['msg']}" for e in exc.errors())
            raise ConfigError("tool_pack_options", f"search backend '{BACKEND_NAME}': {problems}") from None
        api_key = read_secret_option(parsed.api_key, secret) if parsed.api_key else None
        return cls(parsed, api_key)

    async def search(self, query: str, limit: int) -> list[SearchHit]:
        """Ask the endpoint; raises ``search_timeout`` / ``search_failed`` (never naming the URL or key)."""
        params: dict[str, str] = {**self._options.params, "q": query, "format": "json"}
        headers: dict[str, str] = {"Accept": "application/json"}
        if self._api_key is not None:
            key = self._api_key.reveal()
            if self._options.api_key_param:
                params[self._options.api_key_param] = key
            else:
                scheme = self._options.api_key_scheme.strip()
                headers[self._options.api_key_header] = f"{scheme} {key}" if scheme else key
        try:
            async with httpx.AsyncClient(timeout=self._options.timeout_s, trust_env=False) as client:
                response = await client.get(self._options.endpoint, params=params, headers=headers)
        except httpx.TimeoutException:
            raise WebToolError(
                SEARCH_TIMEOUT, f"the search backend did not answer within {self._options.timeout_s:g} s; try again"
            ) from None
        except httpx.HTTPError as exc:
            raise WebToolError(
                SEARCH_FAILED, f"the search backend could not be reached ({type(exc).__name__}); try again later"
            ) from None
        if response.status_code >= 400:
            raise WebToolError(
                SEARCH_FAILED, f"the search backend answered HTTP {response.status_code}; try again later"
            )
        try:
            answer = _SearxngAnswer.model_validate_json(response.content)
        except ValidationError:
            raise WebToolError(SEARCH_FAILED, "the search backend did not answer with SearxNG JSON results") from None
        hits = [
            SearchHit(
                url=result.url,
                title=(result.title or "").strip(),
                snippet=(result.content or "").strip(),
                published_at=_parse_date(result.publishedDate),
            )
            for result in answer.results
            if result.url
        ]
        return hits[:limit]


def _parse_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
