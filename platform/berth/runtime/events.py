"""Events a turn streams to clients (SPEC §5.2); the API encodes them as SSE frames."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

TurnEventType: TypeAlias = Literal[
    "turn.started",
    "channel.delta",
    "channel.done",
    "tool.call",
    "tool.result",
    "plan",
    "notice",
    "compaction",
    "citation.sources",
    "artifact",
    "turn.completed",
    "turn.failed",
    "user.followup",
    "user.steer",
    "conversation.titled",
]


@dataclass(slots=True)
class TurnEvent:
    """One client event: its type and a JSON-ready payload.

    Built for every streamed delta, so a slotted dataclass that is not declared ``frozen`` (a frozen
    one's ``__init__`` costs three times as much); nothing changes an event once it is emitted.
    """

    type: TurnEventType
    data: dict[str, Any] = field(default_factory=dict)


EventSink = Callable[[TurnEvent], Awaitable[None]]
"""Receives a turn's events in order."""


async def discard_events(event: TurnEvent) -> None:
    """An :data:`EventSink` that drops everything (tests, benchmarks)."""
