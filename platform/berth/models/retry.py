"""Retries with bounded exponential backoff and jitter, shared by the network model providers.

A provider runs one *attempt* as an async iterator of events. An attempt that fails for a transient
reason raises :class:`TransientModelError`; once retries are exhausted it becomes
:class:`~berth.models.errors.ModelRateLimited` or :class:`~berth.models.errors.ModelUnavailable`.
:func:`stream_with_retries` retries only while nothing has been yielded: once the caller has seen text,
a failure is raised as ``stream_interrupted`` (repeating the call would repeat the text).

The sleep function and the random source are injected, so tests run every branch without waiting.
"""

from __future__ import annotations

import asyncio
import random as _random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from berth.models.errors import ModelError, ModelProviderError, ModelRateLimited, ModelUnavailable
from berth.models.events import ModelEvent

__all__ = ["RetryPolicy", "Sleep", "TransientModelError", "stream_with_retries"]

Sleep: TypeAlias = Callable[[float], Awaitable[None]]
"""``asyncio.sleep`` or a test double with its signature."""


class RetryPolicy(BaseModel):
    """How often and how long to wait between attempts.

    Attempt ``n`` (1-based) that fails waits ``min(max_delay_s, base_delay_s * 2**(n-1))``, shortened by
    a random fraction up to ``jitter`` (so many workers do not retry in lock-step); a server's
    ``retry-after`` replaces the computed delay, still capped at ``max_delay_s``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(4, ge=1, le=20)
    base_delay_s: float = Field(1.0, ge=0)
    max_delay_s: float = Field(30.0, ge=0)
    jitter: float = Field(0.25, ge=0, le=1)

    def delay(self, attempt: int, *, retry_after_s: float | None = None, rand: Callable[[], float]) -> float:
        """Return the seconds to wait after failed attempt ``attempt`` (1-based)."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(self.max_delay_s, retry_after_s)
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return backoff * (1 - self.jitter * rand())


class TransientModelError(Exception):
    """An attempt failed for a reason worth retrying.

    :param kind: ``rate_limited`` (429, 529, overload) or ``unavailable`` (connection, timeout, 5xx).
    :param reason: what happened, safe to show (no secrets).
    :param retry_after_s: the server's ``retry-after``, when it sent one.
    """

    def __init__(
        self, kind: Literal["rate_limited", "unavailable"], reason: str, *, retry_after_s: float | None = None
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.retry_after_s = retry_after_s
        super().__init__(reason)

    def exhausted(self, attempts: int) -> ModelError:
        """The normalized error to raise when no attempt is left after ``attempts``."""
        gave_up = f"gave up after {attempts} attempt{'' if attempts == 1 else 's'}"
        if self.kind == "rate_limited":
            return ModelRateLimited(f"{self.reason}; {gave_up}, try again later", attempts=attempts)
        return ModelUnavailable(f"{self.reason}; {gave_up}", attempts=attempts)


async def stream_with_retries(
    attempt: Callable[[int], AsyncIterator[ModelEvent]],
    *,
    policy: RetryPolicy,
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = _random.random,
) -> AsyncIterator[ModelEvent]:
    """Yield the events of ``attempt(n)``, retrying transient failures that happen before the first event.

    :param attempt: runs attempt ``n`` (1-based).
    :raises ModelError: the exhausted error, ``stream_interrupted`` after output, or the attempt's own.
    """
    for number in range(1, policy.max_attempts + 1):
        yielded = False
        try:
            async for event in attempt(number):
                yielded = True
                yield event
            return
        except TransientModelError as exc:
            if yielded:
                raise ModelProviderError(
                    "stream_interrupted", f"the response broke off after it had started: {exc.reason}"
                ) from None
            if number == policy.max_attempts:
                raise exc.exhausted(number) from None
            await sleep(policy.delay(number, retry_after_s=exc.retry_after_s, rand=rand))
