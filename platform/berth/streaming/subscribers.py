"""Subscribers: code that watches a channel beside the primary emitter.

A subscriber is any callable taking a :data:`~berth.streaming.events.ChannelEvent` and returning
``None`` or an awaitable. It is attached to a channel (it sees every instance of it) or, through a
:data:`SubscriberFactory` called at each opening, to one instance. For each event the stream calls
the primary emitter and the channel's subscribers side by side: synchronous ones in registration
order, asynchronous ones awaited together.

Failure is contained: an exception from a subscriber is logged and that subscriber is detached (it
sees no further events); the others, the emitter and the stream go on. The one exception is
:class:`~berth.streaming.errors.StreamPolicyError`, by which a subscriber stops the whole stream.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from berth.streaming.errors import ChannelSetupError, StreamPolicyError
from berth.streaming.events import ChannelClosed, ChannelEvent, ChannelOpened

logger = logging.getLogger(__name__)

#: Watches one channel's events; may be sync or async.
Subscriber = Callable[[ChannelEvent], Awaitable[None] | None]
#: Called with each :class:`ChannelOpened` of a channel; returns the subscriber for that instance, or ``None``.
SubscriberFactory = Callable[[ChannelOpened], Subscriber | None]

#: An awaitable still to be awaited, with the subscriber it came from (``None`` for the emitter).
PendingCall = tuple[Subscriber | None, Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SubscriberFailure:
    """A subscriber (or subscriber factory) that raised, and was detached."""

    channel: str
    instance: int
    subscriber: str
    error: str


class SubscriberSet:
    """The subscribers of one stream, per channel and per open instance."""

    def __init__(self, channels: Collection[str]) -> None:
        self._known = frozenset(channels)
        self._per_channel: dict[str, list[Subscriber]] = {}
        self._factories: dict[str, list[SubscriberFactory]] = {}
        self._per_instance: dict[tuple[str, int], list[Subscriber]] = {}
        #: Every failure so far, in order.
        self.failures: list[SubscriberFailure] = []

    def add(self, channel: str, subscriber: Subscriber) -> None:
        """Attach ``subscriber`` to every instance of ``channel``."""
        self._per_channel.setdefault(self._declared(channel), []).append(subscriber)

    def add_factory(self, channel: str, factory: SubscriberFactory) -> None:
        """Call ``factory`` at each opening of ``channel``; the subscriber it returns sees that instance."""
        self._factories.setdefault(self._declared(channel), []).append(factory)

    def has_any(self) -> bool:
        """Whether any subscriber or factory is registered."""
        return bool(self._per_channel or self._factories)

    def call(self, event: ChannelEvent, pending: list[PendingCall]) -> StreamPolicyError | None:
        """Call the subscribers of ``event``'s channel; queue their awaitables on ``pending``.

        Return the first policy error raised synchronously, if any.
        """
        policy: StreamPolicyError | None = None
        key = (event.channel, event.instance)
        if type(event) is ChannelOpened:
            policy = self._start_instance(event)
        for subscriber in self._subscribers_of(key):
            try:
                outcome = subscriber(event)
            except StreamPolicyError as error:
                policy = policy or error
            except Exception as error:
                self.failed(subscriber, event, error)
            else:
                if outcome is not None and inspect.isawaitable(outcome):
                    pending.append((subscriber, outcome))
        if type(event) is ChannelClosed:
            self._per_instance.pop(key, None)
        return policy

    def failed(self, subscriber: Subscriber, event: ChannelEvent, error: BaseException) -> None:
        """Log a subscriber's failure and detach it."""
        logger.warning(
            "subscriber %r of channel %r failed on instance %d and was detached: %r",
            subscriber,
            event.channel,
            event.instance,
            error,
            exc_info=error,
        )
        self.failures.append(SubscriberFailure(event.channel, event.instance, repr(subscriber), repr(error)))
        for subscribers in (
            self._per_channel.get(event.channel),
            self._per_instance.get((event.channel, event.instance)),
        ):
            if subscribers is not None and subscriber in subscribers:
                subscribers.remove(subscriber)

    def _subscribers_of(self, key: tuple[str, int]) -> list[Subscriber]:
        channel_level = self._per_channel.get(key[0])
        instance_level = self._per_instance.get(key)
        if instance_level is None:
            return list(channel_level) if channel_level else []
        return [*(channel_level or ()), *instance_level]

    def _start_instance(self, event: ChannelOpened) -> StreamPolicyError | None:
        policy: StreamPolicyError | None = None
        for factory in self._factories.get(event.channel, ()):
            try:
                subscriber = factory(event)
            except StreamPolicyError as error:
                policy = policy or error
                continue
            except Exception as error:
                self.failures.append(SubscriberFailure(event.channel, event.instance, repr(factory), repr(error)))
                logger.warning(
                    "subscriber factory %r of channel %r failed on instance %d: %r",
                    factory,
                    event.channel,
                    event.instance,
                    error,
                    exc_info=error,
                )
                continue
            if subscriber is not None:
                self._per_instance.setdefault((event.channel, event.instance), []).append(subscriber)
        return policy

    def _declared(self, channel: str) -> str:
        name = channel.lower()
        if name not in self._known:
            known = ", ".join(sorted(self._known)) or "none"
            raise ChannelSetupError(
                "unknown_channel",
                f"cannot subscribe to channel {channel!r}: it is not declared (declared channels: {known})",
            )
        return name
