"""The retention sweep: deletes the conversations whose last activity is older than their scope keeps them.

``retention.conversations_days`` (``assembly.yaml``: the platform, a tenant or a project; off by default) says how
long a conversation is kept after its last activity. A host's sweep looks every ``retention.sweep_interval_s``
(platform level) at each declared tenant/project that has a retention, asks the metadata store for the
conversations last active before the cutoff (a batch at a time, least recent first) and deletes each one as its
owner's ``DELETE`` does. A conversation with a turn that has not ended is left for the next round (a turn touches
the conversation only as it ends).

Every API process and worker runs the sweep; in a distributed deployment one of them sweeps per interval (the one
that takes the round's lease in Redis), and a deletion is idempotent anyway: two sweeps that met would delete each
conversation once and find it gone the second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis

from berth.storage.meta import MetaStore
from berth.storage.scope import ConversationScope

__all__ = ["SWEEP_BATCH", "RedisSweepLease", "RetentionSweep"]

log = logging.getLogger(__name__)

SWEEP_BATCH = 100
"""Conversations asked for (and deleted) at a time."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class RedisSweepLease:
    """Who sweeps this round in a distributed deployment: the process that sets the lease key first (it expires
    with the round, so the next round goes to whoever asks first then)."""

    def __init__(self, client: aioredis.Redis, *, key: str = "berth:retention:sweep") -> None:
        self._client = client
        self._key = key
        self._token = secrets.token_hex(8)

    async def take(self, seconds: float) -> bool:
        """Take the lease for ``seconds`` (at least one millisecond); return whether this process has it."""
        taken = await self._client.set(self._key, self._token, nx=True, px=max(int(seconds * 1000), 1))
        return bool(taken)


class RetentionSweep:
    """Deletes the conversations past their scope's retention (see the module).

    :param meta: where conversations are listed by last activity.
    :param delete: deletes one conversation as its owner's ``DELETE`` does; returns whether it existed.
    :param busy: whether a conversation has a turn that has not ended (it is skipped this round).
    :param scopes: the declared (tenant, project) pairs.
    :param retention_days: a scope's ``retention.conversations_days`` (None: kept).
    :param interval_s: ``retention.sweep_interval_s``, read at every round.
    :param lease: takes this round's lease (distributed); None sweeps every round.
    :param clock: now, as an aware time (tests give their own).
    """

    def __init__(
        self,
        *,
        meta: MetaStore,
        delete: Callable[[ConversationScope], Awaitable[bool]],
        busy: Callable[[ConversationScope], Awaitable[bool]],
        scopes: Callable[[], Sequence[tuple[str, str]]],
        retention_days: Callable[[str, str], float | None],
        interval_s: Callable[[], float],
        lease: RedisSweepLease | None = None,
        clock: Callable[[], datetime] = _utc_now,
        batch: int = SWEEP_BATCH,
    ) -> None:
        self._meta = meta
        self._delete = delete
        self._busy = busy
        self._scopes = scopes
        self._retention_days = retention_days
        self._interval_s = interval_s
        self._lease = lease
        self._clock = clock
        self._batch = batch
        self.rounds = 0
        """Rounds this sweep has finished (swept, or left to another process's lease)."""
        self.deleted = 0
        """Conversations this sweep has deleted."""
        self._round_ended: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None

    async def sweep_once(self, now: datetime | None = None) -> int:
        """Delete every conversation past its scope's retention at ``now`` (the clock's when None); return how many.

        A conversation whose deletion fails is logged and left for the next round (it is still listed).
        """
        now = now or self._clock()
        deleted = 0
        for tenant, project in self._scopes():
            days = self._retention_days(tenant, project)
            if days is None:
                continue
            cutoff = now - timedelta(days=days)
            in_scope = 0
            skipped: set[ConversationScope] = set()  # busy, or failed: asked for again, never deleted this round
            while True:
                limit = self._batch + len(skipped)
                batch = await self._meta.inactive_conversations(tenant, project, before=cutoff, limit=limit)
                due = [scope for scope in batch if scope not in skipped]
                for scope in due:
                    if await self._busy(scope):
                        skipped.add(scope)
                        continue
                    try:
                        in_scope += bool(await self._delete(scope))
                    except Exception:
                        log.warning("retention: could not delete conversation %s", scope.conversation_id, exc_info=True)
                        skipped.add(scope)
                if not due or len(batch) < limit:  # nothing new, or every conversation past the cutoff was in it
                    break
            if in_scope:
                log.info("retention: %s/%s keeps conversations %g days; %d deleted", tenant, project, days, in_scope)
            deleted += in_scope
        self.deleted += deleted
        return deleted

    async def run(self) -> None:
        """Sweep every ``interval_s`` until :meth:`stop` (a supervised background task: a failure starts it again)."""
        self._stopping = self._stopping or asyncio.Event()
        while not self._stopping.is_set():
            interval = self._interval_s()
            if self._lease is None or await self._lease.take(interval * 0.9):
                await self.sweep_once()
            self.rounds += 1
            if self._round_ended is not None:
                self._round_ended.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)

    def stop(self) -> None:
        """Let :meth:`run` return after the round under way (or at once, between rounds)."""
        self._stopping = self._stopping or asyncio.Event()
        self._stopping.set()

    async def wait_for_rounds(self, rounds: int) -> None:
        """Wait until this sweep has finished ``rounds`` rounds in all."""
        while self.rounds < rounds:
            self._round_ended = self._round_ended or asyncio.Event()
            await self._round_ended.wait()
            self._round_ended = asyncio.Event()
