"""The seam a turn queue needs from a conversation store: claiming a turn, and finding turns nobody runs.

In distributed mode (SPEC §8) a turn is accepted by an API process, queued, and run by whichever worker
claims it; when that worker dies, another one claims the turn again and resumes it from its last stored
round. The store is the source of truth about who runs a turn (its ``owner``); the queue only says which
turns to look at. A store that supports this implements :class:`TurnClaims`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from berth.storage.conversations import BlockRecord, TurnLog, TurnState
from berth.storage.scope import ConversationScope

__all__ = ["ClaimedTurn", "TurnClaims", "UnfinishedTurn"]


@dataclass(frozen=True, slots=True)
class ClaimedTurn:
    """A turn a worker now owns: its log so far (round 0 is its head) and the request it was accepted with."""

    log: TurnLog
    request: bytes


@dataclass(frozen=True, slots=True)
class UnfinishedTurn:
    """A turn stored ``accepted`` or ``running`` that no live process runs (its owner is the queue, or gone)."""

    scope: ConversationScope
    turn_id: str
    state: TurnState


class TurnClaims(Protocol):
    """Claiming unfinished turns for the process that runs them."""

    async def accept_queued_turn(
        self,
        scope: ConversationScope,
        turn_id: str,
        *,
        accepted_at: datetime,
        head: tuple[BlockRecord, ...],
        request: bytes,
    ) -> None:
        """Record an ``accepted`` turn owned by the queue, with the ``request`` a worker runs it from, durably.

        :raises StorageError: ``turn_exists``; ``turn_in_progress`` when the conversation has an unfinished turn.
        """
        ...

    async def claim_turn(self, scope: ConversationScope, turn_id: str) -> ClaimedTurn | None:
        """Make this store instance the turn's owner; return its log so far and its request.

        Returns None when the turn has ended (committed): there is nothing left to run.

        :raises StorageError: ``turn_owned`` when a live process runs it; ``turn_not_found``.
        """
        ...

    async def orphaned_turns(self, *, older_than_s: float) -> tuple[UnfinishedTurn, ...]:
        """The unfinished turns, accepted or begun more than ``older_than_s`` ago, that no live process owns."""
        ...
