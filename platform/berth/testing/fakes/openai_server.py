"""A local stand-in for an OpenAI-compatible ``/v1/chat/completions`` server (vLLM, llama.cpp, Ollama), for tests.

``POST /v1/chat/completions`` with ``stream: true`` answers server-sent events: a first chunk with
``delta.role``, content chunks, a chunk with ``finish_reason``, a usage chunk (``choices: []``) when the
request asked for ``stream_options.include_usage``, then ``data: [DONE]``. Errors use the OpenAI body
``{"error": {"message", "type", "param", "code"}}``; a prompt over ``context_window`` gets vLLM's
"maximum context length" 400. Responses are scripted per test, requests recorded, tokens estimated at
four characters each.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from berth.testing.fakes.media import decode_base64, image_problem, pdf_tokens
from berth.testing.fakes.serving import ScriptedServer

__all__ = ["ChatError", "ChatStreamError", "ChatText", "FakeOpenAIServer"]

_CHUNK_OBJECT: Final = "chat.completion.chunk"


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class ChatText:
    """A successful streamed answer."""

    text: str
    finish_reason: str = "stop"
    chunk_size: int = 5
    cached_tokens: int = 0


@dataclass(frozen=True)
class ChatError:
    """An HTTP error with OpenAI's error body."""

    status: int
    message: str
    error_type: str = "BadRequestError"
    code: str | int | None = None
    retry_after_s: int | None = None


@dataclass(frozen=True)
class ChatStreamError:
    """A stream that sends ``after_text`` and then a ``data: {"error": …}`` chunk."""

    message: str
    error_type: str = "server_error"
    after_text: str = ""


_Answer = ChatText | ChatError | ChatStreamError


def _prompt_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "".join(parts)


def _data_url(url: object) -> tuple[str, bytes] | None:
    """(media type, bytes) of a ``data:<type>;base64,<data>`` URL (None: not one)."""
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        return None
    media_type, _, data = url.removeprefix("data:").partition(";base64,")
    decoded = decode_base64(data)
    return None if decoded is None else (media_type, decoded)


def _item_problem(item: object) -> str | None:
    """Why a content item would be refused, as OpenAI's validation words it (None: accepted)."""
    if not isinstance(item, dict):
        return "content items must be objects"
    kind = item.get("type")
    if kind == "text":
        return None if isinstance(item.get("text"), str) else "text: expected a string"
    if kind == "image_url":
        image = item.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            return None
        found = _data_url(url)
        if found is None:
            return "image_url.url: Invalid image URL: expected a data URL with base64 data, or an http(s) URL"
        problem = image_problem(found[0], found[1], max_side=None)  # OpenAI scales large images itself
        return f"image_url: {problem}" if problem else None
    if kind == "file":
        file = item.get("file")
        found = _data_url(file.get("file_data")) if isinstance(file, dict) else None
        if found is None or found[0] != "application/pdf" or not found[1].startswith(b"%PDF-"):
            return "file.file_data: Invalid file data: expected a base64 data URL of a PDF"
        return None
    return f"Invalid value: {kind!r}. Supported values are: 'text', 'image_url', 'file'"


def _media_tokens(body: dict[str, Any]) -> int:
    tokens = 0
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        for item in content if isinstance(content, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "image_url":
                tokens += 765  # a 1024 x 1024 image at high detail: 85 + 170 x 4 tiles
            elif item.get("type") == "file":
                found = _data_url(item["file"].get("file_data"))
                tokens += pdf_tokens(found[1]) if found else 0
    return tokens


class FakeOpenAIServer(ScriptedServer[_Answer]):
    """A scripted chat-completions API on ``127.0.0.1``; ``base_url`` (ending in ``/v1``) is what to configure.

    :param api_key: the bearer token required (None: no ``Authorization`` needed).
    :param context_window: prompt plus ``max_tokens`` beyond it is refused like vLLM does.
    """

    def __init__(self, *, api_key: str | None = None, context_window: int = 32_768) -> None:
        self._api_key = api_key
        self._context_window = context_window
        super().__init__(Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])]))

    @property
    def base_url(self) -> str:
        """The URL to configure as the model's ``base_url``."""
        return f"{self.origin}/v1"

    def push_text(self, text: str, *, finish_reason: str = "stop", chunk_size: int = 5, cached_tokens: int = 0) -> None:
        """Script a successful streamed answer (``cached_tokens`` is reported as prompt-cache hits)."""
        self._push(ChatText(text, finish_reason, chunk_size, cached_tokens))

    def push_error(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "BadRequestError",
        code: str | int | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        """Script an HTTP error."""
        self._push(ChatError(status, message, error_type, code, retry_after_s))

    def push_stream_error(self, message: str, *, error_type: str = "server_error", after_text: str = "") -> None:
        """Script a stream that breaks off with an error chunk."""
        self._push(ChatStreamError(message, error_type, after_text))

    def _error(self, request: Request, body: Any, error: ChatError) -> Response:
        self._record(request, body, error.status)
        headers = {} if error.retry_after_s is None else {"retry-after": str(error.retry_after_s)}
        payload = {"error": {"message": error.message, "type": error.error_type, "param": None, "code": error.code}}
        return JSONResponse(payload, status_code=error.status, headers=headers)

    async def _completions(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if self._api_key is not None and request.headers.get("authorization") != f"Bearer {self._api_key}":
            return self._error(
                request, body, ChatError(401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key")
            )
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return self._error(request, body, ChatError(400, "messages: field required"))
        for index, message in enumerate(body["messages"]):
            content = message.get("content") if isinstance(message, dict) else None
            for position, item in enumerate(content if isinstance(content, list) else []):
                problem = _item_problem(item)
                if problem is not None:
                    where = f"messages[{index}].content[{position}]"
                    return self._error(request, body, ChatError(400, f"Invalid {where}: {problem}"))
        prompt_tokens = _tokens(_prompt_text(body)) + _media_tokens(body)
        # OpenAI's own API and vLLM take either field (OpenAI's reasoning models refuse max_tokens)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        if prompt_tokens + max_tokens > self._context_window:
            return self._error(
                request,
                body,
                ChatError(
                    400,
                    f"This model's maximum context length is {self._context_window} tokens. However, you requested "
                    f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                    "completion). Please reduce the length of the messages or completion.",
                    code=400,
                ),
            )
        answer = self._next_answer()
        if answer is None:
            return self._error(
                request, body, ChatError(400, "the fake chat-completions server has no scripted answer; push one first")
            )
        if isinstance(answer, ChatError):
            return self._error(request, body, answer)
        text = answer.text if isinstance(answer, ChatText) else answer.after_text
        cached = answer.cached_tokens if isinstance(answer, ChatText) else 0
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": _tokens(text),
            "total_tokens": prompt_tokens + _tokens(text),
        }
        self._record(request, body, 200, usage)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._stream(answer, str(body.get("model", "")), usage, cached, include_usage),
            media_type="text/event-stream",
        )

    async def _stream(
        self,
        answer: ChatText | ChatStreamError,
        model: str,
        usage: dict[str, int],
        cached: int,
        include_usage: bool,
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        with self._lock:
            completion_id = f"chatcmpl-fake{self._count:06d}"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            payload = {"id": completion_id, "object": _CHUNK_OBJECT, "created": created, "model": model}
            payload.update(choices=choices, **extra)
            return f"data: {json.dumps(payload)}\n\n".encode()

        yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        text = answer.text if isinstance(answer, ChatText) else answer.after_text
        size = answer.chunk_size if isinstance(answer, ChatText) else 5
        for start in range(0, len(text), size):
            yield chunk([{"index": 0, "delta": {"content": text[start : start + size]}, "finish_reason": None}])
        if isinstance(answer, ChatStreamError):
            error = {"error": {"message": answer.message, "type": answer.error_type, "param": None, "code": 500}}
            yield f"data: {json.dumps(error)}\n\n".encode()
            return
        yield chunk([{"index": 0, "delta": {}, "finish_reason": answer.finish_reason}])
        if include_usage:
            reported = {**usage, "prompt_tokens_details": {"cached_tokens": cached}}
            yield chunk([], usage=reported)
        yield b"data: [DONE]\n\n"
