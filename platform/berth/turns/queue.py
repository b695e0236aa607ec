"""The turn queue: turns waiting in Redis in per-tenant fair order, and a stream workers take them from.

An entry names a turn (its scope and id) and nothing else: what the turn runs from (bundle, message,
attachments) is stored with the accepted turn in PostgreSQL, which stays the source of truth. The queue
only says which turns to look at, so losing it (Redis restarted without persistence) loses no turn: a
worker's reconciler queues again every unfinished turn that no live process owns and the queue no longer
holds (:meth:`TurnQueue.is_queued`).

Its keys, under ``prefix`` (``berth:turns``):

* ``:waiting`` — a sorted set of the turns no worker has taken yet, in fair order (below);
* ``:stream`` — the stream workers read in the consumer group ``workers``: a turn's entry is added when a worker
  takes it (:meth:`TurnQueue.take`), and stays pending for that worker until it acknowledges it
  (:meth:`TurnQueue.done`), so the group's pending entries are the turns being run;
* ``:queued`` — turn id → ``w:<ms>`` while it waits (queued at that Redis time), then its stream entry's id;
* ``:since`` — turn id → when it was queued (ms), for the age of the oldest unfinished turn;
* ``:clock`` — each tenant's virtual time, and the queue's (field ``""``);
* ``:bell`` — a list idle workers wait on (``BLPOP``): each enqueue pushes one token.

**Fairness** is start-time fair queueing over tenants: a turn's score is one more than the later of its tenant's
last score and the score of the last turn taken, so a tenant that queues fifty turns at once gets scores 1…50,
and one that queues a turn a moment later gets the next score after the turn being taken now: it waits behind one
turn of each busy tenant, never behind the whole backlog of one. Within a tenant, turns keep their order.

**Taking over**: a worker keeps its entries' idle time low while it runs them (:meth:`TurnQueue.keep_alive`);
an entry idle longer than the lease belongs to a worker that died, and :meth:`TurnQueue.take` gives it to a
worker with a free slot before any new turn (``XPENDING … IDLE`` then ``XCLAIM``, never more than it asks for).
Which worker may run the turn is decided by the store (:meth:`~berth.storage.claims.TurnClaims.claim_turn`),
never by the queue alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from berth.storage.redis_client import let_finish
from berth.storage.scope import ConversationScope

__all__ = ["GROUP", "QueueEntry", "TurnQueue"]

log = logging.getLogger(__name__)

GROUP = "workers"

BELL_TOKENS = 128
"""Tokens the bell keeps at most: enough to wake every idle worker of a burst."""

# KEYS: waiting, clock, queued, since, bell; ARGV: the entry's body, turn id, tenant.
# A turn that waits already is not queued twice (a retried or repeated enqueue).
_ENQUEUE = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local queue_time = tonumber(redis.call('HGET', KEYS[2], '') or 0)
local at = math.max(queue_time, tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or 0)) + 1
redis.call('HSET', KEYS[2], ARGV[3], at)
redis.call('ZADD', KEYS[1], at, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], 'w:' .. ms)
redis.call('ZADD', KEYS[4], 'NX', ms, ARGV[2])
redis.call('LPUSH', KEYS[5], '1')
redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[4]) - 1)
return 1
"""

# KEYS: stream, waiting, clock, queued; ARGV: group, consumer, count, min idle ms (< 0: reclaim none),
# take waiting turns ('1' or '0'). Entries idle past the lease first, then waiting turns in fair order: each
# is added to the stream and read at once by this consumer. Returns {reclaimed, new}.
_TAKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
local count = tonumber(ARGV[3])
local reclaimed = {}
if tonumber(ARGV[4]) >= 0 then
  local idle = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[4], '-', '+', count)
  if #idle > 0 then
    local ids = {}
    for i, pending in ipairs(idle) do ids[i] = pending[1] end
    reclaimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], unpack(ids))
  end
end
local fresh = {}
local wanted = count - #reclaimed
if ARGV[5] == '1' and wanted > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], wanted)
  for i = 1, #popped, 2 do
    local turn = cjson.decode(popped[i])['turn_id']
    local mark = redis.call('HGET', KEYS[4], turn)
    local since = ''
    if mark and string.sub(mark, 1, 2) == 'w:' then since = string.sub(mark, 3) end
    local id = redis.call('XADD', KEYS[1], '*', 'turn', popped[i], 'queued_at', since)
    redis.call('HSET', KEYS[4], turn, id)
    if tonumber(popped[i + 1]) > tonumber(redis.call('HGET', KEYS[3], '') or 0) then
      redis.call('HSET', KEYS[3], '', popped[i + 1])
    end
  end
  local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', wanted, 'STREAMS', KEYS[1], '>')
  if read then fresh = read[1][2] end
end
return {reclaimed, fresh}
"""

# KEYS: stream, queued, since; ARGV: group, entry id, turn id.
# Forget the turn's queued mark only when it names this entry (a newer entry for the turn keeps it).
_DONE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[3])
end
return 1
"""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A queued turn as a worker takes it: the stream entry's id, the turn's scope and id, and when the turn was
    queued (Redis time in ms; None for an entry an older release queued)."""

    entry_id: str
    scope: ConversationScope
    turn_id: str
    queued_at_ms: int | None = None

    @property
    def taken_at_ms(self) -> int:
        """When a worker took the turn (Redis time in ms): the stream entry's id begins with it."""
        return int(self.entry_id.partition("-")[0])

    @property
    def waited_s(self) -> float | None:
        """How long the turn waited in the queue before a worker took it (None when unknown)."""
        if self.queued_at_ms is None:
            return None
        return max(self.taken_at_ms - self.queued_at_ms, 0) / 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(entry_id: Any, fields: Any) -> QueueEntry | None:
    """The entry of a stream reply: ``fields`` a mapping (a command's reply) or a flat list (a script's)."""
    if not fields:  # an entry deleted meanwhile
        return None
    if not isinstance(fields, dict):
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    data = json.loads(fields[b"turn"])
    scope = ConversationScope(
        tenant=data["tenant"], project=data["project"], user_id=data["user"], conversation_id=data["conversation"]
    )
    queued_at = fields.get(b"queued_at")
    return QueueEntry(
        entry_id=_text(entry_id),
        scope=scope,
        turn_id=data["turn_id"],
        queued_at_ms=int(queued_at) if queued_at else None,
    )


def _entries(items: Any) -> list[QueueEntry]:
    return [entry for entry_id, fields in items or () if (entry := _entry(entry_id, fields))]


class TurnQueue:
    """The turn queue under ``prefix`` (its keys: see the module's description)."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "berth:turns") -> None:
        self._client = client
        self._stream = f"{prefix}:stream"
        self._waiting = f"{prefix}:waiting"
        self._clock = f"{prefix}:clock"
        self._queued = f"{prefix}:queued"
        self._since = f"{prefix}:since"
        self._bell = f"{prefix}:bell"
        self._enqueue = client.register_script(_ENQUEUE)
        self._take = client.register_script(_TAKE)
        self._done = client.register_script(_DONE)

    async def ensure_group(self) -> None:
        """Create the stream and its consumer group unless they exist (a restarted Redis has neither)."""
        try:
            await self._client.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, scope: ConversationScope, turn_id: str) -> bool:
        """Queue a turn (already stored as accepted) behind its tenant's waiting turns, in fair order; return
        False when it waits already (a repeated enqueue queues nothing)."""
        body = json.dumps(
            {
                "tenant": scope.tenant,
                "project": scope.project,
                "user": scope.user_id,
                "conversation": scope.conversation_id,
                "turn_id": turn_id,
            }
        )
        keys = [self._waiting, self._clock, self._queued, self._since, self._bell]
        return bool(await self._enqueue(keys=keys, args=[body, turn_id, scope.tenant, BELL_TOKENS]))

    async def take(
        self, consumer: str, count: int, *, min_idle_ms: int | None, new: bool = True
    ) -> tuple[list[QueueEntry], list[QueueEntry]]:
        """Give ``consumer`` up to ``count`` turns at once, never more: first entries pending longer than
        ``min_idle_ms`` (their worker died; None: none), then (``new``) waiting turns in fair order. Returns
        (reclaimed, new); an entry deleted meanwhile is dropped."""
        keys = [self._stream, self._waiting, self._clock, self._queued]
        idle = -1 if min_idle_ms is None else max(min_idle_ms, 0)
        args: list[str | int] = [GROUP, consumer, max(count, 0), idle, "1" if new else "0"]
        try:
            reclaimed, fresh = await self._take(keys=keys, args=args)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("the turn queue's consumer group is gone (Redis restarted?): creating it again")
            await self.ensure_group()
            return [], []
        return _entries(reclaimed), _entries(fresh)

    async def read(self, consumer: str, count: int, *, block_ms: int) -> list[QueueEntry]:
        """Up to ``count`` waiting turns for ``consumer``, waiting up to ``block_ms`` for one when none waits."""
        _, fresh = await self.take(consumer, count, min_idle_ms=None)
        if not fresh and block_ms > 0:
            await self.wait(block_ms / 1000)
            _, fresh = await self.take(consumer, count, min_idle_ms=None)
        return fresh

    async def reclaim(self, consumer: str, *, min_idle_ms: int, count: int = 10) -> list[QueueEntry]:
        """Take over up to ``count`` entries pending longer than ``min_idle_ms`` (their worker died)."""
        reclaimed, _ = await self.take(consumer, count, min_idle_ms=min_idle_ms, new=False)
        return reclaimed

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a turn to be queued (one token of the bell); return whether one was."""
        reply = await let_finish(self._client.blpop([self._bell], timeout=max(timeout_s, 0.01)))
        return reply is not None

    async def keep_alive(self, consumer: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries ``consumer`` is running (so no other worker reclaims them)."""
        if entry_ids:
            await self._client.xclaim(self._stream, GROUP, consumer, 0, list(entry_ids), justid=True)

    async def done(self, entry: QueueEntry) -> None:
        """Acknowledge and delete a finished entry; forget its turn's queued mark if the mark names it."""
        await self._done(keys=[self._stream, self._queued, self._since], args=[GROUP, entry.entry_id, entry.turn_id])

    async def is_queued(self, turn_id: str) -> bool:
        """Whether the queue holds the turn (waiting, or taken by a worker and not yet done)."""
        return bool(await self._client.hexists(self._queued, turn_id))

    async def depth(self) -> int:
        """How many turns the queue holds, waiting or taken and not yet done."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.zcard(self._waiting)
            pipe.xlen(self._stream)
            waiting, taken = await pipe.execute(raise_on_error=False)
        return sum(int(count) for count in (waiting, taken) if not isinstance(count, Exception))

    async def oldest_age_s(self) -> float | None:
        """How long ago the oldest turn the queue holds was queued, in seconds (None when it holds none)."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.zrange(self._since, 0, 0, withscores=True)
            pipe.time()
            oldest, (seconds, micros) = await pipe.execute()
        if not oldest:
            return None
        now_s = float(seconds) + float(micros) / 1_000_000
        return max(now_s - float(oldest[0][1]) / 1000, 0.0)
