"""The async stream: the primary emitter and per-channel / per-instance subscribers side by side."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from berth.streaming import (
    ChannelClosed,
    ChannelDelta,
    ChannelEvent,
    ChannelOpened,
    ChannelSetupError,
    ChannelSpec,
    ChannelStream,
    CitationSource,
    FieldCompleted,
    StreamEvent,
    StreamPolicyError,
    Subscriber,
)

SPECS = [
    ChannelSpec(name="thinking", emit_marker="thinking"),
    ChannelSpec(name="answer", emit_marker="answer", replace_citations=True),
    ChannelSpec(name="code", format="code"),
    ChannelSpec(name="action", format="json", composite=True),
]
DOCUMENT = (
    "<channel:thinking>plan</channel:thinking>"
    "<channel:code>print(1)</channel:code>"
    '<channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>Done [[S:1]].</channel:answer>"
)


def texts(events: list[ChannelEvent] | list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ChannelDelta))


class Recorder:
    """A sync subscriber that records what it sees."""

    def __init__(self) -> None:
        self.events: list[ChannelEvent] = []

    def __call__(self, event: ChannelEvent) -> None:
        self.events.append(event)


class AsyncRecorder(Recorder):
    """An async subscriber that yields to the loop before recording."""

    async def __call__(self, event: ChannelEvent) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.events.append(event)


def run(stream: ChannelStream, chunks: list[str]) -> None:
    asyncio.run(stream.run(chunks))


def test_the_emitter_gets_only_events_meant_for_clients(sources: dict[int, CitationSource]) -> None:
    emitted: list[StreamEvent] = []
    stream = ChannelStream(SPECS, sources=sources, emit=emitted.append)
    result = asyncio.run(stream.run(["stray ", *DOCUMENT]))
    assert {getattr(e, "channel", None) for e in emitted} == {"thinking", "answer", "action"}
    assert not any(isinstance(e, ChannelDelta) and e.channel in ("code", "action") for e in emitted)
    assert [e.field for e in emitted if isinstance(e, FieldCompleted)] == ["action"]
    assert texts([e for e in emitted if getattr(e, "channel", "") == "answer"]) == (
        "Done [Source 1](https://example.org/s/1)."
    )
    assert result.outside_text == "stray "


def test_an_async_emitter_is_awaited_in_order() -> None:
    emitted: list[StreamEvent] = []

    async def emit(event: StreamEvent) -> None:
        await asyncio.sleep(0)
        emitted.append(event)

    run(ChannelStream(SPECS, emit=emit), list(DOCUMENT))
    assert texts(emitted) == "planDone."
    assert isinstance(emitted[0], ChannelOpened) and isinstance(emitted[-1], ChannelClosed)


@pytest.mark.parametrize("recorder_type", [Recorder, AsyncRecorder])
def test_a_channel_subscriber_sees_every_event_of_its_channel_in_order(recorder_type: type[Recorder]) -> None:
    recorder = recorder_type()
    stream = ChannelStream(SPECS)
    stream.subscribe("Code", recorder)
    run(stream, list(DOCUMENT + "<channel:code>again</channel:code>"))
    assert [type(e).__name__ for e in recorder.events if not isinstance(e, ChannelDelta)] == [
        "ChannelOpened",
        "ChannelClosed",
        "ChannelOpened",
        "ChannelClosed",
    ]
    assert texts(recorder.events) == "print(1)again"
    assert {e.channel for e in recorder.events} == {"code"}


def test_subscribers_of_internal_channels_get_raw_and_rendered_text(sources: dict[int, CitationSource]) -> None:
    recorder = Recorder()
    stream = ChannelStream(SPECS, sources=sources)
    stream.subscribe("answer", recorder)
    run(stream, [DOCUMENT])
    deltas = [e for e in recorder.events if isinstance(e, ChannelDelta)]
    assert "".join(d.raw for d in deltas) == "Done [[S:1]]."
    assert "".join(d.text for d in deltas) == "Done [Source 1](https://example.org/s/1)."


def test_an_instance_factory_gives_each_instance_its_own_subscriber() -> None:
    made: list[tuple[int, Recorder]] = []

    def factory(opened: ChannelOpened) -> Subscriber | None:
        if opened.instance == 1:
            return None  # a factory may skip an instance
        recorder = Recorder()
        made.append((opened.instance, recorder))
        return recorder

    stream = ChannelStream(SPECS)
    stream.subscribe_instances("thinking", factory)
    run(stream, ["".join(f"<channel:thinking>t{i}</channel:thinking>" for i in range(3))])
    assert [instance for instance, _ in made] == [0, 2]
    for instance, recorder in made:
        assert texts(recorder.events) == f"t{instance}"
        assert {e.instance for e in recorder.events} == {instance}
        assert isinstance(recorder.events[0], ChannelOpened) and isinstance(recorder.events[-1], ChannelClosed)


@pytest.mark.parametrize("failing_is_async", [False, True])
def test_a_failing_subscriber_is_logged_and_detached_while_the_rest_go_on(
    failing_is_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    def failing_sync(event: ChannelEvent) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("boom")

    async def failing_async(event: ChannelEvent) -> None:
        failing_sync(event)

    before, after = Recorder(), AsyncRecorder()
    emitted: list[StreamEvent] = []
    stream = ChannelStream(SPECS, emit=emitted.append)
    stream.subscribe("thinking", before)
    stream.subscribe("thinking", failing_async if failing_is_async else failing_sync)
    stream.subscribe("thinking", after)
    with caplog.at_level(logging.WARNING, logger="berth.streaming.subscribers"):
        result = asyncio.run(stream.run(list(DOCUMENT)))
    assert calls == 1
    assert texts(before.events) == texts(after.events) == "plan"
    assert texts(emitted) == "planDone."
    assert result.subscriber_failures == 1 and result.stopped_by is None
    assert "failed on instance 0 and was detached" in caplog.text and "boom" in caplog.text


def test_a_failing_factory_is_logged_and_the_stream_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def factory(opened: ChannelOpened) -> Subscriber | None:
        raise RuntimeError("factory broke")

    stream = ChannelStream(SPECS)
    stream.subscribe_instances("thinking", factory)
    with caplog.at_level(logging.WARNING, logger="berth.streaming.subscribers"):
        result = asyncio.run(stream.run([DOCUMENT]))
    assert result.subscriber_failures == 1
    assert result.channel("answer").raw_text == "Done [[S:1]]."
    assert "factory broke" in caplog.text


@pytest.mark.parametrize("policy_is_async", [False, True])
def test_a_policy_error_from_a_subscriber_stops_the_stream(policy_is_async: bool) -> None:
    def forbid_sync(event: ChannelEvent) -> None:
        if isinstance(event, ChannelDelta) and "import os" in event.raw:
            raise StreamPolicyError("forbidden_import", "code may not import os")

    async def forbid_async(event: ChannelEvent) -> None:
        forbid_sync(event)

    emitted: list[StreamEvent] = []
    stream = ChannelStream(SPECS, emit=emitted.append)
    stream.subscribe("code", forbid_async if policy_is_async else forbid_sync)

    async def scenario() -> None:
        await stream.feed("<channel:thinking>t</channel:thinking><channel:code>")
        with pytest.raises(StreamPolicyError, match="may not import os") as caught:
            await stream.feed("import os</channel:code><channel:answer>never</channel:answer>")
        assert caught.value.code == "forbidden_import"
        with pytest.raises(StreamPolicyError):
            await stream.feed("more")
        result = await stream.finish()
        assert result.stopped_by is not None and result.stopped_by.code == "forbidden_import"
        # the results keep everything the model wrote up to the stop, delivered or not
        assert result.channel("code").raw_text == "import os"
        assert result.channel("answer").raw_text == "never"

    asyncio.run(scenario())
    assert texts(emitted) == "t"
    assert not any(getattr(e, "channel", "") == "answer" for e in emitted)


def test_run_ends_early_with_the_results_when_a_policy_stops_it() -> None:
    def stop(event: ChannelEvent) -> None:
        if isinstance(event, ChannelOpened):
            raise StreamPolicyError("no_thinking", "thinking is disabled here")

    stream = ChannelStream(SPECS)
    stream.subscribe_instances("thinking", lambda opened: stop)
    result = asyncio.run(stream.run(list(DOCUMENT)))
    assert result.stopped_by is not None and result.stopped_by.code == "no_thinking"
    assert stream.stopped_by is not None


def test_a_factory_may_stop_the_stream_with_a_policy_error() -> None:
    def factory(opened: ChannelOpened) -> Subscriber | None:
        raise StreamPolicyError("too_many_actions", "at most one action per response")

    emitted: list[StreamEvent] = []
    stream = ChannelStream(SPECS, emit=emitted.append)
    stream.subscribe_instances("action", factory)
    result = asyncio.run(stream.run([DOCUMENT]))
    assert result.stopped_by is not None and result.stopped_by.code == "too_many_actions"
    assert not any(getattr(e, "channel", "") == "answer" for e in emitted)


def test_subscribers_run_beside_the_emitter_not_after_it() -> None:
    subscriber_started = asyncio.Event()

    async def emit(event: StreamEvent) -> None:
        # would never return if the subscriber only ran once the emitter was done
        await subscriber_started.wait()

    async def subscriber(event: ChannelEvent) -> None:
        subscriber_started.set()

    async def scenario() -> None:
        stream = ChannelStream(SPECS, emit=emit)
        stream.subscribe("thinking", subscriber)
        await asyncio.wait_for(stream.run(["<channel:thinking>x</channel:thinking>"]), timeout=30)

    asyncio.run(scenario())


def test_an_emitter_failure_propagates_to_the_caller() -> None:
    def emit(event: StreamEvent) -> None:
        raise ConnectionResetError("client went away")

    stream = ChannelStream(SPECS, emit=emit)
    with pytest.raises(ConnectionResetError):
        asyncio.run(stream.feed(DOCUMENT))


def test_an_async_emitter_failure_propagates_after_the_subscribers_ran() -> None:
    recorder = AsyncRecorder()

    async def emit(event: StreamEvent) -> None:
        raise ConnectionResetError("client went away")

    stream = ChannelStream(SPECS, emit=emit)
    stream.subscribe("thinking", recorder)
    with pytest.raises(ConnectionResetError):
        asyncio.run(stream.feed(DOCUMENT))
    assert len(recorder.events) == 1


def test_subscribing_to_an_undeclared_channel_is_refused_with_the_declared_names() -> None:
    stream = ChannelStream(SPECS)
    with pytest.raises(ChannelSetupError, match="declared channels: action, answer, code, thinking") as caught:
        stream.subscribe("answr", Recorder())
    assert caught.value.code == "unknown_channel"
    with pytest.raises(ChannelSetupError):
        stream.subscribe_instances("answr", lambda opened: None)


def test_run_accepts_an_async_chunk_source_and_finish_is_idempotent() -> None:
    async def chunks() -> AsyncIterator[str]:
        for char in DOCUMENT:
            yield char

    async def scenario() -> None:
        stream = ChannelStream(SPECS)
        result = await stream.run(chunks())
        assert result.channel("thinking").raw_text == "plan"
        assert await stream.finish() is result
        with pytest.raises(RuntimeError, match="after finish"):
            await stream.feed("x")

    asyncio.run(scenario())


def test_ten_thousand_instances_each_get_their_own_subscriber_and_result() -> None:
    seen: dict[int, list[str]] = {}

    def factory(opened: ChannelOpened) -> Subscriber:
        texts = seen.setdefault(opened.instance, [])

        def subscriber(event: ChannelEvent) -> None:
            if isinstance(event, ChannelDelta):
                texts.append(event.text)

        return subscriber

    document = "".join(f"<channel:thinking>step {i}</channel:thinking>" for i in range(10_000))
    stream = ChannelStream(SPECS)
    stream.subscribe_instances("thinking", factory)
    result = asyncio.run(stream.run([document[i : i + 64] for i in range(0, len(document), 64)]))
    assert result.channel("thinking").instance_count == 10_000
    assert len(seen) == 10_000
    assert all("".join(seen[i]) == f"step {i}" for i in range(10_000))
    assert result.channel("thinking").instances[9_999].raw_text == "step 9999"
