"""The async channel stream: the renderer, plus the primary emitter and subscribers on top.

:class:`ChannelStream` is what the runtime drives with the model's streamed output. Each chunk goes
through the synchronous :class:`~berth.streaming.rendering.ChannelRenderer`; each resulting event
goes to the primary emitter (the client stream, e.g. SSE ``channel.delta``) when it is meant for
clients, and to the subscribers of its channel. A :class:`StreamPolicyError` from a subscriber stops
the stream; any other subscriber failure is contained (:mod:`berth.streaming.subscribers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable

from berth.streaming.channels import ChannelSpec
from berth.streaming.citations import SourceLookup
from berth.streaming.errors import StreamPolicyError
from berth.streaming.events import ChannelEvent, OutsideText, StreamEvent
from berth.streaming.rendering import ChannelRenderer
from berth.streaming.results import Clock, StreamResult
from berth.streaming.subscribers import PendingCall, Subscriber, SubscriberFactory, SubscriberSet

#: Receives the events meant for clients; may be sync or async. Its exceptions propagate.
Emitter = Callable[[StreamEvent], Awaitable[None] | None]


class ChannelStream:
    """Parses a streamed model response into channels and delivers events to the emitter and subscribers.

    Call :meth:`feed` for each chunk and :meth:`finish` at the end (or :meth:`run` with the whole
    chunk source). Subscribers are registered with :meth:`subscribe` / :meth:`subscribe_instances`
    before feeding; registering one for an undeclared channel raises
    :class:`~berth.streaming.errors.ChannelSetupError`.
    """

    def __init__(
        self,
        channels: Iterable[ChannelSpec],
        *,
        sources: SourceLookup | None = None,
        emit: Emitter | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self._renderer = ChannelRenderer(channels, sources=sources, clock=clock)
        self._emit = emit
        self._subscribers = SubscriberSet(self._renderer.channels)
        self._stopped_by: StreamPolicyError | None = None
        self._result: StreamResult | None = None

    @property
    def stopped_by(self) -> StreamPolicyError | None:
        """The policy error that stopped the stream, if one did."""
        return self._stopped_by

    def subscribe(self, channel: str, subscriber: Subscriber) -> None:
        """Attach ``subscriber`` to every instance of ``channel``."""
        self._subscribers.add(channel, subscriber)

    def subscribe_instances(self, channel: str, factory: SubscriberFactory) -> None:
        """Call ``factory`` at each opening of ``channel``; the subscriber it returns sees that instance only."""
        self._subscribers.add_factory(channel, factory)

    async def feed(self, chunk: str) -> None:
        """Process the next chunk of model output and deliver the events it completed.

        Raises the :class:`StreamPolicyError` a subscriber raised (then and on every later call);
        exceptions of the emitter propagate as they are.
        """
        if self._stopped_by is not None:
            raise self._stopped_by
        if self._result is not None:
            raise RuntimeError("ChannelStream.feed() called after finish()")
        await self._deliver(self._renderer.feed(chunk))

    async def finish(self) -> StreamResult:
        """End the stream, deliver the last events and return the results (idempotent).

        After a policy stop nothing more is delivered, but the results still hold everything that
        was fed (the model did write it): instances still open are recorded as unterminated and
        ``stopped_by`` says why the stream stopped.
        """
        if self._result is not None:
            return self._result
        events = self._renderer.finish()
        if self._stopped_by is None:
            with contextlib.suppress(StreamPolicyError):  # recorded in _stopped_by; the results say so
                await self._deliver(events)
        self._result = self._renderer.result(
            stopped_by=None if self._stopped_by is None else self._stopped_by.as_problem(),
            subscriber_failures=len(self._subscribers.failures),
        )
        return self._result

    async def run(self, chunks: AsyncIterable[str] | Iterable[str]) -> StreamResult:
        """Feed every chunk of ``chunks`` then finish; a policy stop ends it early with the results."""
        try:
            if isinstance(chunks, AsyncIterable):
                async for chunk in chunks:
                    await self.feed(chunk)
            else:
                for chunk in chunks:
                    await self.feed(chunk)
        except StreamPolicyError:
            pass  # the results carry stopped_by
        return await self.finish()

    async def _deliver(self, events: list[StreamEvent]) -> None:
        emit = self._emit
        subscribers = self._subscribers if self._subscribers.has_any() else None
        for event in events:
            if isinstance(event, OutsideText):
                continue  # neither for clients nor for channel subscribers; the results keep it
            pending: list[PendingCall] = []
            if emit is not None and event.marker is not None:
                outcome = emit(event)
                if outcome is not None and inspect.isawaitable(outcome):
                    pending.append((None, outcome))
            policy: StreamPolicyError | None = None
            if subscribers is not None:
                policy = subscribers.call(event, pending)
            if pending:
                policy = await self._await_pending(event, pending, policy)
            if policy is not None:
                self._stopped_by = policy
                raise policy

    async def _await_pending(
        self, event: ChannelEvent, pending: list[PendingCall], policy: StreamPolicyError | None
    ) -> StreamPolicyError | None:
        if len(pending) == 1 and pending[0][0] is None:
            await pending[0][1]  # only the emitter: no need for gather
            return policy
        outcomes = await asyncio.gather(*(awaitable for _, awaitable in pending), return_exceptions=True)
        emitter_error: BaseException | None = None
        for (subscriber, _), outcome in zip(pending, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                continue
            if subscriber is None:
                emitter_error = outcome
            elif isinstance(outcome, StreamPolicyError):
                policy = policy or outcome
            else:
                self._subscribers.failed(subscriber, event, outcome)
        if emitter_error is not None:
            if policy is not None:
                self._stopped_by = policy  # the stream is stopped even though the emitter's error wins
            raise emitter_error
        return policy
