"""Model providers end to end: the real ``anthropic`` SDK and httpx against local fakes of the remote APIs.

The fakes (``berth.testing.fakes``) speak Anthropic's Messages streaming format and the OpenAI-compatible
chat-completions stream over 127.0.0.1, validate what they receive, and compute prompt-cache reads and
writes from the ``cache_control`` breakpoints they get. Prompts are rendered from real timelines by the
real renderer.
"""

from __future__ import annotations

import socket
import traceback
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from berth.config.models.assembly import ModelRef
from berth.config.models.common import SecretSetting
from berth.config.models.secrets import BundlesSecretsDescriptor
from berth.config.secrets import Secret, SecretResolver
from berth.default_plugins.models.anthropic import AnthropicProvider, create_anthropic_provider
from berth.default_plugins.models.openai_compatible import OpenAICompatibleProvider, create_openai_compatible_provider
from berth.models import (
    ModelCompleted,
    ModelContextOverflow,
    ModelError,
    ModelEvent,
    ModelProviderError,
    ModelRateLimited,
    ModelRequest,
    ModelUnavailable,
    RetryPolicy,
    TextDelta,
    Usage,
)
from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import Block, BlockType
from berth.runtime.render import RenderedPrompt, TimelineRenderer
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline
from berth.testing.fakes.anthropic_server import FakeAnthropicServer, breakpoint_texts
from berth.testing.fakes.openai_server import FakeOpenAIServer

API_KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-sonnet-5-5"
SYSTEM = "You are a careful assistant. Answer in channels.\n[TOOLS]\nreact.read\nweb.search\n" + "rules " * 700
T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


class Conversation:
    """A real timeline grown round by round, rendered the way the loop renders it (clock and budget move)."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.renderer = TimelineRenderer()
        self.turn_id = ""
        self.clock = T0
        self.iteration = 0

    def _block(self, type_: BlockType, path: str, **fields: object) -> Block:
        self.clock += timedelta(seconds=1)
        fields.setdefault("author", "runtime")
        return Block(type=type_, path=path, turn_id=self.turn_id, ts=self.clock, **fields)  # type: ignore[arg-type]

    def turn(self, turn_id: str) -> Conversation:
        self.turn_id, self.iteration = turn_id, 0
        self.timeline.contribute(
            self._block(BlockType.TURN_HEADER, f"ar:{turn_id}.turn.header"),
            self._block(
                BlockType.USER_PROMPT, f"ar:{turn_id}.user.prompt", text="Summarize the report.", author="user"
            ),
        )
        return self

    def tool_round(self, call_id: str) -> Conversation:
        t = self.turn_id
        self.timeline.contribute(
            self._block(BlockType.REACT_NOTES, f"ar:{t}.react.notes.{call_id}", text="read it", call_id=call_id),
            self._block(
                BlockType.REACT_TOOL_CALL,
                f"tc:{t}.{call_id}.call",
                mime="application/json",
                data={"tool_id": "react.read", "params": {"paths": [call_id]}},
                author="assistant",
            ),
            self._block(
                BlockType.REACT_TOOL_RESULT,
                f"tc:{t}.{call_id}.result",
                text=f"{call_id} " + "data " * 400,
                author="tool",
            ),
        )
        return self

    def final(self) -> Conversation:
        t = self.turn_id
        self.timeline.contribute(
            self._block(
                BlockType.ASSISTANT_COMPLETION, f"ar:{t}.assistant.completion", text="Done.", author="assistant"
            )
        )
        return self

    def render(self) -> RenderedPrompt:
        self.iteration += 1
        announce = AnnounceState(
            iteration=self.iteration,
            max_iterations=15,
            budget_tokens_left=150_000 - 5_000 * self.iteration,
            now=self.clock + timedelta(minutes=self.iteration),
        )
        return self.renderer.render(self.timeline, system=SYSTEM, sources=SourcesPool(), announce=announce)

    def request(self, **fields: object) -> ModelRequest:
        return ModelRequest(prompt=self.render(), **fields)  # type: ignore[arg-type]


class SleepRecorder:
    """Records backoff waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class FakeClock:
    """A monotonic clock the test moves by hand (for the prompt cache's TTL)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def drain(stream: AsyncIterator[ModelEvent], texts: list[str]) -> None:
    """Read ``stream`` to its end or its error, keeping the text deltas seen on the way."""
    async for event in stream:
        if isinstance(event, TextDelta):
            texts.append(event.text)


async def collect(stream: AsyncIterator[ModelEvent]) -> tuple[str, ModelCompleted]:
    events = [event async for event in stream]
    assert isinstance(events[-1], ModelCompleted)
    assert all(isinstance(event, TextDelta) for event in events[:-1])
    return "".join(e.text for e in events if isinstance(e, TextDelta)), events[-1]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def anthropic_server(clock: FakeClock) -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(api_key=API_KEY, clock=clock) as server:
        yield server


@pytest.fixture
def sleep() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
async def provider(anthropic_server: FakeAnthropicServer, sleep: SleepRecorder) -> AsyncIterator[AnthropicProvider]:
    ref = ModelRef(provider="anthropic", model=MODEL, max_output_tokens=1024, base_url=anthropic_server.base_url)
    provider = AnthropicProvider(
        ref,
        api_key=Secret("anthropic_api_key", API_KEY),
        retry=RetryPolicy(max_attempts=4, base_delay_s=1, max_delay_s=8, jitter=0.5),
        sleep=sleep,
        rand=lambda: 0.5,
    )
    yield provider
    await provider.aclose()


@pytest.fixture
def conversation() -> Conversation:
    return Conversation()


# --- anthropic: streaming and usage ------------------------------------------------------------------


async def test_streamed_text_arrives_in_order_through_the_real_sdk(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    answer = '<channel:thinking>check</channel:thinking><channel:action>{"action": "complete"}</channel:action>'
    anthropic_server.push_text(answer)
    events = [event async for event in provider.stream(conversation.turn("turn_1").request())]
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert len(deltas) > 10
    assert "".join(deltas) == answer
    assert events[-1] == ModelCompleted(stop_reason="end_turn", usage=events[-1].usage)  # type: ignore[union-attr]


async def test_the_request_carries_model_limits_and_stop_sequences(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    anthropic_server.push_text("ok", stop_reason="stop_sequence")
    request = conversation.turn("turn_1").request(stop_sequences=("</channel:action>",), metadata={"user_id": "u-1"})
    _, completed = await collect(provider.stream(request))
    body = anthropic_server.message_requests[0].body
    assert (body["model"], body["max_tokens"], body["stream"]) == (MODEL, 1024, True)
    assert body["stop_sequences"] == ["</channel:action>"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert [message["role"] for message in body["messages"]] == ["user"]
    assert completed.stop_reason == "stop_sequence"


async def test_usage_records_a_cache_write_then_a_cache_read_on_the_next_round(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    conversation.turn("turn_1").tool_round("c1").tool_round("c2")
    anthropic_server.push_text("round three")
    anthropic_server.push_text("round four")
    _, first = await collect(provider.stream(conversation.request()))
    conversation.tool_round("c3")
    _, second = await collect(provider.stream(conversation.request()))

    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens > 1024
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens > 0
    recorded = [r.usage for r in anthropic_server.message_requests]
    assert [{k: v for k, v in u.items() if k != "output_tokens"} for u in recorded if u is not None] == [
        {
            "input_tokens": c.usage.input_tokens,
            "cache_creation_input_tokens": c.usage.cache_creation_input_tokens,
            "cache_read_input_tokens": c.usage.cache_read_input_tokens,
        }
        for c in (first, second)
    ]


async def test_the_cache_goes_cold_after_five_minutes(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation, clock: FakeClock
) -> None:
    conversation.turn("turn_1").tool_round("c1")
    for text in ("a", "b", "c"):
        anthropic_server.push_text(text)
    await collect(provider.stream(conversation.request()))
    clock.now += 299
    _, warm = await collect(provider.stream(conversation.request()))
    clock.now += 301
    _, cold = await collect(provider.stream(conversation.request()))
    assert warm.usage.cache_read_input_tokens > 0
    assert cold.usage.cache_read_input_tokens == 0
    assert cold.usage.cache_creation_input_tokens == warm.usage.cache_read_input_tokens


async def test_cache_control_placement_equals_the_prompts_checkpoints_across_turns(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    conversation.turn("turn_1").tool_round("c1").final().turn("turn_2")
    prompts: list[RenderedPrompt] = []
    for n in range(1, 6):
        conversation.tool_round(f"c{n}")
        prompts.append(conversation.render())
        anthropic_server.push_text(f"round {n}")
        await collect(provider.stream(ModelRequest(prompt=prompts[-1])))

    received = anthropic_server.message_requests
    assert len(received) == len(prompts)
    for prompt, request in zip(prompts, received, strict=True):
        expected = [part.text for part in prompt.parts() if part.cache_checkpoint is not None]
        assert breakpoint_texts(request.body) == expected
        assert len(breakpoint_texts(request.body)) <= 4
    assert len(breakpoint_texts(received[-1].body)) == 4
    # The previous turn's prefix stays put: every round of turn 2 reads it from the cache.
    assert all(r.usage is not None and r.usage["cache_read_input_tokens"] > 0 for r in received[1:])


async def test_the_factory_sends_the_default_secret_as_the_api_key(
    anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    resolver = SecretResolver(
        {"anthropic_api_key": f"literal:{API_KEY}"},
        BundlesSecretsDescriptor(),
        base_dir=Path(),
    )

    def secrets(name: SecretSetting | str) -> Secret:
        return resolver.platform_secret(name) if isinstance(name, str) else resolver.resolve_setting(name)

    provider = create_anthropic_provider(ModelRef(model=MODEL, base_url=anthropic_server.base_url), secrets)
    anthropic_server.push_text("hello")
    try:
        text, _ = await collect(provider.stream(conversation.turn("turn_1").request()))
    finally:
        await provider.aclose()
    assert text == "hello"
    assert API_KEY in anthropic_server.message_requests[0].headers["authorization"]


# --- anthropic: errors ---------------------------------------------------------------------------------


async def test_a_429_is_retried_with_backoff_and_then_succeeds(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, sleep: SleepRecorder, conversation: Conversation
) -> None:
    anthropic_server.push_error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit")
    anthropic_server.push_error(429, "rate_limit_error", "still limited", retry_after_s=3)
    anthropic_server.push_text("finally")
    text, _ = await collect(provider.stream(conversation.turn("turn_1").request()))
    assert text == "finally"
    assert [r.status for r in anthropic_server.message_requests] == [429, 429, 200]
    assert sleep.waits == [0.75, 3.0]  # 1 s shortened by jitter 0.5 * 0.5, then the server's retry-after


async def test_overload_that_outlasts_the_retries_is_rate_limited(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, sleep: SleepRecorder, conversation: Conversation
) -> None:
    for _ in range(4):
        anthropic_server.push_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(ModelRateLimited) as caught:
        await collect(provider.stream(conversation.turn("turn_1").request()))
    assert caught.value.code == "rate_limited"
    assert caught.value.attempts == 4
    assert len(anthropic_server.message_requests) == 4
    assert len(sleep.waits) == 3
    assert sleep.waits == sorted(sleep.waits)


async def test_a_prompt_over_the_context_window_is_a_context_overflow_without_retry(
    clock: FakeClock, sleep: SleepRecorder, conversation: Conversation
) -> None:
    with FakeAnthropicServer(api_key=API_KEY, context_window=1_000, clock=clock) as server:
        provider = AnthropicProvider(
            ModelRef(model=MODEL, base_url=server.base_url), api_key=Secret("k", API_KEY), sleep=sleep
        )
        try:
            with pytest.raises(ModelContextOverflow) as caught:
                await collect(provider.stream(conversation.turn("turn_1").tool_round("c1").request()))
        finally:
            await provider.aclose()
        assert "prompt is too long" in caught.value.message
        assert [r.status for r in server.message_requests] == [400]
        assert sleep.waits == []


async def test_an_error_event_mid_stream_is_a_provider_error_after_the_text_already_streamed(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, sleep: SleepRecorder, conversation: Conversation
) -> None:
    anthropic_server.push_stream_error("api_error", "Internal server error", after_text="<channel:thinking>Let me")
    seen: list[str] = []
    with pytest.raises(ModelProviderError) as caught:
        await drain(provider.stream(conversation.turn("turn_1").request()), seen)
    assert "".join(seen) == "<channel:thinking>Let me"
    assert caught.value.code == "stream_interrupted"
    assert "api_error" in caught.value.message
    assert len(anthropic_server.message_requests) == 1
    assert sleep.waits == []


async def test_an_overload_event_before_any_text_is_retried(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, sleep: SleepRecorder, conversation: Conversation
) -> None:
    anthropic_server.push_stream_error("overloaded_error", "Overloaded")
    anthropic_server.push_text("recovered")
    text, _ = await collect(provider.stream(conversation.turn("turn_1").request()))
    assert text == "recovered"
    assert len(sleep.waits) == 1


async def test_an_unreachable_server_is_unavailable_after_retries(
    sleep: SleepRecorder, conversation: Conversation
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = AnthropicProvider(
        ModelRef(model=MODEL, base_url=f"http://127.0.0.1:{port}"),
        api_key=Secret("k", API_KEY),
        retry=RetryPolicy(max_attempts=2),
        sleep=sleep,
    )
    try:
        with pytest.raises(ModelUnavailable) as caught:
            await collect(provider.stream(conversation.turn("turn_1").request()))
    finally:
        await provider.aclose()
    assert caught.value.attempts == 2
    assert f"127.0.0.1:{port}" in caught.value.message


def assert_no_key(error: BaseException, key: str) -> None:
    rendered = "".join(traceback.format_exception(error))
    for text in (str(error), repr(error), rendered):
        assert key not in text


async def test_the_api_key_never_appears_in_errors_or_reprs(
    anthropic_server: FakeAnthropicServer, provider: AnthropicProvider, conversation: Conversation
) -> None:
    wrong_key = "sk-ant-wrong-key-9876543210"
    wrong = AnthropicProvider(
        ModelRef(model=MODEL, base_url=anthropic_server.base_url), api_key=Secret("anthropic_api_key", wrong_key)
    )
    errors: list[ModelError] = []
    try:
        with pytest.raises(ModelProviderError) as caught:
            await collect(wrong.stream(conversation.turn("turn_1").request()))
        errors.append(caught.value)
    finally:
        await wrong.aclose()
    assert caught.value.code == "authentication_failed"
    for _ in range(4):
        anthropic_server.push_error(429, "rate_limit_error", "limited")
    with pytest.raises(ModelRateLimited) as limited:
        await collect(provider.stream(conversation.request()))
    errors.append(limited.value)

    for error in errors:
        assert_no_key(error, wrong_key)
        assert_no_key(error, API_KEY)
    assert wrong_key not in repr(wrong)
    assert API_KEY not in repr(provider)


# --- openai-compatible ----------------------------------------------------------------------------------


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=API_KEY, context_window=8_000) as server:
        yield server


@pytest.fixture
async def chat_provider(
    openai_server: FakeOpenAIServer, sleep: SleepRecorder
) -> AsyncIterator[OpenAICompatibleProvider]:
    provider = OpenAICompatibleProvider(
        ModelRef(
            provider="openai-compatible", model="qwen3-8b", max_output_tokens=512, base_url=openai_server.base_url
        ),
        api_key=Secret("openai_api_key", API_KEY),
        retry=RetryPolicy(max_attempts=3, base_delay_s=0.5, jitter=0),
        sleep=sleep,
    )
    yield provider
    await provider.aclose()


async def test_chat_completions_stream_text_and_final_usage(
    chat_provider: OpenAICompatibleProvider, openai_server: FakeOpenAIServer, conversation: Conversation
) -> None:
    openai_server.push_text("<channel:answer>Hi there</channel:answer>", cached_tokens=40)
    text, completed = await collect(chat_provider.stream(conversation.turn("turn_1").request()))
    assert text == "<channel:answer>Hi there</channel:answer>"
    recorded = openai_server.requests[0]
    assert recorded.usage is not None
    assert completed.usage == Usage(
        input_tokens=recorded.usage["prompt_tokens"] - 40,
        output_tokens=recorded.usage["completion_tokens"],
        cache_read_input_tokens=40,
    )
    assert completed.stop_reason == "end_turn"
    body = recorded.body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM
    assert (body["stream"], body["stream_options"], body["max_tokens"]) == (True, {"include_usage": True}, 512)
    assert recorded.headers["authorization"] == f"Bearer {API_KEY}"


async def test_chat_completions_429_is_retried(
    chat_provider: OpenAICompatibleProvider,
    openai_server: FakeOpenAIServer,
    sleep: SleepRecorder,
    conversation: Conversation,
) -> None:
    openai_server.push_error(429, "Rate limit reached", error_type="rate_limit_error")
    openai_server.push_text("ok", finish_reason="length")
    text, completed = await collect(chat_provider.stream(conversation.turn("turn_1").request()))
    assert (text, completed.stop_reason) == ("ok", "max_tokens")
    assert sleep.waits == [0.5]


async def test_chat_completions_context_overflow(
    chat_provider: OpenAICompatibleProvider, openai_server: FakeOpenAIServer, conversation: Conversation
) -> None:
    conversation.turn("turn_1")
    for n in range(1, 20):
        conversation.tool_round(f"c{n}")
    with pytest.raises(ModelContextOverflow, match="maximum context length"):
        await collect(chat_provider.stream(conversation.request()))


async def test_chat_completions_error_chunk_mid_stream(
    chat_provider: OpenAICompatibleProvider, openai_server: FakeOpenAIServer, conversation: Conversation
) -> None:
    openai_server.push_stream_error("engine crashed", after_text="partial answer")
    seen: list[str] = []
    with pytest.raises(ModelProviderError) as caught:
        await drain(chat_provider.stream(conversation.turn("turn_1").request()), seen)
    assert "".join(seen) == "partial answer"
    assert caught.value.code == "stream_interrupted"
    assert "engine crashed" in caught.value.message


async def test_chat_completions_without_a_key_sends_no_authorization(conversation: Conversation) -> None:
    with FakeOpenAIServer() as server:
        provider = create_openai_compatible_provider(
            ModelRef(provider="openai-compatible", model="llama", base_url=server.base_url),
            lambda _: pytest.fail("no secret should be read"),
        )
        server.push_text("hi")
        try:
            text, _ = await collect(provider.stream(conversation.turn("turn_1").request()))
        finally:
            await provider.aclose()
        assert text == "hi"
        assert "authorization" not in server.requests[0].headers


async def test_chat_completions_bad_key_is_an_authentication_error_without_the_key(
    openai_server: FakeOpenAIServer, conversation: Conversation
) -> None:
    wrong_key = "sk-wrong-openai-key-000111"
    provider = OpenAICompatibleProvider(
        ModelRef(model="m", base_url=openai_server.base_url), api_key=Secret("openai_api_key", wrong_key)
    )
    try:
        with pytest.raises(ModelProviderError) as caught:
            await collect(provider.stream(conversation.turn("turn_1").request()))
    finally:
        await provider.aclose()
    assert caught.value.code == "authentication_failed"
    assert_no_key(caught.value, wrong_key)
    assert wrong_key not in repr(provider)


async def test_a_stream_that_breaks_off_before_any_text_is_retried(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, sleep: SleepRecorder, conversation: Conversation
) -> None:
    anthropic_server.push_stream_cut()
    anthropic_server.push_text("second try")
    text, _ = await collect(provider.stream(conversation.turn("turn_1").request()))
    assert text == "second try"
    assert len(sleep.waits) == 1


async def test_a_stream_that_breaks_off_after_text_is_interrupted(
    provider: AnthropicProvider, anthropic_server: FakeAnthropicServer, conversation: Conversation
) -> None:
    anthropic_server.push_stream_cut(after_text="half an ans")
    seen: list[str] = []
    with pytest.raises(ModelProviderError) as caught:
        await drain(provider.stream(conversation.turn("turn_1").request()), seen)
    assert "".join(seen) == "half an ans"
    assert caught.value.code == "stream_interrupted"
    assert "ended before message_stop" in caught.value.message
