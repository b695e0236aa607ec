"""Provider settings the official SDKs' conventions decide: Anthropic's environment variables, and which field
carries the output limit to a chat-completions server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from berth.cli.serve import check_model_credentials
from berth.config import ConfigError, Configuration
from berth.config.models.assembly import ModelRef
from berth.default_plugins.models.anthropic import DEFAULT_BASE_URL, create_anthropic_provider
from berth.default_plugins.models.openai_compatible import create_openai_compatible_provider, output_limit_field
from berth.host.models import resolve_model_secret
from berth.models import ModelCompleted, ModelRequest
from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import Block, BlockType
from berth.runtime.render import render_timeline
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline
from berth.testing.fakes.anthropic_server import FakeAnthropicServer
from berth.testing.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.usefixtures("clean_berth_env")

ENV_KEY = "sk-ant-from-the-environment-1234"
MODEL = "claude-sonnet-5-5"


@pytest.fixture
def no_sdk_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(api_key=ENV_KEY) as server:
        yield server


def a_request() -> ModelRequest:
    """One user message rendered the way the loop renders a round."""
    now = datetime(2026, 11, 24, tzinfo=UTC)
    timeline = Timeline()
    timeline.contribute(
        Block(type=BlockType.TURN_HEADER, path="ar:turn_1.turn.header", turn_id="turn_1", ts=now, author="runtime"),
        Block(
            type=BlockType.USER_PROMPT,
            path="ar:turn_1.user.prompt",
            turn_id="turn_1",
            ts=now,
            text="ok?",
            author="user",
        ),
    )
    announce = AnnounceState(iteration=1, max_iterations=15, budget_tokens_left=100_000, now=now)
    return ModelRequest(prompt=render_timeline(timeline, system="rules", sources=SourcesPool(), announce=announce))


async def answer_of(provider: object) -> ModelCompleted:
    events = [event async for event in provider.stream(a_request())]  # type: ignore[attr-defined]
    completed = events[-1]
    assert isinstance(completed, ModelCompleted)
    return completed


async def test_anthropic_takes_key_and_base_url_from_the_sdk_variables_when_nothing_is_configured(
    anthropic_server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.base_url)
    config = Configuration.load(None)  # the embedded defaults: no secrets.yaml, so no anthropic_api_key
    provider = create_anthropic_provider(ModelRef(model=MODEL), lambda value: resolve_model_secret(config, value))
    try:
        anthropic_server.push_text("ok")
        completed = await answer_of(provider)
    finally:
        await provider.aclose()
    assert completed.stop_reason == "end_turn"
    assert len(anthropic_server.message_requests) == 1  # the real SDK reached the server the variable names


async def test_configured_settings_come_before_the_sdk_variables(
    anthropic_server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/never")
    config = Configuration.load(None)
    ref = ModelRef(model=MODEL, base_url=anthropic_server.base_url, api_key=ENV_KEY)  # type: ignore[arg-type]
    provider = create_anthropic_provider(ref, lambda value: resolve_model_secret(config, value))
    try:
        assert provider.base_url == anthropic_server.base_url
        anthropic_server.push_text("ok")
        assert (await answer_of(provider)).stop_reason == "end_turn"
    finally:
        await provider.aclose()


def test_without_configuration_or_variables_the_base_url_is_anthropics_and_the_key_error_names_both(
    no_sdk_variables: None,
) -> None:
    config = Configuration.load(None)
    with pytest.raises(ConfigError) as caught:
        create_anthropic_provider(ModelRef(model=MODEL), lambda value: resolve_model_secret(config, value))
    assert caught.value.code == "secret_unknown"
    assert "anthropic_api_key" in str(caught.value) and "ANTHROPIC_API_KEY is not set" in str(caught.value)
    assert DEFAULT_BASE_URL == "https://api.anthropic.com"


def test_berth_run_starts_on_the_embedded_defaults_with_only_anthropic_api_key_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    check_model_credentials(Configuration.load(None))


def test_berth_run_refuses_without_a_key_and_says_how_to_set_one(no_sdk_variables: None) -> None:
    with pytest.raises(ConfigError) as caught:
        check_model_credentials(Configuration.load(None))
    assert caught.value.code == "model_key_missing"
    assert "ANTHROPIC_API_KEY" in str(caught.value) and "--demo" in str(caught.value)


@pytest.mark.parametrize(
    ("base_url", "setting", "field"),
    [
        ("https://api.openai.com/v1", "auto", "max_completion_tokens"),
        ("http://127.0.0.1:8000/v1", "auto", "max_tokens"),
        ("http://ollama.internal:11434/v1", "auto", "max_tokens"),
        ("http://127.0.0.1:8000/v1", "max_completion_tokens", "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_tokens", "max_tokens"),
    ],
)
def test_the_output_limit_field_follows_the_server(base_url: str, setting: str, field: str) -> None:
    ref = ModelRef(provider="openai-compatible", model="m", output_limit_field=setting)  # type: ignore[arg-type]
    assert output_limit_field(ref, base_url) == field


@pytest.mark.parametrize("setting", ["auto", "max_completion_tokens"])
async def test_a_chat_completions_request_carries_exactly_one_limit_field(setting: str) -> None:
    with FakeOpenAIServer() as server:
        ref = ModelRef(
            provider="openai-compatible",
            model="qwen3-8b",
            base_url=server.base_url,
            max_output_tokens=321,
            output_limit_field=setting,  # type: ignore[arg-type]
        )
        provider = create_openai_compatible_provider(ref, lambda value: pytest.fail("no key is configured"))
        try:
            server.push_text("ok")
            await answer_of(provider)
        finally:
            await provider.aclose()
        body = server.requests[-1].body
    expected = "max_tokens" if setting == "auto" else "max_completion_tokens"  # auto: a local server wants max_tokens
    other = {"max_tokens", "max_completion_tokens"} - {expected}
    assert body[expected] == 321
    assert other.isdisjoint(body)
