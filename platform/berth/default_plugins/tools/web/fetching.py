"""``web.fetch``: download one page within the pack's limits and return its text as a source.

The download follows redirects itself (so every hop is checked and counted), streams the body and
drops the connection as soon as ``max_bytes`` is passed, and runs under one overall deadline
(``timeout_s``) besides httpx's per-operation timeouts. Text extraction runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import httpx
from pydantic import BaseModel, ConfigDict

from berth.default_plugins.tools.web.errors import (
    FETCH_FAILED,
    FETCH_HTTP_ERROR,
    FETCH_TIMEOUT,
    FETCH_TOO_LARGE,
    FETCH_TOO_MANY_REDIRECTS,
    FETCH_UNREACHABLE,
    WebToolError,
)
from berth.default_plugins.tools.web.extraction import ContentType, extract_text, is_supported, unsupported
from berth.default_plugins.tools.web.options import FetchOptions
from berth.default_plugins.tools.web.url_safety import ensure_public_host, parse_fetch_url
from berth.tools.results import SourceCandidate, ToolOutput

_REDIRECT_STATUSES: Final[frozenset[int]] = frozenset({301, 302, 303, 307, 308})
_ACCEPT: Final = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"


class FetchedPage(BaseModel):
    """What ``web.fetch`` shows the model for a page it read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    final_url: str
    status: int
    content_type: str
    title: str
    text: str
    truncated: bool
    text_chars: int


@dataclass(frozen=True)
class _Download:
    final_url: httpx.URL
    status: int
    content_type: ContentType
    body: bytes


class PageFetcher:
    """Fetches pages for ``web.fetch`` with the limits of one pack instance."""

    def __init__(self, options: FetchOptions) -> None:
        self._options = options

    async def fetch(self, url: str, max_chars: int | None = None) -> ToolOutput:
        """Fetch ``url`` and return its text (bounded to ``max_chars``) with the page as a source.

        Every failure is a ``ToolOutput(is_error=True)`` with a stable code; nothing is raised.
        """
        limit = max(1, min(max_chars or self._options.max_chars, self._options.max_chars_limit))
        try:
            download = await self._download(url)
            extracted = await asyncio.to_thread(
                extract_text, download.body, download.content_type, str(download.final_url)
            )
        except WebToolError as error:
            return error.to_output()
        except Exception as exc:  # a tool reports its failures; it never raises into the turn
            message = f"fetching '{url}' failed unexpectedly ({type(exc).__name__})"
            return WebToolError(FETCH_FAILED, message).to_output()
        final_url = str(download.final_url)
        text = extracted.text[:limit]
        page = FetchedPage(
            url=url,
            final_url=final_url,
            status=download.status,
            content_type=extracted.mime,
            title=extracted.title,
            text=text,
            truncated=len(extracted.text) > len(text),
            text_chars=len(extracted.text),
        )
        source = SourceCandidate(
            url=final_url, title=extracted.title, text=text, mime=extracted.mime, source_type="web"
        )
        return ToolOutput(value=page.model_dump(mode="json"), sources=[source])

    async def _download(self, url: str) -> _Download:
        options = self._options
        try:
            async with asyncio.timeout(options.timeout_s), self._client() as client:
                return await self._follow(client, url)
        except (TimeoutError, httpx.TimeoutException):
            message = f"'{url}' did not answer within {options.timeout_s:g} s; try again later or use another source"
            raise WebToolError(FETCH_TIMEOUT, message) from None
        except httpx.TooManyRedirects:
            raise self._too_many_redirects(url) from None
        except httpx.TransportError as exc:
            raise WebToolError(
                FETCH_UNREACHABLE, f"'{url}' could not be reached ({type(exc).__name__}); check the URL"
            ) from None

    def _client(self) -> httpx.AsyncClient:
        options = self._options
        return httpx.AsyncClient(
            timeout=httpx.Timeout(options.timeout_s),
            follow_redirects=False,
            trust_env=False,
            proxy=options.proxy,
            headers={"User-Agent": options.user_agent, "Accept": _ACCEPT},
        )

    async def _follow(self, client: httpx.AsyncClient, url: str) -> _Download:
        target = parse_fetch_url(url)
        for _hop in range(self._options.max_redirects + 1):
            if not self._options.allow_private_addresses:
                await ensure_public_host(target)
            async with client.stream("GET", target) as response:
                location = response.headers.get("location")
                if response.status_code in _REDIRECT_STATUSES and location:
                    target = parse_fetch_url(str(response.url.join(location)))
                    continue
                return await self._read(response, url)
        raise self._too_many_redirects(url)

    async def _read(self, response: httpx.Response, url: str) -> _Download:
        if response.status_code >= 400:
            raise WebToolError(
                FETCH_HTTP_ERROR,
                f"'{response.url}' answered HTTP {response.status_code} {response.reason_phrase}".rstrip(),
                status=response.status_code,
            )
        content_type = ContentType.parse(response.headers.get("content-type"))
        if not is_supported(content_type.mime):
            raise unsupported(content_type.mime)
        max_bytes = self._options.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise self._too_large(url, max_bytes)
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise self._too_large(url, max_bytes)
        return _Download(response.url, response.status_code, content_type, bytes(body))

    def _too_large(self, url: str, max_bytes: int) -> WebToolError:
        return WebToolError(
            FETCH_TOO_LARGE,
            f"'{url}' is larger than the {max_bytes} bytes web.fetch may download; look for a smaller page",
            max_bytes=max_bytes,
        )

    def _too_many_redirects(self, url: str) -> WebToolError:
        return WebToolError(
            FETCH_TOO_MANY_REDIRECTS,
            f"'{url}' redirected more than {self._options.max_redirects} times; fetch the final address directly",
        )
