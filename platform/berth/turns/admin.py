"""An operator's hold on the unfinished turns of a distributed deployment: list them, end one, run one again.

A turn is *stuck* when no live process owns it and it has waited longer than an operator's threshold: its worker
died and no other took it over yet, the queue lost it, or it waits out the lease after a failed attempt. The
workers end every such turn by themselves (take-over after the lease, the reconciler, parking after
``max_turn_attempts``); these operations are for what an operator decides sooner:

* :meth:`TurnAdmin.end` stores the turn ``failed`` with code ``ended_by_operator`` and the reason given, whoever
  owns it (a worker still running it is refused at its next write), and ends its event stream with that outcome;
* :meth:`TurnAdmin.retry` gives it back to the queue with its attempts reset (a parked cause fixed, say).

``berth turns`` and ``/v1/admin/turns`` both call these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.runtime.events import TurnEvent
from berth.storage.claims import TurnClaims, UnfinishedTurn
from berth.turns.queue import TurnQueue
from berth.turns.redis_events import RedisTurnEventLog, epoch_floor

__all__ = ["ENDED_BY_OPERATOR", "TurnAdmin", "TurnNotUnfinishedError", "TurnRunningError", "turn_row"]

ENDED_BY_OPERATOR = "ended_by_operator"
"""The exit reason (and event code) of a turn an operator ended."""


class TurnNotUnfinishedError(LookupError):
    """No unfinished turn has the id (it ended, or never existed)."""


class TurnRunningError(RuntimeError):
    """The turn runs on a live worker: it is not stuck (end it, or let it finish)."""


def turn_row(turn: UnfinishedTurn, now: datetime) -> dict[str, Any]:
    """An unfinished turn as the admin route and ``berth turns list --format json`` show it."""
    scope = turn.scope
    age = (now - turn.started_at).total_seconds() if turn.started_at is not None else None
    return {
        "turn_id": turn.turn_id,
        "tenant": scope.tenant,
        "project": scope.project,
        "user_id": scope.user_id,
        "conversation_id": scope.conversation_id,
        "state": turn.state,
        "age_s": round(age, 1) if age is not None else None,
        "attempts": turn.attempts,
        "owner_alive": turn.owner_alive,
        "last_error": turn.error,
    }


@dataclass
class TurnAdmin:
    """Operations on unfinished turns through the store's claims, the queue and the turns' event logs."""

    claims: TurnClaims
    queue: TurnQueue
    redis: Any

    async def unfinished(
        self,
        *,
        stuck_after_s: float | None = None,
        tenant: str | None = None,
        covers: Callable[[str, str], bool] | None = None,
    ) -> list[UnfinishedTurn]:
        """The unfinished turns, oldest first; with ``stuck_after_s``, only those no live process owns that began
        (or were accepted) longer ago than that; with ``tenant``, only that tenant's; with ``covers``, only those
        whose (tenant, project) it holds true for (an admin key's :meth:`~berth.turns.callers.Caller.may_use`)."""
        now = datetime.now(UTC)
        turns = []
        for turn in await self.claims.unfinished_turns():
            if tenant is not None and turn.scope.tenant != tenant:
                continue
            if covers is not None and not covers(turn.scope.tenant, turn.scope.project):
                continue
            if stuck_after_s is not None:
                waited = (now - turn.started_at).total_seconds() if turn.started_at is not None else 0.0
                if turn.owner_alive or waited < stuck_after_s:
                    continue
            turns.append(turn)
        return turns

    async def find(
        self, turn_id: str, *, tenant: str | None = None, covers: Callable[[str, str], bool] | None = None
    ) -> UnfinishedTurn:
        """The unfinished turn ``turn_id`` (of ``tenant``, of a scope ``covers`` holds for, when given).

        :raises TurnNotUnfinishedError: when there is none.
        """
        for turn in await self.unfinished(tenant=tenant, covers=covers):
            if turn.turn_id == turn_id:
                return turn
        raise TurnNotUnfinishedError(f"no unfinished turn {turn_id!r}: it has ended, or there is no such turn")

    async def end(
        self,
        turn_id: str,
        *,
        reason: str,
        tenant: str | None = None,
        covers: Callable[[str, str], bool] | None = None,
    ) -> UnfinishedTurn:
        """Store the turn ``failed`` (``ended_by_operator``, ``reason``) and end its event stream so.

        :raises TurnNotUnfinishedError: when it is not unfinished (it ended meanwhile).
        """
        turn = await self.find(turn_id, tenant=tenant, covers=covers)
        attempts = await self.claims.end_turn(turn.scope, turn_id, state="failed", code=ENDED_BY_OPERATOR, error=reason)
        if attempts is None:
            raise TurnNotUnfinishedError(f"turn {turn_id!r} ended before it could be ended")
        events = RedisTurnEventLog(self.redis, turn_id)
        await events.take_over(epoch_floor(attempts))  # after every number an attempt handed out
        if not events.closed:
            if not events.ended:
                data = {"code": ENDED_BY_OPERATOR, "message": reason, "turn_id": turn_id}
                await events.append(TurnEvent("turn.failed", data))
            await events.close()
        return turn

    async def retry(
        self, turn_id: str, *, tenant: str | None = None, covers: Callable[[str, str], bool] | None = None
    ) -> UnfinishedTurn:
        """Give the turn back to the queue with its attempts reset, and queue it now.

        :raises TurnNotUnfinishedError: when it is not unfinished.
        :raises TurnRunningError: when a live worker runs it.
        """
        turn = await self.find(turn_id, tenant=tenant, covers=covers)
        if turn.owner_alive:
            raise TurnRunningError(f"turn {turn_id!r} runs on a live worker: end it, or let it finish")
        if not await self.claims.retry_turn(turn.scope, turn_id):
            raise TurnNotUnfinishedError(f"turn {turn_id!r} ended before it could be queued again")
        await self.queue.enqueue(turn.scope, turn_id)
        return turn
