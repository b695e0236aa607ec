"""The scripted provider: replays its script in small chunks, records requests, never invents an answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conversations import Conversation

from berth.config.models.assembly import ModelRef
from berth.default_plugins.models import scripted
from berth.default_plugins.models.scripted import ScriptedProvider, create_scripted_provider
from berth.models import (
    ModelCompleted,
    ModelContextOverflow,
    ModelProvider,
    ModelProviderError,
    ModelRateLimited,
    ModelRequest,
    TextDelta,
    Usage,
)
from berth.runtime.render import RenderedPrompt


@pytest.fixture
def request_(conversation: Conversation) -> ModelRequest:
    return ModelRequest(prompt=conversation.turn("turn_1").render())


async def test_a_response_streams_in_chunks_of_the_configured_size(request_: ModelRequest) -> None:
    provider = ScriptedProvider(["<channel:answer>Hello</channel:answer>"], chunk_size=4)
    events = [event async for event in provider.stream(request_)]
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert deltas[:3] == ["<cha", "nnel", ":ans"]
    assert all(len(delta) <= 4 for delta in deltas)
    assert "".join(deltas) == "<channel:answer>Hello</channel:answer>"
    assert isinstance(events[-1], ModelCompleted)
    assert events[-1].stop_reason == "end_turn"


async def test_responses_are_consumed_in_order_and_every_request_is_recorded(request_: ModelRequest) -> None:
    provider = ScriptedProvider(["one", "two"])
    texts = []
    for _ in range(2):
        texts.append("".join([e.text async for e in provider.stream(request_) if isinstance(e, TextDelta)]))
    assert texts == ["one", "two"]
    assert provider.requests == [request_, request_]
    assert provider.remaining == 0


async def test_a_long_running_provider_keeps_only_its_latest_requests(
    request_: ModelRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scripted, "REQUESTS_KEPT", 3)
    provider = ScriptedProvider(["again"], repeat=True)
    sent = [request_.model_copy(update={"metadata": {"n": str(n)}}) for n in range(20)]
    for request in sent:
        _ = [e async for e in provider.stream(request)]
    assert 3 <= len(provider.requests) <= 6
    assert provider.requests == sent[-len(provider.requests) :]


async def test_running_out_of_script_is_an_error_not_a_default_answer(request_: ModelRequest) -> None:
    provider = ScriptedProvider(["only"])
    _ = [e async for e in provider.stream(request_)]
    with pytest.raises(ModelProviderError) as caught:
        _ = [e async for e in provider.stream(request_)]
    assert caught.value.code == "script_exhausted"
    assert "call 2" in caught.value.message
    assert len(provider.requests) == 2


async def test_scripted_usage_is_reported_and_missing_usage_is_estimated(request_: ModelRequest) -> None:
    given = Usage(input_tokens=10, output_tokens=2, cache_read_input_tokens=900, cache_creation_input_tokens=5)
    provider = ScriptedProvider([scripted.ScriptEntry(text="ok", usage=given), "abcdefgh"])
    first = [e async for e in provider.stream(request_)][-1]
    second = [e async for e in provider.stream(request_)][-1]
    assert isinstance(first, ModelCompleted)
    assert first.usage == given
    assert isinstance(second, ModelCompleted)
    assert second.usage.output_tokens == 2
    assert second.usage.input_tokens == sum(scripted.estimate_tokens(p.text) for p in request_.prompt.parts())


async def test_scripted_errors_are_raised_as_normalized_errors(request_: ModelRequest) -> None:
    provider = ScriptedProvider([])
    provider.extend(
        [
            {"error": {"code": "rate_limited", "message": "busy"}},
            {"error": {"code": "context_overflow"}},
            {"error": {"code": "invalid_request", "message": "bad"}},
        ]
    )
    with pytest.raises(ModelRateLimited):
        _ = [e async for e in provider.stream(request_)]
    with pytest.raises(ModelContextOverflow):
        _ = [e async for e in provider.stream(request_)]
    with pytest.raises(ModelProviderError) as caught:
        _ = [e async for e in provider.stream(request_)]
    assert caught.value.code == "invalid_request"


def test_an_entry_needs_exactly_one_of_text_and_error() -> None:
    with pytest.raises(ValueError, match="exactly one of 'text' and 'error'"):
        scripted.ScriptEntry.model_validate({"text": "a", "error": {"code": "rate_limited"}})


async def test_a_yaml_script_is_loaded_through_the_factory(tmp_path: Path, request_: ModelRequest) -> None:
    script = tmp_path / "demo.yaml"
    script.write_text(
        "chunk_size: 2\nresponses:\n  - hello\n  - text: bye\n    stop_reason: max_tokens\n", encoding="utf-8"
    )
    provider = create_scripted_provider(
        ModelRef(provider="scripted", model=str(script)), lambda _: pytest.fail("a script needs no secret")
    )
    assert isinstance(provider, ModelProvider)
    first = [e async for e in provider.stream(request_)]
    assert [e.text for e in first if isinstance(e, TextDelta)] == ["he", "ll", "o"]
    last = [e async for e in provider.stream(request_)][-1]
    assert isinstance(last, ModelCompleted)
    assert last.stop_reason == "max_tokens"
    assert str(script) in repr(provider)
    await provider.aclose()


def test_a_json_list_script_is_loaded(tmp_path: Path) -> None:
    script = tmp_path / "demo.json"
    script.write_text(json.dumps(["a", {"text": "b"}]), encoding="utf-8")
    entries, chunk_size, repeat = scripted.load_script(script)
    assert [entry.text for entry in entries] == ["a", "b"]
    assert chunk_size == scripted.DEFAULT_CHUNK_SIZE
    assert repeat is False


async def test_a_repeating_script_starts_over(tmp_path: Path) -> None:
    script = tmp_path / "demo.yaml"
    script.write_text("repeat: true\nresponses: [one, two]\n", encoding="utf-8")
    provider = scripted.ScriptedProvider.from_file(script)
    texts = []
    for _ in range(3):
        request = ModelRequest(prompt=RenderedPrompt(messages=(), checkpoints=(), start=0))
        texts.append("".join([e.text async for e in provider.stream(request) if isinstance(e, TextDelta)]))
    assert texts == ["one", "two", "one"]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("responses: [{text: a, colour: red}]", "colour"),
        ("- error: {code: no_such_code}", "error.code"),
        ("[unclosed", "not a valid script"),
    ],
)
def test_a_bad_script_names_the_file_and_the_problem(tmp_path: Path, content: str, fragment: str) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(content, encoding="utf-8")
    with pytest.raises(ModelProviderError) as caught:
        scripted.load_script(script)
    assert caught.value.code == "script_invalid"
    assert str(script) in caught.value.message
    assert fragment in caught.value.message


def test_a_missing_script_file_is_a_script_error(tmp_path: Path) -> None:
    with pytest.raises(ModelProviderError, match="cannot be read"):
        scripted.load_script(tmp_path / "absent.yaml")


async def test_a_by_round_script_answers_each_turns_rounds_in_order_however_turns_interleave(
    request_: ModelRequest, tmp_path: Path
) -> None:
    script = tmp_path / "per-turn.yaml"
    script.write_text("by_round: true\nresponses: [call the tool, the answer]\n")
    provider = ScriptedProvider.from_file(script)

    def at(turn: str, round_: int) -> ModelRequest:
        return request_.model_copy(update={"metadata": {"turn_id": turn, "round": str(round_)}})

    async def text(request: ModelRequest) -> str:
        return "".join([e.text async for e in provider.stream(request) if isinstance(e, TextDelta)])

    answers = [await text(at(turn, round_)) for turn, round_ in (("a", 1), ("b", 1), ("b", 2), ("a", 2), ("c", 1))]
    assert answers == ["call the tool", "call the tool", "the answer", "the answer", "call the tool"]
    with pytest.raises(ModelProviderError) as caught:
        await text(at("a", 3))
    assert caught.value.code == "script_exhausted" and "round 3" in caught.value.message
