"""The ``openai-compatible`` model provider: streaming ``/v1/chat/completions`` over httpx.

For any server that speaks OpenAI's chat-completions protocol: vLLM, llama.cpp's server, Ollama, or
OpenAI itself. ``base_url`` is the API root including ``/v1`` (``http://127.0.0.1:8000/v1``; default
``https://api.openai.com/v1``). Without ``api_key`` no ``Authorization`` header is sent (local servers
need none); a hosted endpoint names its key, e.g. ``api_key: secret:openai_api_key``.

The rendered prompt becomes two messages: the system text and one user message with every timeline part
joined by the renderer's block separator (with images, a list of content items: text, ``image_url`` data URLs,
and PDFs as ``file`` items for a model whose ``modalities`` name pdf). Such servers have no explicit cache
markers; their automatic prefix caching profits from the renderer's stable prefix all the same. The stream is read as
server-sent events (``data:`` lines, ``[DONE]`` at the end); usage comes from the final chunk when the
server sends it (``stream_options.include_usage``), with ``prompt_tokens_details.cached_tokens``
reported as cache reads.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

from berth.config.models.assembly import ModelRef
from berth.config.secrets import Secret
from berth.hooks import hookimpl
from berth.models.errors import (
    ModelContextOverflow,
    ModelError,
    ModelProviderError,
    ProviderErrorCode,
)
from berth.models.events import ModelCompleted, ModelEvent, StopReason, TextDelta, Usage
from berth.models.retry import RetryPolicy, Sleep, TransientModelError, stream_with_retries

if TYPE_CHECKING:
    import httpx

    from berth.models.protocol import ModelProviderFactory, ModelRequest, SecretLookup
    from berth.runtime.media import PromptMedia
    from berth.runtime.render import RenderedPrompt

__all__ = [
    "DEFAULT_BASE_URL",
    "PROVIDER_NAME",
    "OpenAICompatibleProvider",
    "chat_messages",
    "create_openai_compatible_provider",
    "iter_sse_data",
    "normalize_chat_error",
]

PROVIDER_NAME: Final = "openai-compatible"
DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

_STOP_REASONS: Final[dict[str, StopReason]] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_CODE_BY_STATUS: Final[dict[int, ProviderErrorCode]] = {
    400: "invalid_request",
    401: "authentication_failed",
    402: "payment_required",
    403: "permission_denied",
    404: "model_not_found",
    413: "request_too_large",
    422: "invalid_request",
}
_OVERFLOW_MARKERS: Final = (
    "maximum context length",
    "context_length_exceeded",
    "context size",
    "exceed_context_size",
    "context window",
    "prompt is too long",
)


def _media_item(media: PromptMedia) -> dict[str, Any]:
    url = f"data:{media.mime};base64,{base64.b64encode(media.data).decode('ascii')}"
    if media.kind == "pdf":  # OpenAI's file input; sent only to a model whose modalities name pdf
        return {"type": "file", "file": {"filename": media.path.rsplit("/", 1)[-1], "file_data": url}}
    return {"type": "image_url", "image_url": {"url": url}}


def _content(items: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A message's content: its text as one string; with images, its items, adjacent texts joined."""
    from berth.runtime.render import BLOCK_SEPARATOR  # the renderer is loaded by the time a prompt is sent

    if all(item["type"] == "text" for item in items):
        return BLOCK_SEPARATOR.join(item["text"] for item in items)
    joined: list[dict[str, Any]] = []
    for item in items:
        if item["type"] == "text" and joined and joined[-1]["type"] == "text":
            joined[-1] = {"type": "text", "text": joined[-1]["text"] + BLOCK_SEPARATOR + item["text"]}
        else:
            joined.append(item)
    return joined


def chat_messages(prompt: RenderedPrompt) -> list[dict[str, Any]]:
    """Map ``prompt`` onto chat messages: one system message, then one user message per run of user messages.
    A message with images (or PDFs) has a list of content items in prompt order: its text, then each image as an
    ``image_url`` data URL (a PDF as a ``file`` with ``file_data``); without, its content is one string.

    :raises ModelProviderError: ``invalid_prompt`` when there is no user content.
    """
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for message in prompt.messages:
        if not runs or runs[-1][0] != message.role:
            runs.append((message.role, []))
        items = runs[-1][1]
        for part in message.parts:
            if part.text.strip():
                items.append({"type": "text", "text": part.text})
            items.extend(_media_item(media) for media in part.media)
    messages = [{"role": role, "content": _content(items)} for role, items in runs if items]
    if not any(message["role"] == "user" for message in messages):
        raise ModelProviderError("invalid_prompt", "the prompt has no user content to send")
    return messages


async def iter_sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Yield the ``data`` of each server-sent event in ``lines`` (multi-line data joined by newlines)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


def _error_fields(body: Any) -> tuple[str, str]:
    """Return ``(type or code, message)`` from the error shapes OpenAI-compatible servers use."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code") or "error"
        message = error.get("message") or error.get("detail") or json.dumps(error)[:500]
        return str(kind), str(message)
    if isinstance(error, str):
        return "error", error[:500]
    return "error", "no error detail"


def normalize_chat_error(
    status: int, body: Any, retry_after_s: float | None = None, *, mid_stream: bool = False
) -> ModelError | TransientModelError:
    """Turn an error answer (or a mid-stream error chunk) into a normalized (or transient) error."""
    kind, detail = _error_fields(body)
    where = "server error event" if mid_stream else f"HTTP {status}"
    described = f"chat-completions {where} {kind}: {detail}"
    if status == 429 or kind in {"rate_limit_exceeded", "rate_limit_error"}:
        return TransientModelError("rate_limited", described, retry_after_s=retry_after_s)
    haystack = f"{kind} {detail}".lower()
    if any(marker in haystack for marker in _OVERFLOW_MARKERS):
        return ModelContextOverflow(f"{described}; compact the conversation and retry")
    if status >= 500 or status == 408 or (mid_stream and kind in {"server_error", "internal_error"}):
        return TransientModelError("unavailable", described, retry_after_s=retry_after_s)
    return ModelProviderError(_CODE_BY_STATUS.get(status, "provider_error"), described)


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:  # an HTTP date; the computed backoff applies instead
        return None


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt_tokens = int(raw.get("prompt_tokens") or 0)
    details = raw.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return Usage(
        input_tokens=max(prompt_tokens - cached, 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_input_tokens=cached,
    )


OPENAI_API_HOST: Final = "api.openai.com"


def output_limit_field(model_ref: ModelRef, base_url: str) -> str:
    """The request field for the output limit: ``model_ref.output_limit_field``, or with ``auto``
    ``max_completion_tokens`` for OpenAI's own API and ``max_tokens`` for every other server."""
    if model_ref.output_limit_field != "auto":
        return model_ref.output_limit_field
    import httpx  # the plugin module is loaded by every host; httpx only by one that uses this provider

    host = httpx.URL(base_url).host
    return "max_completion_tokens" if host == OPENAI_API_HOST else "max_tokens"


class OpenAICompatibleProvider:
    """A :class:`~berth.models.protocol.ModelProvider` over a chat-completions endpoint.

    :param model_ref: the configured model (``model``, ``max_output_tokens``, ``base_url``).
    :param api_key: a bearer token, or None for servers that need none.
    :param retry: the backoff policy for 429, 5xx and connection errors.
    :param sleep: waits between attempts (``asyncio.sleep``; a recorder in tests).
    :param rand: the jitter source, in ``[0, 1)``.
    :param timeout_s: read timeout per request.
    """

    def __init__(
        self,
        model_ref: ModelRef,
        *,
        api_key: Secret | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        timeout_s: float = 600.0,
    ) -> None:
        self.model_ref = model_ref
        self._base_url = model_ref.base_url or DEFAULT_BASE_URL
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rand = rand
        import httpx

        headers = {"Authorization": f"Bearer {api_key.reveal()}"} if api_key is not None else {}
        self._client = httpx.AsyncClient(
            base_url=self._base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(model={self.model_ref.model!r}, base_url={self._base_url!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response (see :meth:`berth.models.protocol.ModelProvider.stream`)."""
        body: dict[str, Any] = {
            "model": self.model_ref.model,
            "messages": chat_messages(request.prompt),
            "stream": True,
            "stream_options": {"include_usage": True},
            output_limit_field(self.model_ref, self._base_url): request.output_limit(self.model_ref),
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop_sequences:
            body["stop"] = list(request.stop_sequences)
        if "user_id" in request.metadata:
            body["user"] = request.metadata["user_id"]

        def attempt(number: int) -> AsyncIterator[ModelEvent]:
            return self._attempt(body)

        async for event in stream_with_retries(attempt, policy=self._retry, sleep=self._sleep, rand=self._rand):
            yield event

    async def aclose(self) -> None:
        """Close the HTTP client's connection pool."""
        await self._client.aclose()

    async def _attempt(self, body: dict[str, Any]) -> AsyncIterator[ModelEvent]:
        import httpx

        try:
            async with self._client.stream("POST", "chat/completions", json=body) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    try:
                        error_body: Any = json.loads(raw)
                    except ValueError:
                        error_body = raw.decode("utf-8", "replace")
                    raise normalize_chat_error(response.status_code, error_body, _retry_after(response))
                async for event in self._events(response):
                    yield event
        except httpx.TransportError as exc:
            raise TransientModelError(
                "unavailable", f"chat-completions server at {self._base_url} unreachable ({type(exc).__name__})"
            ) from None

    async def _events(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        usage: Usage | None = None
        stop_reason: StopReason | None = None
        async for data in iter_sse_data(response.aiter_lines()):
            if data.strip() == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise ModelProviderError("invalid_response", f"a stream chunk is not JSON: {data[:200]!r}") from None
            if not isinstance(chunk, dict):
                raise ModelProviderError("invalid_response", f"a stream chunk is not an object: {data[:200]!r}")
            if "error" in chunk:
                raise normalize_chat_error(200, chunk, mid_stream=True)
            usage = _usage(chunk.get("usage")) or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if isinstance(text, str) and text:
                    yield TextDelta(text=text)
                finish = choice.get("finish_reason")
                if finish:
                    stop_reason = _STOP_REASONS.get(finish, "other")
        else:
            if stop_reason is None:
                raise TransientModelError("unavailable", "the chat-completions stream ended before [DONE]")
        yield ModelCompleted(stop_reason=stop_reason or "other", usage=usage or Usage())


def create_openai_compatible_provider(model_ref: ModelRef, secrets: SecretLookup) -> OpenAICompatibleProvider:
    """Build the provider for ``model_ref``; a key is sent only when ``model_ref.api_key`` names one."""
    api_key = secrets(model_ref.api_key) if model_ref.api_key is not None else None
    return OpenAICompatibleProvider(model_ref, api_key=api_key)


@hookimpl
def berth_model_providers() -> dict[str, ModelProviderFactory]:
    """Contribute the ``openai-compatible`` provider."""
    return {PROVIDER_NAME: create_openai_compatible_provider}
