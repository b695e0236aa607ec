"""A turn's event buffer in a Redis stream: any worker can serve a stream or its resume (SPEC §5.2).

The worker running the turn appends each event's frame, encoded once as in :mod:`berth.turns.event_log`, to the
stream ``<prefix><turn_id>`` under the entry id ``<seq>-0``, so the SSE id ``<turn_id>:<seq>`` *is* the
stream position: resuming after ``Last-Event-ID: <turn_id>:<n>`` is ``XREAD`` from ``n-0``, with no loss
and no duplicate whichever worker the client reconnects to. Closing adds an end marker (entry
``<last seq>-1``). Every write renews the key's expiry, so buffers of finished (or abandoned) turns go away
by themselves after :data:`EVENTS_TTL_S`.

A sequence number is never given to two different events, even when Redis loses what it held (restarted without
its data, or with an append-only file that missed the last second): each attempt at a turn numbers its events in
an epoch of its own (attempt ``k`` from ``(k - 1) * EPOCH_SEQS + 1``, :func:`epoch_floor`), above every number an
earlier attempt can have handed out, and what ends a turn without running it numbers after the last attempt's
epoch. A client that resumes from a number of an earlier attempt reads on from the next event stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from berth.runtime.events import TurnEvent
from berth.storage.redis_client import let_finish
from berth.turns.event_log import HEARTBEAT, encode_frame

__all__ = ["EPOCH_SEQS", "EVENTS_TTL_S", "RedisTurnEventLog", "epoch_floor", "last_position"]

log = logging.getLogger(__name__)

EVENTS_TTL_S = 3600
"""How long a turn's events stay replayable after its last event."""

EPOCH_SEQS = 1_000_000_000
"""Sequence numbers each attempt at a turn has to itself (far more events than one attempt emits)."""


def epoch_floor(attempts: int) -> int:
    """The number after which the events of epoch ``attempts`` begin: attempt ``k`` of a turn writes in epoch
    ``k - 1``; a writer that ends a turn its ``k`` attempts left unfinished writes in epoch ``k``."""
    return max(attempts, 0) * EPOCH_SEQS


def last_position(entry_id: Any) -> tuple[int, bool]:
    """The sequence number of a stream entry id (``<seq>-0`` an event, ``<seq>-1`` the end marker) and whether
    it is the end marker."""
    seq, _, part = (entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)).partition("-")
    return int(seq), part == "1"


_FRAME = b"f"
_END = b"end"
_READ_BATCH = 512


def _holds_end(entries: Any) -> bool:
    """Whether stream ``entries`` hold a turn's end event."""
    ends = (b"event: turn.completed\n", b"event: turn.failed\n")
    return any(_FRAME in fields and any(end in fields[_FRAME] for end in ends) for _, fields in entries or ())


class RedisTurnEventLog:
    """The events of one turn in a Redis stream; the same interface as :class:`berth.turns.event_log.TurnEventLog`.

    The writer (the worker running the turn) knows :attr:`count` and :attr:`closed`; a reader elsewhere
    makes its own instance for the turn and only calls :meth:`frames`.
    """

    def __init__(
        self, client: aioredis.Redis, turn_id: str, *, prefix: str = "berth:events:", ttl_s: int = EVENTS_TTL_S
    ) -> None:
        self.turn_id = turn_id
        self._client = client
        self._key = prefix + turn_id
        self._ttl_s = ttl_s
        self._count = 0
        self._closed = False
        self.ended = False
        """Whether the turn's end (``turn.completed`` or ``turn.failed``) is among the last events stored (known
        after :meth:`take_over`)."""
        self._pending: list[tuple[int, bytes]] = []  # appended, not written yet: (seq, frame)
        self._flusher: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        """True once this writer has closed the log."""
        return self._closed

    @property
    def count(self) -> int:
        """How many events this writer has appended."""
        return self._count

    async def exists(self) -> bool:
        """Whether Redis still holds the turn's events (they expire :data:`EVENTS_TTL_S` after the last one)."""
        return bool(await self._client.exists(self._key))

    async def take_over(self, floor: int = 0) -> None:
        """Continue a log another writer began (a worker resuming a turn whose worker died): the next event
        follows the last one stored and ``floor`` (this writer's epoch: :func:`epoch_floor`), so a client's resume
        position stays valid and no number is handed out twice, whatever Redis lost."""
        last: Any = await self._client.xrevrange(self._key, count=3)
        stored = 0
        if last:
            stored, self._closed = last_position(last[0][0])
            self.ended = _holds_end(last)
        self._count = max(stored, floor)

    async def is_closed(self) -> bool:
        """Whether the log's writer has closed it (its end marker is stored): nothing more is written to it."""
        last: Any = await self._client.xrevrange(self._key, count=1)
        return bool(last) and last_position(last[0][0])[1]

    async def delete(self) -> None:
        """Delete the turn's events from Redis (its conversation was deleted)."""
        await self._client.delete(self._key)

    async def last_seq(self) -> int | None:
        """The sequence number of the last event stored (or of the end marker); None when Redis holds no log."""
        last: Any = await self._client.xrevrange(self._key, count=1)
        return last_position(last[0][0])[0] if last else None

    async def holds_end(self) -> bool:
        """Whether the turn's end (``turn.completed`` or ``turn.failed``) is among the last events stored."""
        return _holds_end(await self._client.xrevrange(self._key, count=3))

    async def append(self, event: TurnEvent) -> None:
        """Append the next event's frame. It is written behind: the events a turn emits while one write is on its
        way go together in the next one (a pipeline of ``XADD``s and the key's expiry), so a burst of deltas
        costs one round trip, not one each. :meth:`close` (or :meth:`flush`) waits until all are written."""
        if self._closed:
            raise RuntimeError(f"the event log of turn {self.turn_id} is closed")
        self._count += 1
        self._pending.append((self._count, encode_frame(f"{self.turn_id}:{self._count}", event)))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._write_pending(), name="turn events")

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for seq, frame in batch:
                        pipe.xadd(self._key, {_FRAME: frame}, id=f"{seq}-0")
                    pipe.expire(self._key, self._ttl_s)
                    await pipe.execute()
            except Exception:  # Redis gone past the client's retries: the store still holds the turn
                log.warning("could not write %d event(s) of turn %s to Redis", len(batch), self.turn_id, exc_info=True)

    async def flush(self) -> None:
        """Wait until every appended event is written."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    async def close(self) -> None:
        """Write what is pending, then mark the turn finished: readers end after the last event."""
        if self._closed:
            return
        self._closed = True
        await self.flush()
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.xadd(self._key, {_END: b""}, id=f"{self._count}-1")
            pipe.expire(self._key, self._ttl_s)
            await pipe.execute()

    async def frames(self, after: int = 0, heartbeat_s: float = 15.0) -> AsyncIterator[bytes]:
        """Frames after sequence ``after``, then new ones as they come; heartbeats while idle.

        Each piece yielded holds every frame one read returned (whole frames, in order).
        """
        position = f"{max(after, 0)}-0"
        block_ms = max(int(heartbeat_s * 1000), 1)
        while True:
            # RESP2 shape (the client's default): [[key, [(entry id, {field: value}), ...]]]
            reply: Any = await let_finish(self._client.xread({self._key: position}, count=_READ_BATCH, block=block_ms))
            if not reply:
                yield HEARTBEAT
                continue
            entries = reply[0][1]
            ready: list[bytes] = []
            ended = False
            for entry_id, fields in entries:
                position = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                if _END in fields:
                    ended = True
                    break
                ready.append(fields[_FRAME])
            if ready:
                yield ready[0] if len(ready) == 1 else b"".join(ready)
            if ended:
                return
