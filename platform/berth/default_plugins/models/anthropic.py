"""The ``anthropic`` model provider: the official SDK, streaming, prompt caching at the renderer's checkpoints.

Mapping of a :class:`~berth.runtime.render.RenderedPrompt` onto the Messages API:

* the system message's parts become ``system=[{type: text, text, cache_control?}]``;
* every user part becomes one text content block, followed by an ``image`` or ``document`` block with a base64
  source for each image or PDF the part carries (:mod:`berth.runtime.media`); consecutive user messages merge
  into a single user turn, since the API requires turns to alternate and the whole timeline is user-side context;
* a part whose ``cache_checkpoint`` is set, and only such a part, carries ``cache_control: {"type":
  "ephemeral"}`` on its last block (after its images and documents); more than four checkpoints are refused
  before sending (Anthropic's limit), as are a system message after user content and a prompt without user
  content;
* an empty part is left out (the API refuses empty text blocks); a checkpoint it carried moves to the
  block before it, which ends the same prefix.

``ModelRequest.temperature`` is not sent: the Messages API of the SDK generation Berth uses (2.x) has no
sampling-temperature parameter. Stop sequences are sent, and ``metadata["user_id"]`` becomes
``metadata.user_id``.

Transient failures (429, 529, ``overloaded_error``, 5xx, connection errors) are retried by
:func:`berth.models.retry.stream_with_retries`, the SDK's own retries are off so that one policy
governs. Errors are normalized into :mod:`berth.models.errors`.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

import anthropic
import httpx
from anthropic.resources.messages import DEPRECATED_MODELS
from anthropic.types import (
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    MetadataParam,
    RawMessageStreamEvent,
    TextBlockParam,
)

from berth.config.environment import sdk_variable
from berth.config.models.assembly import ModelRef
from berth.config.secrets import Secret
from berth.default_plugins.models.anthropic_names import (
    DEFAULT_BASE_URL,
    DEFAULT_SECRET_NAME,
    PROVIDER_NAME,
    SDK_BASE_URL_VARIABLE,
    SDK_KEY_VARIABLE,
)
from berth.models.errors import (
    ModelContextOverflow,
    ModelError,
    ModelProviderError,
    ProviderErrorCode,
)
from berth.models.protocol import (
    ModelCompleted,
    ModelEvent,
    ModelRequest,
    SecretLookup,
    StopReason,
    TextDelta,
    Usage,
    resolve_api_key,
)
from berth.models.retry import RetryPolicy, Sleep, TransientModelError, stream_with_retries
from berth.runtime.caching import MAX_CACHE_BREAKPOINTS
from berth.runtime.media import PromptMedia
from berth.runtime.render import PromptPart, RenderedPrompt

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_SECRET_NAME",
    "PROVIDER_NAME",
    "SDK_BASE_URL_VARIABLE",
    "SDK_KEY_VARIABLE",
    "AnthropicPrompt",
    "AnthropicProvider",
    "anthropic_prompt",
    "create_anthropic_provider",
    "model_deprecation",
    "normalize_anthropic_error",
]


_STOP_REASONS: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
}
_CODE_BY_STATUS: Final[dict[int, ProviderErrorCode]] = {
    400: "invalid_request",
    401: "authentication_failed",
    402: "payment_required",
    403: "permission_denied",
    404: "model_not_found",
    413: "request_too_large",
}
_CODE_BY_TYPE: Final[dict[str, ProviderErrorCode]] = {
    "invalid_request_error": "invalid_request",
    "authentication_error": "authentication_failed",
    "billing_error": "payment_required",
    "permission_error": "permission_denied",
    "not_found_error": "model_not_found",
    "request_too_large": "request_too_large",
}
_OVERFLOW_MARKERS: Final = ("prompt is too long", "context window", "context length", "input is too long")


def _transport_errors() -> tuple[type[Exception], ...]:
    """Low-level errors a broken stream raises (the SDK's HTTP client is httpx, or its fork httpx2)."""
    errors: list[type[Exception]] = [httpx.TransportError]
    try:
        import httpx2
    except ImportError:  # pragma: no cover - older SDKs use httpx itself
        return tuple(errors)
    errors.append(httpx2.TransportError)
    return tuple(errors)


_CONNECTION_ERRORS: Final[tuple[type[Exception], ...]] = (anthropic.APIConnectionError, *_transport_errors())


UserBlock = TextBlockParam | ImageBlockParam | DocumentBlockParam


@dataclass(frozen=True)
class AnthropicPrompt:
    """A rendered prompt in the Messages API's shape: ``system`` blocks and the blocks of one user turn."""

    system: list[TextBlockParam]
    user: list[UserBlock]

    @property
    def messages(self) -> list[MessageParam]:
        """The ``messages`` parameter: a single user turn holding every timeline block."""
        return [{"role": "user", "content": self.user}]

    def breakpoint_count(self) -> int:
        """Return how many blocks carry ``cache_control``."""
        return sum(block.get("cache_control") is not None for block in [*self.system, *self.user])


def _media_block(media: PromptMedia) -> UserBlock:
    data = base64.b64encode(media.data).decode("ascii")
    if media.kind == "pdf":
        document: DocumentBlockParam = {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": data},
        }
        return document
    image: ImageBlockParam = {
        "type": "image",
        "source": {"type": "base64", "media_type": media.mime, "data": data},  # type: ignore[typeddict-item]
    }
    return image


def _part_blocks(part: PromptPart) -> list[UserBlock]:
    """The part's text block (left out when empty), then its images and documents; the checkpoint on the last."""
    blocks: list[UserBlock] = [{"type": "text", "text": part.text}] if part.text.strip() else []
    blocks.extend(_media_block(media) for media in part.media)
    if blocks and part.cache_checkpoint is not None:
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
    return blocks


def anthropic_prompt(prompt: RenderedPrompt) -> AnthropicPrompt:
    """Map ``prompt`` onto the Messages API (see the module docstring for the rules).

    :raises ModelProviderError: ``invalid_prompt`` for more than four checkpoints, a system message after
        user content, or no user content at all.
    """
    checkpoints = prompt.breakpoint_count()
    if checkpoints > MAX_CACHE_BREAKPOINTS:
        raise ModelProviderError(
            "invalid_prompt",
            f"the prompt carries {checkpoints} cache checkpoints; Anthropic accepts at most {MAX_CACHE_BREAKPOINTS}",
        )
    system: list[TextBlockParam] = []
    user: list[UserBlock] = []
    previous: UserBlock | None = None
    for message in prompt.messages:
        if message.role == "system" and user:
            raise ModelProviderError(
                "invalid_prompt", "a system message follows user content; Anthropic takes system text only first"
            )
        for part in message.parts:
            blocks = _part_blocks(part)
            if not blocks:
                # An empty part ends the same prefix as the block before it, so its marker moves there.
                if part.cache_checkpoint is not None and previous is not None:
                    previous["cache_control"] = {"type": "ephemeral"}
                continue
            if message.role == "system":
                system.extend(block for block in blocks if block["type"] == "text")
            else:
                user.extend(blocks)
            previous = blocks[-1]
    if not user:
        raise ModelProviderError("invalid_prompt", "the prompt has no user content to send")
    return AnthropicPrompt(system=system, user=user)


def model_deprecation(model: str) -> str | None:
    """Return the SDK's end-of-life date for a deprecated ``model`` (for ``descriptors check``), else None."""
    return DEPRECATED_MODELS.get(model)


def _retry_after(response: httpx.Response | object) -> float | None:
    headers = getattr(response, "headers", None)
    raw = headers.get("retry-after") if headers is not None else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def normalize_anthropic_error(exc: anthropic.APIStatusError) -> ModelError | TransientModelError:
    """Turn an HTTP error or a mid-stream ``error`` event into a normalized (or transient) error."""
    mid_stream = exc.status_code == 200  # an `event: error` arrives on a response that started with 200
    status = exc.status_code
    error_type = exc.type if isinstance(exc.type, str) else "unknown_error"
    detail = exc.api_message if isinstance(exc.api_message, str) else f"HTTP {status}"
    where = f"Anthropic {error_type}" if mid_stream else f"Anthropic HTTP {status} {error_type}"
    described = f"{where}: {detail}"
    retry_after = None if mid_stream else _retry_after(exc.response)
    if error_type in {"rate_limit_error", "overloaded_error"} or status in {429, 529}:
        return TransientModelError("rate_limited", described, retry_after_s=retry_after)
    if error_type in {"api_error", "timeout_error"} or status >= 500 or status == 408:
        return TransientModelError("unavailable", described, retry_after_s=retry_after)
    if any(marker in detail.lower() for marker in _OVERFLOW_MARKERS) and status in {200, 400, 413}:
        return ModelContextOverflow(f"{described}; compact the conversation and retry")
    code = _CODE_BY_TYPE.get(error_type) or _CODE_BY_STATUS.get(status) or "provider_error"
    return ModelProviderError(code, described)


class AnthropicProvider:
    """A :class:`~berth.models.protocol.ModelProvider` over ``anthropic.AsyncAnthropic``.

    :param model_ref: the configured model (``model``, ``max_output_tokens``, ``base_url``).
    :param api_key: the resolved key; revealed once, to the SDK client.
    :param retry: the backoff policy for transient failures.
    :param sleep: waits between attempts (``asyncio.sleep``; a recorder in tests).
    :param rand: the jitter source, in ``[0, 1)``.
    :param timeout_s: the SDK's request timeout.
    """

    def __init__(
        self,
        model_ref: ModelRef,
        *,
        api_key: Secret,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        timeout_s: float = 600.0,
    ) -> None:
        self.model_ref = model_ref
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rand = rand
        # base_url is always explicit: the configured one, else ANTHROPIC_BASE_URL (read by the config layer, as
        # the SDK would), else Anthropic's API; the SDK never reads the environment behind the host's back.
        self.base_url = model_ref.base_url or sdk_variable(SDK_BASE_URL_VARIABLE) or DEFAULT_BASE_URL
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key.reveal(),
            base_url=self.base_url,
            max_retries=0,
            timeout=timeout_s,
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model_ref.model!r}, base_url={self.base_url!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response (see :meth:`berth.models.protocol.ModelProvider.stream`)."""
        prompt = anthropic_prompt(request.prompt)

        def attempt(number: int) -> AsyncIterator[ModelEvent]:
            return self._attempt(request, prompt)

        async for event in stream_with_retries(attempt, policy=self._retry, sleep=self._sleep, rand=self._rand):
            yield event

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    async def _attempt(self, request: ModelRequest, prompt: AnthropicPrompt) -> AsyncIterator[ModelEvent]:
        metadata: MetadataParam | anthropic.Omit = anthropic.omit
        if "user_id" in request.metadata:
            metadata = {"user_id": request.metadata["user_id"]}
        try:
            response = await self._client.messages.create(
                model=self.model_ref.model,
                max_tokens=request.output_limit(self.model_ref),
                system=prompt.system if prompt.system else anthropic.omit,
                messages=prompt.messages,
                stop_sequences=list(request.stop_sequences) if request.stop_sequences else anthropic.omit,
                metadata=metadata,
                stream=True,
            )
            async with response:
                async for event in self._events(response):
                    yield event
        except anthropic.APIStatusError as exc:
            raise normalize_anthropic_error(exc) from None
        except _CONNECTION_ERRORS as exc:
            raise TransientModelError(
                "unavailable",
                f"Anthropic at {self.base_url} unreachable ({type(exc).__name__})",
            ) from None
        except anthropic.AnthropicError as exc:
            raise ModelProviderError("invalid_response", f"Anthropic response not understood: {exc}") from None

    async def _events(self, response: AsyncIterator[RawMessageStreamEvent]) -> AsyncIterator[ModelEvent]:
        usage = Usage()
        stop_reason: StopReason = "other"
        stop_sequence: str | None = None
        async for event in response:
            if event.type == "message_start":
                start = event.message.usage
                usage = Usage(
                    input_tokens=start.input_tokens,
                    output_tokens=start.output_tokens,
                    cache_read_input_tokens=start.cache_read_input_tokens or 0,
                    cache_creation_input_tokens=start.cache_creation_input_tokens or 0,
                )
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                if event.delta.text:
                    yield TextDelta(text=event.delta.text)
            elif event.type == "message_delta":
                stop_reason = _STOP_REASONS.get(event.delta.stop_reason or "", "other")
                stop_sequence = event.delta.stop_sequence
                delta = event.usage
                # message_delta usage is cumulative; fields it leaves out keep their message_start value.
                usage = Usage(
                    input_tokens=usage.input_tokens if delta.input_tokens is None else delta.input_tokens,
                    output_tokens=delta.output_tokens,
                    cache_read_input_tokens=usage.cache_read_input_tokens
                    if delta.cache_read_input_tokens is None
                    else delta.cache_read_input_tokens,
                    cache_creation_input_tokens=usage.cache_creation_input_tokens
                    if delta.cache_creation_input_tokens is None
                    else delta.cache_creation_input_tokens,
                )
            elif event.type == "message_stop":
                yield ModelCompleted(stop_reason=stop_reason, usage=usage, stop_sequence=stop_sequence)
                return
        raise TransientModelError("unavailable", "Anthropic's stream ended before message_stop")


def create_anthropic_provider(model_ref: ModelRef, secrets: SecretLookup) -> AnthropicProvider:
    """Build the provider for ``model_ref``: the key is ``model_ref.api_key``, else the platform secret
    ``anthropic_api_key``, else (when that secret is not declared) ``ANTHROPIC_API_KEY``; the base URL is
    ``model_ref.base_url``, else ``ANTHROPIC_BASE_URL``, else Anthropic's API."""
    return AnthropicProvider(
        model_ref, api_key=resolve_api_key(model_ref, secrets, DEFAULT_SECRET_NAME, SDK_KEY_VARIABLE)
    )
