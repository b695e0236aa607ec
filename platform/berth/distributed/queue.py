"""The turn queue: a Redis stream that API processes append to and workers read in one consumer group.

An entry names a turn (its scope and id) and nothing else: what the turn runs from (bundle, message,
attachments) is stored with the accepted turn in PostgreSQL, which stays the source of truth. The queue
only says which turns to look at, so losing it (Redis restarted without persistence) loses no turn: a
worker's reconciler queues again every unfinished turn that no live process owns and the queue no longer
holds (:meth:`TurnQueue.is_queued`).

* An entry is read by one worker of the group (``XREADGROUP``); it stays pending until that worker has
  committed the turn and acknowledges it (:meth:`TurnQueue.done`).
* A worker keeps its entries' idle time low while it runs them (:meth:`TurnQueue.keep_alive`); an entry
  idle longer than the lease belongs to a worker that died, and another one takes it (``XAUTOCLAIM``,
  :meth:`TurnQueue.reclaim`). Which worker may run the turn is decided by the store
  (:meth:`~berth.storage.claims.TurnClaims.claim_turn`), never by the queue alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from berth.distributed.redis_client import let_finish
from berth.storage.scope import ConversationScope

__all__ = ["QueueEntry", "TurnQueue"]

log = logging.getLogger(__name__)

GROUP = "workers"

_ENQUEUE = """
local id = redis.call('XADD', KEYS[1], '*', 'turn', ARGV[1])
redis.call('HSET', KEYS[2], ARGV[2], id)
return id
"""

# Forget the turn's queued mark only when it names this entry (a newer entry for the turn keeps it).
_DONE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[2] then redis.call('HDEL', KEYS[2], ARGV[3]) end
return 1
"""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A queued turn as a worker reads it: the stream entry's id, the turn's scope and id."""

    entry_id: str
    scope: ConversationScope
    turn_id: str


def _entry(entry_id: Any, fields: Any) -> QueueEntry | None:
    if not fields:  # XAUTOCLAIM reports an entry deleted meanwhile with no fields
        return None
    data = json.loads(fields[b"turn"])
    scope = ConversationScope(
        tenant=data["tenant"], project=data["project"], user_id=data["user"], conversation_id=data["conversation"]
    )
    key = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return QueueEntry(entry_id=key, scope=scope, turn_id=data["turn_id"])


class TurnQueue:
    """The turn queue under ``prefix`` (the stream ``<prefix>:stream``, the queued marks ``<prefix>:queued``)."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "berth:turns") -> None:
        self._client = client
        self._stream = f"{prefix}:stream"
        self._queued = f"{prefix}:queued"
        self._enqueue = client.register_script(_ENQUEUE)
        self._done = client.register_script(_DONE)

    async def ensure_group(self) -> None:
        """Create the stream and its consumer group unless they exist (a restarted Redis has neither)."""
        try:
            await self._client.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, scope: ConversationScope, turn_id: str) -> str:
        """Queue a turn (already stored as accepted); return its entry id."""
        body = json.dumps(
            {
                "tenant": scope.tenant,
                "project": scope.project,
                "user": scope.user_id,
                "conversation": scope.conversation_id,
                "turn_id": turn_id,
            }
        )
        entry_id = await self._enqueue(keys=[self._stream, self._queued], args=[body, turn_id])
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def read(self, consumer: str, count: int, *, block_ms: int) -> list[QueueEntry]:
        """Up to ``count`` new entries for ``consumer``, waiting up to ``block_ms`` for the first."""
        try:
            reply: Any = await let_finish(
                self._client.xreadgroup(GROUP, consumer, {self._stream: ">"}, count=count, block=block_ms)
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("the turn queue's consumer group is gone (Redis restarted?): creating it again")
            await self.ensure_group()
            return []
        return [entry for _, items in reply or () for entry_id, fields in items if (entry := _entry(entry_id, fields))]

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int = 10) -> list[QueueEntry]:
        """Take over entries pending longer than ``min_idle_ms`` (their worker died); deleted ones are dropped."""
        try:
            reply = await self._client.xautoclaim(self._stream, GROUP, consumer, min_idle_ms, "0-0", count=count)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        return [entry for entry_id, fields in reply[1] if (entry := _entry(entry_id, fields))]

    async def keep_alive(self, consumer: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries ``consumer`` is running (so no other worker reclaims them)."""
        if entry_ids:
            await self._client.xclaim(self._stream, GROUP, consumer, 0, list(entry_ids), justid=True)

    async def done(self, entry: QueueEntry) -> None:
        """Acknowledge and delete a finished entry; forget its turn's queued mark if the mark names it."""
        await self._done(keys=[self._stream, self._queued], args=[GROUP, entry.entry_id, entry.turn_id])

    async def is_queued(self, turn_id: str) -> bool:
        """Whether the queue holds an entry for the turn (pending or not yet read)."""
        return bool(await self._client.hexists(self._queued, turn_id))

    async def depth(self) -> int:
        """How many entries the stream holds (not yet finished)."""
        try:
            return int(await self._client.xlen(self._stream))
        except ResponseError:
            return 0
