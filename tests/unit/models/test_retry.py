"""Backoff: bounded, jittered, honouring retry-after; retries only before the first event."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from berth.models import (
    ModelCompleted,
    ModelEvent,
    ModelProviderError,
    ModelRateLimited,
    RetryPolicy,
    TextDelta,
    TransientModelError,
    Usage,
    stream_with_retries,
)

DONE = ModelCompleted(stop_reason="end_turn", usage=Usage())


class SleepRecorder:
    """Records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def rate_limited(attempt: int) -> TransientModelError:
    return TransientModelError("rate_limited", f"HTTP 429 on attempt {attempt}")


def test_delay_doubles_up_to_the_cap_without_jitter() -> None:
    policy = RetryPolicy(base_delay_s=1, max_delay_s=5, jitter=0)
    assert [policy.delay(n, rand=lambda: 0.9) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_jitter_only_shortens_the_delay_within_its_fraction() -> None:
    policy = RetryPolicy(base_delay_s=2, jitter=0.25)
    assert policy.delay(1, rand=lambda: 0.0) == 2
    assert policy.delay(1, rand=lambda: 1.0) == 1.5


def test_retry_after_replaces_the_backoff_but_stays_capped() -> None:
    policy = RetryPolicy(base_delay_s=1, max_delay_s=10)
    assert policy.delay(1, retry_after_s=3, rand=lambda: 0.5) == 3
    assert policy.delay(1, retry_after_s=120, rand=lambda: 0.5) == 10


async def test_transient_failures_are_retried_until_an_attempt_succeeds() -> None:
    sleep = SleepRecorder()
    attempts: list[int] = []

    async def attempt(number: int) -> AsyncIterator[ModelEvent]:
        attempts.append(number)
        if number < 3:
            raise rate_limited(number)
        yield TextDelta(text="hi")
        yield DONE

    policy = RetryPolicy(max_attempts=4, base_delay_s=1, jitter=0)
    events = [e async for e in stream_with_retries(attempt, policy=policy, sleep=sleep)]
    assert events == [TextDelta(text="hi"), DONE]
    assert attempts == [1, 2, 3]
    assert sleep.waits == [1, 2]


async def test_exhausted_retries_raise_the_normalized_error() -> None:
    sleep = SleepRecorder()

    async def attempt(number: int) -> AsyncIterator[ModelEvent]:
        raise rate_limited(number)
        yield DONE  # pragma: no cover - makes this an async generator

    with pytest.raises(ModelRateLimited) as caught:
        _ = [e async for e in stream_with_retries(attempt, policy=RetryPolicy(max_attempts=3), sleep=sleep)]
    assert caught.value.attempts == 3
    assert len(sleep.waits) == 2


async def test_a_failure_after_text_was_yielded_is_never_retried() -> None:
    sleep = SleepRecorder()
    seen: list[ModelEvent] = []

    async def attempt(number: int) -> AsyncIterator[ModelEvent]:
        yield TextDelta(text="partial")
        raise rate_limited(number)

    async def drain() -> None:
        async for event in stream_with_retries(attempt, policy=RetryPolicy(), sleep=sleep):
            seen.append(event)

    with pytest.raises(ModelProviderError) as caught:
        await drain()
    assert caught.value.code == "stream_interrupted"
    assert caught.value.message == "the response broke off after it had started: HTTP 429 on attempt 1"
    assert seen == [TextDelta(text="partial")]
    assert sleep.waits == []


async def test_a_permanent_error_is_raised_at_once() -> None:
    sleep = SleepRecorder()

    async def attempt(number: int) -> AsyncIterator[ModelEvent]:
        raise ModelProviderError("authentication_failed", "bad key")
        yield DONE  # pragma: no cover

    with pytest.raises(ModelProviderError, match="authentication_failed"):
        _ = [e async for e in stream_with_retries(attempt, policy=RetryPolicy(), sleep=sleep)]
    assert sleep.waits == []
