"""A local stand-in for Anthropic's Messages API, speaking its streaming wire format, for tests.

Only remote LLMs may be faked in Berth's tests; this one is faithful where a client can tell:

* ``POST /v1/messages`` with ``stream: true`` answers ``text/event-stream`` with ``message_start``
  (usage: ``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``), ``content_block_start``, ``ping``, ``content_block_delta`` (``text_delta``),
  ``content_block_stop``, ``message_delta`` (``stop_reason``, ``usage.output_tokens``) and
  ``message_stop``; without ``stream`` it answers one JSON message;
* errors are Anthropic's JSON bodies ``{"type": "error", "error": {"type", "message"}}`` with the real
  statuses (400, 401, 429 with ``retry-after``, 529 …), or an ``event: error`` in the middle of a stream;
* requests are validated like the real API does for what Berth sends: the key (``x-api-key``, or
  ``Authorization: Bearer`` as current SDKs send it), the ``anthropic-version`` header, ``model``,
  ``max_tokens``, non-empty ``messages`` starting with a user turn and alternating, no empty text
  blocks, at most four ``cache_control`` blocks, and the context window ("prompt is too long: N tokens
  > W maximum");
* prompt caching is computed from the ``cache_control`` breakpoints received: a request reads from the
  cache the longest prefix that ends at a breakpoint written by an earlier request within the TTL (five
  minutes) and lies at most 20 blocks before one of its own breakpoints; it writes the prefix up to each
  of its breakpoints that reaches ``min_cacheable_tokens`` (1024, Anthropic's minimum for Sonnet-class
  models). ``cache_creation_input_tokens`` is what lies between the read prefix and the last
  breakpoint, ``input_tokens`` what follows it. Tokens are estimated at four characters each.

Responses are scripted per test, in order: :meth:`FakeAnthropicServer.push_text`,
:meth:`~FakeAnthropicServer.push_error`, :meth:`~FakeAnthropicServer.push_stream_error`,
:meth:`~FakeAnthropicServer.push_stream_cut`. A request with
nothing scripted gets a 400 that says so. Every request is recorded with its headers, body, status and
the usage reported (:attr:`FakeAnthropicServer.requests`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from berth.testing.fakes.media import PDF_MAX_BYTES, decode_base64, image_problem, image_tokens, pdf_tokens
from berth.testing.fakes.serving import RecordedRequest, ScriptedServer

__all__ = [
    "CACHE_LOOKBACK_BLOCKS",
    "DEFAULT_CACHE_TTL_S",
    "DEFAULT_MIN_CACHEABLE_TOKENS",
    "FakeAnthropicServer",
    "HttpError",
    "StreamCut",
    "StreamError",
    "TextResponse",
    "breakpoint_texts",
    "content_blocks",
    "estimate_tokens",
]

DEFAULT_CACHE_TTL_S: Final = 300.0
DEFAULT_MIN_CACHEABLE_TOKENS: Final = 1024
CACHE_LOOKBACK_BLOCKS: Final = 20
"""How far before a breakpoint the cache looks for an earlier-written prefix (Anthropic documents 20 blocks)."""
MAX_BREAKPOINTS: Final = 4


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` at four characters a token, rounded up."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class TextResponse:
    """A successful answer streaming ``text`` in chunks of ``chunk_size`` characters."""

    text: str
    stop_reason: str = "end_turn"
    chunk_size: int = 5


@dataclass(frozen=True)
class HttpError:
    """An HTTP error answer with Anthropic's error body."""

    status: int
    error_type: str
    message: str
    retry_after_s: int | None = None


@dataclass(frozen=True)
class StreamError:
    """A stream that starts (200), sends ``after_text``, then an ``event: error``."""

    error_type: str
    message: str
    after_text: str = ""


@dataclass(frozen=True)
class StreamCut:
    """A stream that sends ``after_text`` and then ends without ``message_stop`` (a dropped connection)."""

    after_text: str = ""


ScriptedAnswer = TextResponse | HttpError | StreamError | StreamCut


def content_blocks(body: Any) -> list[dict[str, Any]]:
    """Return the request's blocks in prompt order: system blocks, then each message's content blocks."""
    blocks: list[dict[str, Any]] = []
    system = body.get("system") if isinstance(body, dict) else None
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(block for block in system if isinstance(block, dict))
    for message in body.get("messages", []) if isinstance(body, dict) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(block for block in content if isinstance(block, dict))
    return blocks


def breakpoint_texts(body: Any) -> list[str]:
    """Return the text of every block carrying ``cache_control``, in order."""
    return [str(block.get("text", "")) for block in content_blocks(body) if block.get("cache_control")]


def _block_tokens(block: dict[str, Any]) -> int:
    if block.get("type") == "text":
        return estimate_tokens(str(block.get("text", "")))
    source = block.get("source")
    data = decode_base64(source.get("data")) if isinstance(source, dict) else None
    if data is not None and block.get("type") == "image":
        return image_tokens(data)
    if data is not None and block.get("type") == "document":
        return pdf_tokens(data)
    return estimate_tokens(json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True))


BLOCK_TYPES: Final = ("text", "image", "document")


def media_block_problem(block: dict[str, Any]) -> str | None:
    """Why an ``image`` or ``document`` block would be refused (None: it is accepted, or it is text)."""
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        expected = ", ".join(f"'{name}'" for name in BLOCK_TYPES)
        return f"Input tag {kind!r} found using 'type' does not match any of the expected tags: {expected}"
    if kind == "text":
        return None
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return f"{kind}.source.type: Input should be 'base64'"
    data = decode_base64(source.get("data"))
    if data is None:
        return f"{kind}.source.base64.data: invalid base64 data"
    if kind == "image":
        problem = image_problem(source.get("media_type"), data)
        return f"image.source.base64: {problem}" if problem else None
    if source.get("media_type") != "application/pdf":
        return "document.source.base64.media_type: Input should be 'application/pdf'"
    if not data.startswith(b"%PDF-"):
        return "document.source.base64.data: The PDF specified was not valid."
    if len(data) > PDF_MAX_BYTES:
        return f"document.source.base64: PDF exceeds {PDF_MAX_BYTES} bytes"
    return None


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class _PromptCache:
    """Prefix hashes written by earlier requests, with the time they were written or last read."""

    def __init__(self, ttl_s: float, min_tokens: int, clock: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._min_tokens = min_tokens
        self._clock = clock
        self._entries: dict[str, float] = {}

    def account(self, body: dict[str, Any]) -> dict[str, int]:
        """Return the request's usage split and record the prefixes it writes."""
        blocks = content_blocks(body)
        seed = hashlib.sha256(f"{body.get('model')}".encode())
        hashes: list[str] = []
        cumulative: list[int] = []
        total = 0
        for index, block in enumerate(blocks):
            # A prefix is identified by its blocks' content; where the cache marker sits is not part of it.
            seed.update(json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True).encode())
            seed.update(str(index).encode())
            hashes.append(seed.hexdigest())
            total += _block_tokens(block)
            cumulative.append(total)
        breakpoints = [i for i, block in enumerate(blocks) if block.get("cache_control")]
        now = self._clock()
        read_end = -1
        for point in breakpoints:
            for index in range(point, max(point - CACHE_LOOKBACK_BLOCKS, -1), -1):
                written = self._entries.get(hashes[index])
                if written is not None and now - written <= self._ttl_s and index > read_end:
                    read_end = index
                    break
        read = cumulative[read_end] if read_end >= 0 else 0
        if read_end >= 0:
            self._entries[hashes[read_end]] = now  # a hit refreshes the entry's lifetime
        created_end = read_end
        for point in breakpoints:
            if cumulative[point] >= self._min_tokens:
                self._entries[hashes[point]] = now
                created_end = max(created_end, point)
        created = cumulative[created_end] - read if created_end > read_end else 0
        return {
            "input_tokens": total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }


class FakeAnthropicServer(ScriptedServer[ScriptedAnswer]):
    """A scripted Messages API on ``127.0.0.1``; ``base_url`` is what to give the SDK.

    :param api_key: the key clients must send (None accepts any non-empty key).
    :param context_window: requests whose input exceeds it get Anthropic's "prompt is too long" 400.
    :param cache_ttl_s: prompt-cache lifetime (Anthropic's default ephemeral TTL is five minutes).
    :param min_cacheable_tokens: shortest prefix the cache stores.
    :param clock: seconds, monotonic; inject one to test expiry without waiting.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        context_window: int = 200_000,
        cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
        min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_key = api_key
        self._context_window = context_window
        self._cache = _PromptCache(cache_ttl_s, min_cacheable_tokens, clock)
        app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            ]
        )
        super().__init__(app)

    @property
    def base_url(self) -> str:
        """The URL to configure as the model's ``base_url``."""
        return self.origin

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The ``/v1/messages`` requests received so far, in order."""
        return [r for r in self.requests if r.path == "/v1/messages"]

    def push_text(self, text: str, *, stop_reason: str = "end_turn", chunk_size: int = 5) -> None:
        """Script a successful streamed answer."""
        self._push(TextResponse(text, stop_reason, chunk_size))

    def push_error(self, status: int, error_type: str, message: str, *, retry_after_s: int | None = None) -> None:
        """Script an HTTP error (e.g. ``429, "rate_limit_error"`` or ``529, "overloaded_error"``)."""
        self._push(HttpError(status, error_type, message, retry_after_s))

    def push_stream_error(self, error_type: str, message: str, *, after_text: str = "") -> None:
        """Script a stream that sends ``after_text`` and then an ``event: error``."""
        self._push(StreamError(error_type, message, after_text))

    def push_stream_cut(self, *, after_text: str = "") -> None:
        """Script a stream that sends ``after_text`` and ends before ``message_stop``."""
        self._push(StreamCut(after_text))

    def _request_id(self) -> str:
        with self._lock:
            self._count += 1
            return f"req_fake_{self._count:06d}"

    def _error(self, request: Request, body: Any, error: HttpError) -> Response:
        self._record(request, body, error.status)
        headers = {"request-id": self._request_id()}
        if error.retry_after_s is not None:
            headers["retry-after"] = str(error.retry_after_s)
        return JSONResponse(_error_body(error.error_type, error.message), status_code=error.status, headers=headers)

    def _validate(self, request: Request, body: Any) -> HttpError | None:
        # Older SDKs send the key as x-api-key, current ones as a bearer token; the API takes either.
        bearer = request.headers.get("authorization", "")
        key = request.headers.get("x-api-key") or (bearer[len("Bearer ") :] if bearer.startswith("Bearer ") else None)
        if not key or (self._api_key is not None and key != self._api_key):
            return HttpError(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return HttpError(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body, dict):
            return HttpError(400, "invalid_request_error", "The request body is not valid JSON.")
        if not isinstance(body.get("model"), str) or not body["model"]:
            return HttpError(400, "invalid_request_error", "model: Field required")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return HttpError(400, "invalid_request_error", "max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return HttpError(400, "invalid_request_error", "messages: at least one message is required")
        for index, message in enumerate(messages):
            expected = "user" if index % 2 == 0 else "assistant"
            role = message.get("role") if isinstance(message, dict) else None
            if role != expected:
                return HttpError(
                    400,
                    "invalid_request_error",
                    f"messages.{index}.role: roles must alternate between 'user' and 'assistant', "
                    f"starting with 'user' (got {role!r})",
                )
        blocks = content_blocks(body)
        for index, message in enumerate(messages):
            content = message.get("content")
            for position, block in enumerate(content if isinstance(content, list) else []):
                problem = media_block_problem(block) if isinstance(block, dict) else "content blocks must be objects"
                if problem is not None:
                    return HttpError(400, "invalid_request_error", f"messages.{index}.content.{position}.{problem}")
        for index, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                return HttpError(400, "invalid_request_error", "messages: text content blocks must be non-empty")
            control = block.get("cache_control")
            if control is not None and (not isinstance(control, dict) or control.get("type") != "ephemeral"):
                return HttpError(400, "invalid_request_error", f"block {index}: cache_control.type must be 'ephemeral'")
        marked = sum(1 for block in blocks if block.get("cache_control"))
        if marked > MAX_BREAKPOINTS:
            return HttpError(
                400,
                "invalid_request_error",
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marked}.",
            )
        prompt_tokens = sum(_block_tokens(block) for block in blocks)
        if prompt_tokens > self._context_window:
            return HttpError(
                400,
                "invalid_request_error",
                f"prompt is too long: {prompt_tokens} tokens > {self._context_window} maximum",
            )
        return None

    async def _read_json(self, request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def _count_tokens(self, request: Request) -> Response:
        body = await self._read_json(request)
        tokens = sum(_block_tokens(block) for block in content_blocks(body))
        self._record(request, body, 200, {"input_tokens": tokens})
        return JSONResponse({"input_tokens": tokens})

    async def _messages(self, request: Request) -> Response:
        body = await self._read_json(request)
        invalid = self._validate(request, body)
        if invalid is not None:
            return self._error(request, body, invalid)
        answer = self._next_answer()
        if answer is None:
            received = len(self.message_requests) + 1
            return self._error(
                request,
                body,
                HttpError(
                    400,
                    "invalid_request_error",
                    f"the fake Anthropic server has no scripted answer for request {received}; push one first",
                ),
            )
        if isinstance(answer, HttpError):
            return self._error(request, body, answer)
        usage = self._cache.account(body)
        request_id = self._request_id()
        message_id = f"msg_fake_{request_id.rsplit('_', 1)[1]}"
        if isinstance(answer, TextResponse):
            usage_out = {**usage, "output_tokens": estimate_tokens(answer.text)}
        else:
            usage_out = {**usage, "output_tokens": estimate_tokens(answer.after_text)}
        self._record(request, body, 200, usage_out)
        headers = {"request-id": request_id}
        if not body.get("stream"):
            if not isinstance(answer, TextResponse):
                error = answer.error_type if isinstance(answer, StreamError) else "api_error"
                return JSONResponse(_error_body(error, "the response broke off"), status_code=500, headers=headers)
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [{"type": "text", "text": answer.text}],
                    "stop_reason": answer.stop_reason,
                    "stop_sequence": None,
                    "usage": usage_out,
                },
                headers=headers,
            )
        headers["cache-control"] = "no-cache"
        return StreamingResponse(
            self._stream(answer, body["model"], message_id, usage, usage_out["output_tokens"]),
            media_type="text/event-stream; charset=utf-8",
            headers=headers,
        )

    async def _stream(
        self,
        answer: TextResponse | StreamError | StreamCut,
        model: str,
        message_id: str,
        usage: dict[str, int],
        output: int,
    ) -> AsyncIterator[bytes]:
        start_usage = {**usage, "output_tokens": 1}
        yield _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
        text = answer.text if isinstance(answer, TextResponse) else answer.after_text
        chunk_size = answer.chunk_size if isinstance(answer, TextResponse) else 5
        if text or isinstance(answer, TextResponse):
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
        yield _sse("ping", {"type": "ping"})
        for start in range(0, len(text), chunk_size):
            yield _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[start : start + chunk_size]},
                },
            )
        if isinstance(answer, StreamError):
            yield _sse("error", _error_body(answer.error_type, answer.message))
            return
        if isinstance(answer, StreamCut):
            return
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})
