"""Erasing a deleted conversation from every store that holds it.

What a conversation leaves, and where (``docs/storage.md`` has the table): its turns, turn logs, timeline, sources
pool and files in the conversation store (and the files' bytes in the artifact store); its memory entries in the
memory index; its title, feedback and usage records in the metadata store; its turns' event logs and control
streams in Redis (distributed mode). :func:`erase_conversation` removes all of it, the conversation's row last: a
deletion that fails half-way leaves the conversation listed, so deleting it again (or the retention sweep)
finishes the job. Usage records stay, for the totals, with an anonymous conversation id instead of its own.

The caller stops the conversation's turns first (:meth:`~berth.turns.services.HostServices.delete_conversation`):
a turn still running when its rows are erased could write some of them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio as aioredis

from berth.storage.conversations import ConversationStore
from berth.storage.memory import MemoryIndex
from berth.storage.meta import MetaStore
from berth.storage.scope import ConversationScope
from berth.turns.control import TurnControl
from berth.turns.redis_events import RedisTurnEventLog

__all__ = ["Erased", "erase_conversation"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Erased:
    """What erasing a conversation found: its turns, its memory entries, and whether its row existed."""

    turn_ids: tuple[str, ...]
    memory_entries: int
    existed: bool


async def erase_conversation(
    scope: ConversationScope,
    *,
    store: ConversationStore,
    memory: MemoryIndex,
    meta: MetaStore,
    redis: aioredis.Redis | None = None,
) -> Erased:
    """Erase the conversation ``scope`` names from the conversation store (with its files), the memory index,
    Redis (``redis``: the client of a distributed deployment, whose turns' event logs and control streams are
    deleted) and, last, the metadata store."""
    turn_ids = await store.conversation(scope).erase()
    entries = await memory.erase_conversation(scope)
    if redis is not None:
        control = TurnControl(redis)
        for turn_id in turn_ids:
            await RedisTurnEventLog(redis, turn_id).delete()
            await control.forget(turn_id)
    existed = await meta.erase_conversation(scope)
    log.info(
        "conversation %s/%s/%s erased: %d turn(s), %d memory entr(ies)",
        scope.tenant,
        scope.project,
        scope.conversation_id,
        len(turn_ids),
        entries,
    )
    return Erased(turn_ids=turn_ids, memory_entries=entries, existed=existed)
