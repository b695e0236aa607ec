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

__all__ = ["POISONED", "ClaimedTurn", "ParkedTurn", "TurnClaims", "UnfinishedTurn"]

POISONED = "turn_poisoned"
"""The exit reason (and event code) of a turn parked after too many attempts."""


@dataclass(frozen=True, slots=True)
class ClaimedTurn:
    """A turn a worker now owns: its log so far (round 0 is its head), the request it was accepted with, and which
    attempt this is (1 for the first worker to begin it)."""

    log: TurnLog
    request: bytes
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class ParkedTurn:
    """A turn claimed once more than its attempts allow: the claim stored it ``failed`` (``turn_poisoned``)."""

    attempts: int
    error: str


@dataclass(frozen=True, slots=True)
class UnfinishedTurn:
    """A turn stored ``accepted`` or ``running``: one no live process runs (its owner is the queue, or gone), or, in
    an operator's listing (:meth:`TurnClaims.unfinished_turns`), any unfinished turn."""

    scope: ConversationScope
    turn_id: str
    state: TurnState
    started_at: datetime | None = None
    attempts: int = 0
    error: str | None = None
    owner_alive: bool = False
    """Whether a live process owns it now (a turn running normally); False for one the queue or a dead owner holds."""


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

    async def claim_turn(
        self, scope: ConversationScope, turn_id: str, *, max_attempts: int | None = None, alone: bool = True
    ) -> ClaimedTurn | ParkedTurn | None:
        """Make this store instance the turn's owner, counting one more attempt; return its log so far and its
        request.

        Returns None when the turn has ended (committed): there is nothing left to run. When this claim would be
        attempt ``max_attempts + 1``, the turn is parked instead: stored ``failed`` with exit reason
        :data:`POISONED` and its last error, and a :class:`ParkedTurn` returned.

        The last attempt of a turn begun before is refused to a claimer that runs other turns (``alone`` false),
        so the turns sharing a worker with one that kills its workers are not parked in its place.

        :raises StorageError: ``turn_owned`` when a live process runs it; ``turn_not_found``; ``turn_needs_isolation``
            (nothing changed) for such a last attempt claimed by a busy worker.
        """
        ...

    async def owner_alive(self, scope: ConversationScope, turn_id: str) -> bool:
        """Whether a live process owns the turn now (a worker claimed it: it may be running it)."""
        ...

    async def release_turn(self, scope: ConversationScope, turn_id: str, *, error: str) -> bool:
        """Give a turn this instance owns back to the queue after an attempt that failed, recording ``error``;
        return whether it did (False when the turn has ended or another process owns it)."""
        ...

    async def end_turn(
        self, scope: ConversationScope, turn_id: str, *, state: TurnState, code: str, error: str
    ) -> int | None:
        """Store an unfinished turn as ended (``failed`` or ``cancelled``, exit reason ``code``), whoever owns it;
        return its attempts so far (the epoch its end event goes after), or None when it was not unfinished. A
        worker still running it is refused at its next write."""
        ...

    async def retry_turn(self, scope: ConversationScope, turn_id: str) -> bool:
        """Give an unfinished turn back to the queue with its attempts reset (an operator's retry); return whether
        it was unfinished."""
        ...

    async def unfinished_turns(self) -> tuple[UnfinishedTurn, ...]:
        """Every turn stored ``accepted`` or ``running``, oldest first, with its attempts and whether a live process
        owns it (an operator's view)."""
        ...

    async def orphaned_turns(self, *, older_than_s: float) -> tuple[UnfinishedTurn, ...]:
        """The unfinished turns, accepted or begun more than ``older_than_s`` ago, that no live process owns."""
        ...
