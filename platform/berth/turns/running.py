"""A running turn as the service tracks it, and the small values its callers get back: where a live event went,
a file to send, the URL of a turn's events."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from berth.runtime.blocks import format_utc
from berth.runtime.live import LiveInbox, ReceivedEvent
from berth.storage.scope import ConversationScope
from berth.turns.event_log import TurnEventLog
from berth.turns.redis_events import RedisTurnEventLog

__all__ = ["FileSource", "LiveDelivery", "RunningTurn", "events_url", "live_event_data", "new_id"]


def new_id(prefix: str) -> str:
    """A short random id such as ``c_1a2b3c4d5e6f``."""
    return f"{prefix}_{secrets.token_hex(6)}"


@dataclass
class RunningTurn:
    """A turn the API started: its scope, event log and task."""

    scope: ConversationScope
    turn_id: str
    bundle_id: str
    log: TurnEventLog | RedisTurnEventLog
    task: asyncio.Task[Any] | None = None
    """The turn's task while it runs; dropped when it ends (a finished turn keeps only what replays its events)."""
    started: float = field(default_factory=time.monotonic)
    inbox: LiveInbox = field(init=False)
    """The follow-ups and steers sent to the turn while it runs."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the turn has ended (committed, or failed before it began): the conversation takes a next turn."""

    def __post_init__(self) -> None:
        self.inbox = LiveInbox(self.turn_id)


@dataclass(frozen=True)
class LiveDelivery:
    """Where a live event went: into turn ``turn_id`` (recorded at ``path``; None while that turn still waits
    in the turn queue: it takes the event when it starts), or it started turn ``turn_id``."""

    turn_id: str
    path: str | None
    started_turn: bool


@dataclass(frozen=True)
class FileSource:
    """A conversation file to send: its bytes, a stream of them, or a URL the client downloads it from."""

    data: bytes | None = None
    chunks: AsyncIterator[bytes] | None = None
    url: str | None = None


def events_url(scope: ConversationScope, turn_id: str) -> str:
    """Where a turn's events stream (relative to the API's root)."""
    return f"/v1/{scope.tenant}/{scope.project}/conversations/{scope.conversation_id}/turns/{turn_id}/events"


def live_event_data(received: ReceivedEvent) -> dict[str, Any]:
    """The client event of a live event: its kind, message, logical path, files and time."""
    block = received.block
    return {
        "kind": received.event.kind,
        "message": received.event.message,
        "path": block.path,
        "attachments": [{"name": b.meta.get("name"), "path": b.path} for b in received.blocks[1:]],
        "ts": format_utc(block.ts),
    }
