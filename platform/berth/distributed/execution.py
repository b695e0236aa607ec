"""Running queued turns in a ``berth worker``: claim, run (or resume), report, answer control messages.

:class:`QueuedTurnRunner` is the worker half of a distributed deployment's turn (the API half is in
:class:`~berth.turns.services.HostServices`): it claims the turn in the store, runs it with the same runtime as
embedded mode, writes its events to Redis and serves the follow-ups, steers and cancels API processes send it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from berth.config.models.assembly import DistributedStorage
from berth.logs import bound
from berth.runtime.events import TurnEvent
from berth.runtime.live import LiveEvent, LiveInboxClosedError, attachment_notices
from berth.runtime.loop import TurnInput
from berth.storage.claims import ClaimedTurn, ParkedTurn
from berth.storage.conversations import StorageError, TurnLog
from berth.storage.scope import ConversationScope
from berth.turns.control import decode_attachments
from berth.turns.queue import QueueEntry
from berth.turns.redis_events import RedisTurnEventLog, epoch_floor
from berth.turns.requests import TurnRequest
from berth.turns.running import RunningTurn, live_event_data
from berth.turns.services import HostServices

__all__ = ["QueuedTurnRunner"]

log = logging.getLogger(__name__)


class _AttemptFailedError(Exception):
    """An attempt at a turn raised ``error`` (the turn goes back to the queue)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class QueuedTurnRunner:
    """Runs the queued turns a worker reads, with the worker's ``services`` (opened, distributed)."""

    def __init__(self, services: HostServices) -> None:
        if services.distributed is None:
            raise RuntimeError("queued turns need distributed storage (platform.storage.kind: distributed)")
        self.services = services
        self.distributed = services.distributed
        storage = services.config.settings_for().storage
        assert isinstance(storage, DistributedStorage)
        self.max_attempts = storage.max_turn_attempts
        """Attempts a turn gets before it is parked (``platform.storage.max_turn_attempts``)."""
        self.last_attempts: set[str] = set()
        """The turns this worker runs on their last attempt: while one runs, the worker claims no other turn."""
        self._held: set[str] = set()
        """The turns this worker has claimed and not finished (registered in ``services.turns`` a moment later)."""
        self._claiming = asyncio.Lock()
        """One claim at a time in this worker: whether a turn runs alone is decided against every turn it holds,
        including one whose claim is on its way (two last attempts claimed at once would each think it alone)."""

    async def run_queued(self, entry: QueueEntry) -> Literal["ran", "ended", "elsewhere", "retry", "isolate"]:
        """Worker side: claim a queued turn and run it to its commit.

        Returns ``ran``; ``ended`` when there was nothing to run (the turn had ended, never existed, or was parked
        after too many attempts): its entry is done; ``elsewhere`` when another live process runs it (it always did,
        or took it over while it ran here because this process lost its owner lock): the entry is that process's to
        finish; ``retry`` when this attempt failed and the turn went back to the queue: the entry is left pending,
        so a worker takes it again after the lease, and nobody was told the turn failed; ``isolate`` when the turn's
        next attempt is its last and this worker runs other turns, or this worker runs a turn's last attempt: nothing
        changed, and the worker claims it again once it runs nothing else (a last attempt runs alone, both ways, so
        no other turn dies with it).

        A turn another live process runs is left to it; a turn that has ended needs nothing (its event log is
        closed, should its worker have died between the commit and closing it). A turn whose worker died is
        resumed after its last logged round. Each claim is one attempt; the claim after ``max_turn_attempts``
        parks the turn (stored ``failed``, ``turn_poisoned``) and tells its clients so.
        """
        async with self._claiming:
            if self.last_attempts:  # a last attempt runs alone both ways: nothing joins it either
                return "isolate"
            alone = not self.services.turns and not self._held  # the turns this process runs now
            try:
                claimed = await self.distributed.claims.claim_turn(
                    entry.scope, entry.turn_id, max_attempts=self.max_attempts, alone=alone
                )
            except StorageError as error:
                if error.code == "turn_needs_isolation":
                    log.info("turn %s runs its last attempt alone: it waits until this worker is idle", entry.turn_id)
                    return "isolate"
                if error.code in ("turn_owned", "turn_not_found"):
                    log.info("queued turn %s is not this worker's to run: %s", entry.turn_id, error.message)
                    return "elsewhere" if error.code == "turn_owned" else "ended"
                raise
            if isinstance(claimed, ClaimedTurn):
                self._held.add(entry.turn_id)
                if self.max_attempts is not None and 2 <= claimed.attempt == self.max_attempts:
                    self.last_attempts.add(entry.turn_id)
        if not isinstance(claimed, ClaimedTurn):
            return await self._tell_unrun_end(entry, claimed)
        try:
            return await self._run_attempt(entry, claimed)
        finally:
            self._held.discard(entry.turn_id)
            self.last_attempts.discard(entry.turn_id)

    async def _tell_unrun_end(self, entry: QueueEntry, parked: ParkedTurn | None) -> Literal["ended"]:
        """A claim found nothing to run: the turn had ended (``parked`` None) or was parked now; tell its end."""
        if parked is not None:
            log.error("turn %s parked after %d attempts: %s", entry.turn_id, parked.attempts, parked.error)
            self.services.metrics.turn_unrunnable(entry.scope.tenant, "poisoned")
            await self.services.admission.release_lease(entry.scope.tenant, entry.turn_id)
        await self.services.tell_stored_end(entry.scope, entry.turn_id)
        return "ended"

    async def _run_attempt(
        self, entry: QueueEntry, claimed: ClaimedTurn
    ) -> Literal["ran", "ended", "elsewhere", "retry"]:
        """Run one claimed attempt at a turn, its events to Redis (see :meth:`run_queued`)."""
        self.services.metrics.turn_attempt(entry.scope.tenant)
        events = self.distributed.event_log(entry.turn_id)
        await events.take_over(epoch_floor(claimed.attempt - 1))
        request = TurnRequest.from_bytes(claimed.request)
        if request.tenant_lease:
            await self.services.admission.adopt_lease(entry.scope.tenant, entry.turn_id)
        kept = True
        try:
            kept = await self._run_claimed(entry, claimed.log, request, events)
        except _AttemptFailedError as failed:
            return await self._after_failed_attempt(entry, failed.error)
        finally:
            if request.tenant_lease and kept:
                await self.services.admission.release_lease(entry.scope.tenant, entry.turn_id)
        return "ran" if kept else "elsewhere"

    async def _after_failed_attempt(self, entry: QueueEntry, error: BaseException) -> Literal["ended", "retry"]:
        """An attempt at a turn raised: give the turn back to the queue with the error (another attempt follows
        after the lease, until the attempts run out), or, when it ended meanwhile (an operator ended it), tell its
        clients how it ended."""
        reason = f"{type(error).__name__}: {error}"
        log.error("attempt at turn %s failed; it goes back to the queue", entry.turn_id, exc_info=error)
        try:
            released = await self.distributed.claims.release_turn(entry.scope, entry.turn_id, error=reason)
            if not released:
                await self.services.tell_stored_end(entry.scope, entry.turn_id)
                return "ended"
        except Exception:  # the store is out of reach past its retries: the lease hands the turn on regardless
            log.warning("could not give turn %s back to the queue", entry.turn_id, exc_info=True)
        return "retry"

    async def _run_claimed(
        self, entry: QueueEntry, turn_log: TurnLog, request: TurnRequest, events: RedisTurnEventLog
    ) -> bool:
        """Run a claimed turn in this worker, its events to Redis; resumed when its log shows it began.

        Returns False when another worker took the turn over meanwhile (it goes on there; nothing is reported).
        """
        scope, turn_id, bundle_id = entry.scope, entry.turn_id, request.bundle_id
        running = RunningTurn(scope=scope, turn_id=turn_id, bundle_id=bundle_id, log=events)
        self.services.turns[turn_id] = running
        usage = self.services.usage
        if usage is not None:  # budgets are checked after each round against what every process spent
            await usage.reload(self.services.config.descriptors.assembly.scopes())
        meter = usage.meter(scope, turn_id, bundle_id) if usage is not None else None
        runner = self.services.runner_for(scope.tenant, scope.project)

        async def emit(event: TurnEvent) -> None:
            self.services.metrics.observe_event(event, scope.tenant)
            if event.type in ("turn.completed", "turn.failed"):
                await self._touch(scope, request.message)  # the conversation shows the turn before its end is told
                if meter is not None:
                    await self.services.settle_usage(meter)
                running.inbox.close()
                event = await self.services.hand_on_unseen(running, event)
                running.ended.set()
            await running.log.append(event)

        titled = attempt_failed = False
        running.task = asyncio.current_task()
        control = self.distributed.control
        try:
            labels = {"conversation": scope.conversation_id, "turn": turn_id, "bundle": bundle_id}
            with bound(tenant=scope.tenant, project=scope.project, **labels):
                async with (
                    control.serving(turn_id, partial(self._handle_control, running)),
                    self.services.registry.use(bundle_id) as pinned,
                ):
                    turn = TurnInput(
                        inbox=running.inbox,
                        scope=scope,
                        turn_id=turn_id,
                        message=request.message,
                        attachments=request.attachments,
                        user_timezone=request.user_timezone,
                        meter=meter,
                        resume=turn_log,
                    )
                    context = self.services.registry.context_for(pinned, scope.tenant, scope.project)
                    result = await runner.run(pinned, context, turn, emit)
                    self.services.metrics.observe_result(result, scope.tenant)
                titler = self.services.titler
                if result.outcome in ("completed", "exited") and titler and await titler.should_title(scope):
                    titler.start(running, request.message, result.answer)
                    titled = True
        except StorageError as lost:
            if lost.code != "turn_owned":
                attempt_failed = True
                raise _AttemptFailedError(lost) from lost
            log.warning("turn %s was taken over by another worker; it goes on there", turn_id)
            titled = True  # the log is the new owner's to write and close
            return False
        except Exception as exc:
            attempt_failed = True
            raise _AttemptFailedError(exc) from exc
        finally:
            running.inbox.close()
            running.ended.set()
            running.task = None
            if meter is not None:
                await self.services.settle_usage(meter)  # what this attempt spent; settling again adds nothing
            if attempt_failed:  # the next attempt goes on with the log; nobody was told the turn failed
                await events.flush()
            elif not titled:
                await running.log.close()
            self.services.turns.pop(turn_id, None)
        return True

    async def _touch(self, scope: ConversationScope, message: str) -> None:
        """Move the conversation up the list (and give it a provisional title); a failure is logged, not raised:
        the turn is committed, and its end must reach its clients."""
        assert self.services.meta is not None
        try:
            await self.services.meta.touch_conversation(scope, at=datetime.now(UTC), title=message[:80])
        except Exception:
            log.warning("could not update conversation %s in the list", scope.conversation_id, exc_info=True)

    async def _handle_control(self, running: RunningTurn, message: dict[str, Any]) -> dict[str, Any]:
        """Worker side: a cancel, follow-up or steer an API process sent to the turn ``running``."""
        kind = message.get("kind")
        if kind == "cancel":
            task = running.task
            if task is None or running.ended.is_set():
                return {"cancelled": False}
            task.cancel()
            return {"cancelled": True}
        if kind not in ("followup", "steer"):
            return {"error": f"unknown control message {kind!r}"}
        event = LiveEvent(
            kind=kind, message=str(message.get("message", "")), attachments=decode_attachments(message.get("files"))
        )
        try:
            received = await running.inbox.deliver(event)
        except LiveInboxClosedError:
            return {"closed": True}
        live: Literal["user.followup", "user.steer"] = "user.steer" if kind == "steer" else "user.followup"
        await running.log.append(TurnEvent(live, live_event_data(received)))
        for notice in attachment_notices(received.blocks):  # its files the model does not get as they are
            await running.log.append(TurnEvent("notice", notice))
        return {"path": received.block.path}
