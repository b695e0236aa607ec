"""Whole conversations through the real TurnRunner and the real ``anthropic`` SDK provider.

The provider is built by its plugin factory with a ``base_url`` pointing at
:mod:`berth.testing.fakes.anthropic_server` on 127.0.0.1, which speaks the Messages streaming format, validates
what it receives and computes prompt-cache reads and writes from the ``cache_control`` breakpoints.
The bundles are the real ``hello`` bundle and the store is SQLite; a thin spy around the provider
keeps the rendered prompt of every call, so what the server received is compared with what the
renderer decided.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turn_harness import TurnHarness, action, complete, turn_harness

from berth.config.models.assembly import ModelRef
from berth.config.models.common import SecretSetting
from berth.config.secrets import Secret
from berth.default_plugins.models.anthropic import create_anthropic_provider
from berth.models.protocol import ModelEvent, ModelProvider, ModelRequest, Usage
from berth.runtime.blocks import BlockType
from berth.runtime.persistence import restore_conversation
from berth.runtime.render import RenderedPrompt
from berth.testing.fakes.anthropic_server import FakeAnthropicServer, content_blocks, estimate_tokens
from berth.testing.fakes.serving import RecordedRequest

HELLO = {"hello": {"source": {"entry_point": "hello"}}}
API_KEY = "sk-ant-e2e-0123456789abcdef"
MODEL = "claude-sonnet-5-5"


class ServerClock:
    """The fake server's monotonic clock, standing still unless a test moves it (no cache expiry)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class PromptSpy:
    """A :class:`ModelProvider` that keeps each request's rendered prompt and delegates the call."""

    inner: ModelProvider
    prompts: list[RenderedPrompt] = field(default_factory=list)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.prompts.append(request.prompt)
        return self.inner.stream(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class AnthropicStack:
    """The turn harness wired to the anthropic provider, the fake server behind it, and the spy."""

    harness: TurnHarness
    server: FakeAnthropicServer
    spy: PromptSpy

    async def turn(self, message: str, answers: Sequence[str], **extra: Any) -> Any:
        """Script ``answers`` on the server, then run one turn of the hello bundle."""
        for answer in answers:
            self.server.push_text(answer, chunk_size=11)
        return await self.harness.turn("hello", message, **extra)

    def answered(self) -> list[RecordedRequest]:
        """The ``/v1/messages`` requests the server answered with a stream (status 200)."""
        return [r for r in self.server.message_requests if r.status == 200]


def lookup_secret(setting: SecretSetting | str) -> Secret:
    """The platform secret ``anthropic_api_key`` (the factory's default key name)."""
    assert setting == "anthropic_api_key", setting
    return Secret("anthropic_api_key", API_KEY)


@asynccontextmanager
async def anthropic_stack(
    tmp_path: Path,
    *,
    react: dict[str, Any] | None = None,
    context_window: int = 200_000,
) -> AsyncIterator[AnthropicStack]:
    """Start the fake server, the provider from its plugin factory and the turn stack; close them after."""
    async with FakeAnthropicServer(api_key=API_KEY, context_window=context_window, clock=ServerClock()) as server:
        ref = ModelRef(provider="anthropic", model=MODEL, max_output_tokens=1024, base_url=server.base_url)
        spy = PromptSpy(create_anthropic_provider(ref, lookup_secret))

        def models(role: str | None) -> tuple[ModelRef, ModelProvider]:
            return ref, spy  # the summarizer role uses the same model

        try:
            async with turn_harness(tmp_path, HELLO, react, models=models) as harness:
                yield AnthropicStack(harness, server, spy)
        finally:
            await spy.aclose()


def expected_blocks(prompt: RenderedPrompt) -> list[tuple[str, bool]]:
    """The (text, has cache_control) blocks the Messages API should get for ``prompt``.

    Every non-empty part is one block; a part's checkpoint is its ``cache_control``. An empty part is
    left out and its checkpoint moves to the block before it (it ends the same prefix).
    """
    blocks: list[tuple[str, bool]] = []
    for part in prompt.parts():
        if part.text.strip():
            blocks.append((part.text, part.cache_checkpoint is not None))
        elif part.cache_checkpoint is not None and blocks:
            blocks[-1] = (blocks[-1][0], True)
    return blocks


def received_blocks(request: RecordedRequest) -> list[tuple[str, bool]]:
    """The (text, has cache_control) blocks of a request body, system first."""
    return [(block["text"], "cache_control" in block) for block in content_blocks(request.body)]


def last_breakpoint(request: RecordedRequest) -> int:
    """The index of the last block carrying ``cache_control``."""
    return max(i for i, (_, marked) in enumerate(received_blocks(request)) if marked)


def usage_of(requests: Sequence[RecordedRequest]) -> Usage:
    """The sum of the usage the server reported for ``requests``."""
    total = Usage()
    for request in requests:
        assert request.usage is not None
        total = total.plus(Usage(**request.usage))
    return total


async def test_a_multi_turn_conversation_puts_cache_control_exactly_at_the_checkpoints(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        first = await stack.turn(
            "Greet Ada and Bob",
            [
                action("hello.greet", name="Ada", language="fr"),
                action("hello.greet", name="Bob"),
                complete("Bonjour, Ada! Hello, Bob!", ["Greet Carol?"]),
            ],
        )
        second = await stack.turn(
            "What is the etiquette?",
            [action("react.read", paths=["sk:greeting-etiquette"]), complete("Use their name [[S:1]].")],
        )
        third = await stack.turn(
            "Greet four more people",
            [
                *(action("hello.greet", name=name) for name in ("Carol", "Dan", "Eve", "Fay")),
                complete("Greeted four of them."),
            ],
        )
        assert [r.outcome for r in (first, second, third)] == ["completed"] * 3
        assert [r.rounds for r in (first, second, third)] == [3, 2, 5]
        assert stack.harness.streamed().startswith("Bonjour, Ada! Hello, Bob!")
        assert "[Greeting (Wikipedia)](https://en.wikipedia.org/wiki/Greeting)" in stack.harness.streamed()

        received = stack.server.message_requests
        assert [r.status for r in received] == [200] * 10
        assert len(stack.spy.prompts) == len(received)
        for prompt, request in zip(stack.spy.prompts, received, strict=True):
            assert received_blocks(request) == expected_blocks(prompt)
            assert sum(marked for _, marked in received_blocks(request)) <= 4
            assert request.body["model"] == MODEL
            assert request.body["max_tokens"] == 1024
            assert request.body["metadata"] == {"user_id": "ada"}
            assert request.body["stream"] is True
            assert request.headers["authorization"] == f"Bearer {API_KEY}"
            assert request.headers["anthropic-version"]
        # a tool-heavy turn uses every kind of breakpoint, and never more than four
        kinds = [cp.kind for cp in stack.spy.prompts[-1].checkpoints]
        assert kinds == ["previous_turn", "pre_tail", "tail"]
        assert stack.spy.prompts[5].checkpoints[0].kind == "previous_turn_tail"  # turn 3, round 1


async def test_the_cached_prefix_is_byte_identical_from_round_to_round_and_turn_to_turn(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        for n in range(3):
            await stack.turn(
                f"Greet person {n}",
                [action("hello.greet", name=f"P{n}"), action("hello.greet", name=f"Q{n}"), complete(f"Done {n}.")],
            )
        received = stack.server.message_requests
        assert len(received) == 9
        system = received[0].body["system"]
        assert [block["text"] for block in system] and all(r.body["system"] == system for r in received)
        for earlier, later in itertools.pairwise(received):
            stable = last_breakpoint(earlier) + 1
            before = [text for text, _ in received_blocks(earlier)[:stable]]
            after = [text for text, _ in received_blocks(later)[:stable]]
            assert after == before
            # so the later request reads all of the prefix the earlier one wrote
            assert later.usage is not None
            assert later.usage["cache_read_input_tokens"] == sum(map(estimate_tokens, before))


async def test_cache_reads_and_writes_reach_the_turn_result(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        first = await stack.turn("Greet Ada", [action("hello.greet", name="Ada"), complete("Hello, Ada!")])
        second = await stack.turn("Greet Bob", [action("hello.greet", name="Bob"), complete("Hello, Bob!")])
        received = stack.answered()
        assert first.usage == usage_of(received[:2])
        assert second.usage == usage_of(received[2:])
        # the first request writes the system prefix; every later one reads at least that much
        assert received[0].usage is not None and received[0].usage["cache_read_input_tokens"] == 0
        assert received[0].usage["cache_creation_input_tokens"] > 1024
        for request in received[1:]:
            assert request.usage is not None
            assert request.usage["cache_read_input_tokens"] >= received[0].usage["cache_creation_input_tokens"]
        assert second.usage.cache_read_input_tokens > second.usage.input_tokens
        completed = stack.harness.of_type("turn.completed")[-1]
        assert completed["usage"] == {**second.usage.model_dump(), "cost_usd": None}  # no price table here


async def test_the_persisted_timeline_holds_every_turn_sent_to_the_model(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        await stack.turn("Greet Ada", [action("hello.greet", name="Ada"), complete("Hello, Ada!")])
        await stack.turn(
            "And the etiquette?", [action("react.read", paths=["sk:greeting-etiquette"]), complete("[[S:1]]")]
        )
        handle = stack.harness.store.conversation(stack.harness.scope)
        restored = await restore_conversation(handle, now=stack.harness.clock())
        assert restored.timeline.turn_ids() == ("turn_1", "turn_2")
        completions = [b.text for b in restored.timeline.blocks if b.type == BlockType.ASSISTANT_COMPLETION]
        assert completions == ["Hello, Ada!", "[[S:1]]"]
        headers = [b.data for b in restored.timeline.blocks if b.type == BlockType.TURN_HEADER]
        assert all(isinstance(h, dict) and h["model"] == f"anthropic:{MODEL}" for h in headers)
        assert [row.url for row in restored.sources.rows] == ["https://en.wikipedia.org/wiki/Greeting"]
        # the whole first turn, as persisted, is what the model was shown in turn 2
        shown = received_blocks(stack.server.message_requests[2])
        history = "\n\n".join(text for text, _ in shown[1:-2])
        for block in (b for b in restored.timeline.blocks if b.turn_id == "turn_1" and b.text):
            assert block.text in history
        snapshot = await handle.load()
        assert [(t.turn_id, t.state) for t in snapshot.turns] == [("turn_1", "completed"), ("turn_2", "completed")]


async def test_the_turn_log_records_token_usage_with_cache_reads_and_writes(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        result = await stack.turn("Greet Ada", [action("hello.greet", name="Ada"), complete("Hello, Ada!")])
        log = await stack.harness.store.conversation(stack.harness.scope).read_turn_log("turn_1")
        assert (log.turn.generation, log.turn.rounds) == ("hello:1", result.rounds)
        persisted = repr(log)
        for field_name, value in result.usage.model_dump().items():
            assert f"{field_name}={value}" in persisted or f'"{field_name}":{value}' in persisted


# --- transient failures and context overflow at the runtime level -----------------------------------


def push_rate_limit(server: FakeAnthropicServer) -> None:
    """A 429 with ``retry-after: 0``, so the provider's backoff waits no time."""
    server.push_error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", retry_after_s=0)


def push_overload(server: FakeAnthropicServer) -> None:
    """A 529 ``overloaded_error`` with ``retry-after: 0``."""
    server.push_error(529, "overloaded_error", "Overloaded", retry_after_s=0)


async def test_a_rate_limited_round_is_retried_and_the_turn_completes(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        push_rate_limit(stack.server)
        stack.server.push_text(action("hello.greet", name="Ada"))
        push_overload(stack.server)
        result = await stack.turn("Greet Ada", [complete("Hello, Ada!")])
        assert (result.outcome, result.rounds, result.answer) == ("completed", 2, "Hello, Ada!")
        received = stack.server.message_requests
        assert [r.status for r in received] == [429, 200, 529, 200]
        assert received[0].body == received[1].body  # the retry resends the same request
        assert received[2].body == received[3].body
        assert stack.harness.of_type("turn.failed") == []
        assert result.usage == usage_of(stack.answered())


async def test_rate_limits_that_outlast_the_retries_fail_the_turn_with_a_code(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path) as stack:
        for _ in range(4):  # the default policy makes four attempts
            push_rate_limit(stack.server)
        result = await stack.turn("Greet Ada", [])
        assert result.outcome == "failed"
        assert result.error is not None and result.error["code"] == "model_rate_limited"
        assert [r.status for r in stack.server.message_requests] == [429] * 4
        assert stack.harness.of_type("turn.failed")[0]["code"] == "model_rate_limited"
        restored = await restore_conversation(
            stack.harness.store.conversation(stack.harness.scope), now=stack.harness.clock()
        )
        status = [b for b in restored.timeline.blocks if b.type == BlockType.TURN_STATUS]
        assert status and status[-1].meta["state"] == "failed"


async def test_a_context_overflow_compacts_the_conversation_and_retries_once(tmp_path: Path) -> None:
    # system ≈ 1 900 tokens; turn 1 ≈ 6 000 more, turn 2's message 4 000: only turn 2 overflows 10 000
    async with anthropic_stack(tmp_path, context_window=10_000) as stack:
        await stack.turn("Remember this report: " + "tide tables " * 2_000, [complete("Noted.")])
        result = await stack.turn(
            "Now summarize the new notes: " + "storm surge " * 1_330,
            ["Earlier: the user shared a long report on tide tables.", complete("Summarized.")],
        )
        assert (result.outcome, result.answer, result.rounds) == ("completed", "Summarized.", 1)
        received = stack.server.message_requests
        assert [r.status for r in received] == [200, 400, 200, 200]
        overflow, summary_call, retry = received[1:]
        assert overflow.usage is None  # refused before it was served
        assert "tide tables tide tables" in str(summary_call.body["messages"])  # the summarizer got turn 1
        retried = "\n".join(text for text, _ in received_blocks(retry))
        assert "Earlier: the user shared a long report on tide tables." in retried
        assert "tide tables tide tables" not in retried
        assert "storm surge" in retried
        assert sum(marked for _, marked in received_blocks(retry)) <= 4
        compactions = stack.harness.of_type("compaction")
        assert [c["status"] for c in compactions] == ["compacted"]
        assert compactions[0]["covered_turn_ids"] == ["turn_1"]
        restored = await restore_conversation(
            stack.harness.store.conversation(stack.harness.scope), now=stack.harness.clock()
        )
        assert restored.timeline.blocks[0].type == BlockType.CONV_RANGE_SUMMARY


async def test_a_prompt_that_overflows_after_compaction_fails_instead_of_retrying_again(tmp_path: Path) -> None:
    async with anthropic_stack(tmp_path, context_window=10_000) as stack:
        await stack.turn("Remember this report: " + "tide tables " * 2_000, [complete("Noted.")])
        result = await stack.turn(
            "This alone is too long: " + "storm surge " * 4_000,
            ["Earlier: a long report on tide tables.", complete("never sent")],
        )
        assert result.outcome == "failed"
        assert result.error is not None and result.error["code"] == "model_context_overflow"
        assert [r.status for r in stack.server.message_requests] == [200, 400, 200, 400]
        assert stack.server.pending == 1  # the answer scripted for a second retry was never asked for
