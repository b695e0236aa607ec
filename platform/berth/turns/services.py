"""What the API stands on: the host runtime (bundles), storage, models and the running turns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, cast

from berth.config import ConfigError, Configuration
from berth.config.models.assembly import EmbedderConfig
from berth.config.models.bundles import BundleExec
from berth.config.models.gateway import GatewayDescriptor
from berth.default_plugins.storage.embedded import EmbeddedStorageBackend
from berth.default_plugins.storage.sqlite_meta import SqliteMetaStore
from berth.execution.profiles import Execution
from berth.execution.sweep import ExecSweep
from berth.gateway.counters import MemoryCounters
from berth.gateway.redis_counters import RedisCounters
from berth.host.connections import DistributedConnections, distributed_backend
from berth.host.models import ModelPool
from berth.host.plugins import PlatformPlugins
from berth.host.registry import BundleRegistry
from berth.host.runtime import HostRuntime
from berth.host.supervised import SupervisedTask
from berth.logs import bound
from berth.runtime.blocks import BlockType
from berth.runtime.events import TurnEvent
from berth.runtime.live import LiveEvent, LiveInboxClosedError, attachment_notices
from berth.runtime.loop import ModelResolver, TurnInput, TurnRunner, record_block
from berth.runtime.memory import Embedder, MemorySearch
from berth.runtime.persistence import block_from_record, block_record
from berth.runtime.resident import ResidentConversations
from berth.runtime.sources import SourceRow, SourcesPool, citation_lookup
from berth.storage.backend import StorageBackend
from berth.storage.claims import TurnClaims
from berth.storage.conversations import ConversationStore, SourceRecord, StorageError
from berth.storage.memory import MemoryIndex
from berth.storage.meta import MetaStore
from berth.storage.redis_client import connect_redis
from berth.storage.scope import ConversationScope
from berth.streaming import render_citations
from berth.turns.admission import Admission, TurnAdmission
from berth.turns.control import TurnControl, encode_attachments
from berth.turns.erasure import erase_conversation
from berth.turns.errors import ServiceError, not_found
from berth.turns.event_log import HEARTBEAT, TurnEventLog, encode_frame
from berth.turns.history import TurnReplay, read_turn_replays
from berth.turns.metrics import Metrics
from berth.turns.queue import TurnQueue
from berth.turns.redis_events import RedisTurnEventLog, epoch_floor
from berth.turns.requests import TurnRequest
from berth.turns.retention import RedisSweepLease, RetentionSweep
from berth.turns.running import FileSource, LiveDelivery, RunningTurn, events_url, live_event_data, new_id
from berth.turns.titling import TITLE_TIMEOUT_S, ConversationTitler
from berth.turns.widget_tickets import WidgetTickets
from berth.usage import TurnUsageMeter, UsageLedger

log = logging.getLogger(__name__)

FINISHED_TURNS_KEPT = 2000
"""Finished turns whose events stay replayable (for clients that reconnect late)."""


REDIS_HEARTBEAT_S = 5.0
"""How often an idle SSE stream of a distributed turn sends a heartbeat (and checks Redis still has its events)."""

CANCELLED_WAITING = "the turn was cancelled while it waited for a free slot; nothing of it was stored"

DELETE_WAIT_S = 15.0
"""How long deleting a conversation waits for its cancelled turn (and a title being made) to stop before it erases
the conversation all the same."""


async def _single_frame(frame: bytes) -> AsyncIterator[bytes]:
    yield frame


def _key(scope: ConversationScope) -> tuple[str, str, str, str]:
    """The conversation's key in this process's tables of turns."""
    return (scope.tenant, scope.project, scope.user_id, scope.conversation_id)


@dataclass
class DistributedParts:
    """What a process of a distributed deployment shares with the others: Redis, the turn queue, the store's
    claims (SPEC §8)."""

    connections: DistributedConnections
    redis: Any
    queue: TurnQueue
    claims: TurnClaims
    control: TurnControl

    def event_log(self, turn_id: str) -> RedisTurnEventLog:
        """The turn's event log in Redis (any process reads it; the worker running the turn writes it)."""
        return RedisTurnEventLog(self.redis, turn_id)


class HostServices:
    """Owns the long-lived parts of an API process (or of a ``berth worker``); :meth:`start` and :meth:`stop`
    bracket its life.

    With embedded storage a turn runs in the process that accepted it. With distributed storage the API
    process stores the turn as accepted and queues it (:meth:`start_turn`); a worker claims it and runs it
    (:meth:`run_queued`), writing its events to Redis, where any API process streams them.
    """

    def __init__(self, runtime: HostRuntime, plugins: PlatformPlugins, *, var_root: Path | None = None) -> None:
        self.runtime = runtime
        self.plugins = plugins
        self._var_root = var_root
        self.metrics = Metrics()
        self.turns: dict[str, RunningTurn] = {}
        self._busy: dict[tuple[str, str, str, str], str] = {}
        self._admitting: set[str] = set()
        self._deleting: set[tuple[str, str, str, str]] = set()  # conversations being deleted: they take no turn
        self.titler: ConversationTitler | None = None
        # Embedded mode counts in this process. Distributed mode (not served by the API yet: it needs the
        # PostgreSQL store) is to count in Redis, berth.gateway.redis_counters, so limits hold across workers.
        self.admission = Admission(lambda: self.config.descriptors.gateway, MemoryCounters(), self.metrics)
        self._runners: dict[tuple[str, str], TurnRunner] = {}
        self.resident = ResidentConversations()
        """The idle conversations this process keeps in memory for their next turn, shared by every scope's runner
        (``platform.resident_conversations``; :mod:`berth.runtime.resident`)."""
        self.execution = Execution(
            plugins.exec_backends(), bundle_exec=self._bundle_exec, configuration=lambda: self.config
        )
        self.storage: StorageBackend | None = None
        self.store: ConversationStore | None = None
        self.memory_index: MemoryIndex | None = None
        self.meta: MetaStore | None = None
        self.distributed: DistributedParts | None = None
        """Redis, the turn queue and the store's claims, with distributed storage (after :meth:`start`)."""
        self.usage: UsageLedger | None = None
        """Prices, counts and stores every model call; holds the budgets (after :meth:`start`)."""
        self.models: ModelPool | None = None
        self.initial_config: Configuration | None = None
        self.retention: RetentionSweep | None = None
        """Deletes the conversations past their retention (after :meth:`start`, unless told not to sweep)."""
        self._retention_task: SupervisedTask | None = None
        self.exec_sweep: ExecSweep | None = None
        """Removes what hosts that died mid-run left (:mod:`berth.execution.sweep`; after :meth:`start`)."""
        self._exec_sweep_task: SupervisedTask | None = None
        self.started = False
        self.widget_tickets = WidgetTickets(lambda: self.config)
        """Signs and checks the tickets in widget URLs (an iframe cannot send the API key)."""

    @property
    def registry(self) -> BundleRegistry:
        """The bundle registry (after :meth:`start`)."""
        if self.runtime.registry is None:
            raise ServiceError(503, "starting", "the host is still starting", headers={"Retry-After": "1"})
        return self.runtime.registry

    def current_gateway(self) -> GatewayDescriptor | None:
        """The gateway descriptor in force (None while the host is starting)."""
        registry = self.runtime.registry
        return registry.config.descriptors.gateway if registry is not None else None

    @property
    def config(self) -> Configuration:
        """The configuration bundles were loaded with."""
        return self.registry.config

    def _bundle_exec(self, bundle_id: str) -> BundleExec | None:
        """The operator's exec profiles for a bundle, from the descriptors now serving."""
        entry = self.config.descriptors.bundles.bundles.get(bundle_id)
        return entry.exec if entry is not None else None

    async def start(self, *, sweep_retention: bool = True) -> None:
        """Load bundles, open storage and prepare the model providers.

        :param sweep_retention: run the retention sweep (:mod:`berth.turns.retention`) as a supervised background
            task of this process: an API process and a worker do, a one-off command does not.
        """
        outcomes = await self.runtime.start()
        for outcome in outcomes:
            self.metrics.reloads.labels(bundle=outcome.bundle_id, ok=str(outcome.ok).lower()).inc()
        self.registry.add_listener(
            lambda o: self.metrics.reloads.labels(bundle=o.bundle_id, ok=str(o.ok).lower()).inc()
        )
        # changed descriptors may change a scope's models: build its runner again on next use
        self.registry.add_listener(lambda o: self._descriptors_changed() if o.reason == "descriptors" else None)
        settings = self.config.settings_for()
        self.resident.configure(settings.resident_conversations.max_bytes)
        self.execution.configure(settings.exec)
        storage = settings.storage
        if storage.kind == "distributed":
            await self._open_distributed()
        else:
            root = self._var_root or (self.config.descriptors.base_dir / storage.root).resolve()
            embedded = EmbeddedStorageBackend(root)  # the store and the memory index on one connection
            self.storage = embedded
            await embedded.open()  # records the turns a process that is gone left unfinished as interrupted
            self.store, self.memory_index = embedded.conversations, embedded.memory
            for turn in embedded.conversations.interrupted_at_open:
                log.warning(
                    "turn %s of conversation %s/%s/%s was %s when the process serving it stopped: recorded interrupted",
                    turn.turn_id,
                    turn.scope.tenant,
                    turn.scope.project,
                    turn.scope.conversation_id,
                    turn.was,
                )
            meta = SqliteMetaStore(root)
            await meta.open()
            self.meta = meta
        assert self.meta is not None
        self.usage = UsageLedger(
            self.meta,
            budgets=lambda: self.config.descriptors.gateway.budgets,
            models=lambda tenant, project: self.config.settings_for(tenant, project).models,
        )
        # budgets count from what the current month's stored calls of each declared project spent
        await self.usage.load(self.config.descriptors.assembly.scopes())
        self.models = ModelPool(self.config, self.plugins.model_providers())
        self.titler = ConversationTitler(
            self.meta,
            self.models_for,
            enabled=lambda tenant, project: self.config.settings_for(tenant, project).react.conversation_titles,
            usage=self.usage,
        )
        self._check_embedders()
        if sweep_retention:
            self._start_retention_sweep()
        # what hosts that died mid-run left (run folders, containers past their wall time): now, then periodically
        self.exec_sweep = ExecSweep(self.execution, lambda: self.config.settings_for().exec)
        self._exec_sweep_task = self.runtime.background.spawn("exec sweep", self.exec_sweep.run)
        self.started = True

    def _start_retention_sweep(self) -> None:
        """Delete the conversations past their scope's retention, every ``retention.sweep_interval_s``."""
        assert self.meta is not None
        self.retention = RetentionSweep(
            meta=self.meta,
            delete=self.delete_conversation,
            busy=self._has_unfinished_turn,
            scopes=lambda: self.config.descriptors.assembly.scopes(),
            retention_days=lambda t, p: self.config.settings_for(t, p).retention.conversations_days,
            interval_s=lambda: self.config.settings_for().retention.sweep_interval_s,
            lease=RedisSweepLease(self.distributed.redis) if self.distributed is not None else None,
        )
        self._retention_task = self.runtime.background.spawn("retention sweep", self.retention.run)

    async def _has_unfinished_turn(self, scope: ConversationScope) -> bool:
        """Whether the conversation has a turn that has not ended (in this process, or, distributed, anywhere)."""
        if _key(scope) in self._busy:
            return True
        if self.distributed is None:
            return False
        assert self.store is not None
        snapshot = await self.store.conversation(scope).load()
        return any(turn.state in ("accepted", "running") for turn in snapshot.turns)

    async def stop(self) -> None:
        """Cancel running turns and titles, close storage and providers, unload bundles."""
        if self.retention is not None and self._retention_task is not None:  # before storage closes under it
            self.retention.stop()
            await self._retention_task.stop()
            self._retention_task = None
        if self.exec_sweep is not None and self._exec_sweep_task is not None:
            self.exec_sweep.stop()
            await self._exec_sweep_task.stop()
            self._exec_sweep_task = None
        if self.titler is not None:
            await self.titler.aclose()
        tasks = [t.task for t in self.turns.values() if t.task is not None and not t.task.done()]
        if tasks:  # turns that already answered only finish their bookkeeping: let them, then cancel the rest
            _, still_running = await asyncio.wait(tasks, timeout=2)
            for task in still_running:
                task.cancel()
            if still_running:
                await asyncio.wait(still_running, timeout=10)
        await self.admission.aclose()
        if self.models is not None:
            await self.models.aclose()
        if isinstance(self.meta, SqliteMetaStore):  # a distributed backend closes its own
            await self.meta.aclose()
        if self.storage is not None:
            await self.storage.aclose()
        if self.distributed is not None:
            await self.distributed.redis.aclose()
        await self.runtime.stop()
        self.started = False

    async def _open_distributed(self) -> None:
        """Open the PostgreSQL backend (its plugin registers kind ``distributed``), Redis and the turn queue;
        admission counts in Redis from here on, so limits hold across every API process."""
        backend = distributed_backend(self.config, self.plugins)
        connections: DistributedConnections = backend.connections
        await backend.open()  # refuses a schema that is behind: `berth migrate`
        observe_retries = getattr(backend, "observe_retries", None)
        if observe_retries is not None:  # berth_store_retries_total counts its retried operations
            observe_retries(partial(self.metrics.store_retry, "transaction"))
        self.storage = backend
        self.store, self.memory_index = backend.conversations, backend.memory
        self.meta = getattr(backend, "meta")  # noqa: B009 - the distributed backend carries its metadata store
        client = connect_redis(connections.redis_url)
        queue = TurnQueue(client)
        await queue.ensure_group()
        self.distributed = DistributedParts(
            connections=connections,
            redis=client,
            queue=queue,
            claims=cast(TurnClaims, backend.conversations),
            control=TurnControl(client),
        )
        await self.admission.counters.aclose()
        self.admission.counters = RedisCounters(client)

    def _descriptors_changed(self) -> None:
        """New descriptors: every scope's runner is made again on its next use, and the resident budget applies."""
        self._runners.clear()
        self.resident.configure(self.config.settings_for().resident_conversations.max_bytes)

    def runner_for(self, tenant: str, project: str) -> TurnRunner:
        """The turn runner of a scope (kept, so conversations stay resident in memory between turns)."""
        runner = self._runners.get((tenant, project))
        if runner is None:
            runner = self._new_runner(tenant, project)
            self._runners[(tenant, project)] = runner
        return runner

    def _new_runner(self, tenant: str, project: str) -> TurnRunner:
        assert self.store is not None and self.models is not None and self.memory_index is not None
        index = self.memory_index
        settings = self.config.settings_for(tenant, project)
        embedder = self._embedder(settings.embedder)  # one per runner: it keeps what it has computed

        def memory(scope: ConversationScope) -> MemorySearch:
            return MemorySearch(index, embedder, scope=scope)

        return TurnRunner(
            store=self.store,
            models=self.models.resolver(settings),
            tool_packs=self.plugins.tool_packs(),
            memory=memory,
            resident=self.resident,
            execution=self.execution,
        )

    async def start_turn(
        self,
        scope: ConversationScope,
        bundle_id: str,
        message: str,
        *,
        turn_id: str | None = None,
        attachments: tuple[tuple[str, str, bytes], ...] = (),
        user_timezone: str = "UTC",
        provisional_title: bool = False,
    ) -> RunningTurn:
        """Start a turn in the background; its events go to a log clients can stream and resume.

        With ``provisional_title`` (the conversation has no title yet), the message becomes its title as soon as
        the turn is accepted (``title_source: message``), so a conversation list shows it while the summarizer
        makes the real one; a refused message leaves the conversation untitled.

        The turn is admitted first (:class:`~berth.turns.admission.Admission`: 429 when its tenant runs as many
        turns as it may, 503 when this worker's slots and queue are full); an admitted turn may wait for a
        slot before it runs, its events stream then starting when it does. Admitted, it is stored
        (``accepted``, with the message, durably) before this returns, so the caller's 202 never names a
        turn a crash could take back. A conversation being deleted takes no turn (404).
        """
        if _key(scope) in self._deleting:
            raise not_found(f"conversation {scope.conversation_id}")
        if self.distributed is not None:
            queued = await self._queue_turn(
                scope, bundle_id, message, turn_id=turn_id, attachments=attachments, user_timezone=user_timezone
            )
            if provisional_title:
                await self._title_with_message(scope, message)
            return queued
        key = _key(scope)
        if key in self._busy:
            raise ServiceError(409, "turn_in_progress", f"turn {self._busy[key]} of this conversation is still running")
        turn_id = turn_id or new_id("turn")
        if turn_id in self.turns or turn_id in self._admitting:
            raise ServiceError(409, "turn_exists", f"turn id {turn_id} is already used")
        # fail now (404/503) when the bundle cannot serve this scope; the turn pins its generation when it runs
        self.registry.context_for(self.registry.current(bundle_id), scope.tenant, scope.project)
        meter = self._metered(scope, turn_id, bundle_id)  # 429 when a budget of the scope is used up
        runner = self.runner_for(scope.tenant, scope.project)
        self._busy[key] = turn_id  # claimed while admission is decided (it may await shared counters)
        self._admitting.add(turn_id)
        try:
            admitted = await self.admission.admit_turn(scope.tenant, turn_id)
            try:
                await self._accept(scope, turn_id, message)
            except BaseException as exc:
                await admitted.release()
                if not isinstance(exc, ServiceError):  # cancelled or failed: it may be stored all the same
                    await self.end_unstarted(scope, turn_id, "failed")
                raise
        except BaseException:
            self._busy.pop(key, None)
            raise
        finally:
            self._admitting.discard(turn_id)
        running = RunningTurn(scope=scope, turn_id=turn_id, bundle_id=bundle_id, log=TurnEventLog(turn_id))
        self.turns[turn_id] = running

        async def emit(event: TurnEvent) -> None:
            self.metrics.observe_event(event, scope.tenant)
            if event.type in ("turn.completed", "turn.failed"):
                # committed: the conversation takes its next turn, and the tenant the next one, from here on
                self._busy.pop(key, None)
                await admitted.release()
                await self.settle_usage(meter)  # stored before the client hears the turn ended
                running.inbox.close()
                event = await self.hand_on_unseen(running, event)
                running.ended.set()
            await running.log.append(event)

        async def run() -> None:
            with bound(
                tenant=scope.tenant,
                project=scope.project,
                conversation=scope.conversation_id,
                turn=turn_id,
                bundle=bundle_id,
            ):
                ahead = admitted.turns_ahead()
                if ahead is not None:  # say why nothing happens yet
                    queued = f"this worker is busy: the turn waits for a free slot ({ahead} turns ahead of it)"
                    await emit(TurnEvent("notice", {"code": "queued", "message": queued}))
                try:
                    await admitted.wait_for_slot()
                except asyncio.CancelledError:
                    self._busy.pop(key, None)
                    await self.end_unstarted(scope, turn_id, "cancelled")
                    await emit(TurnEvent("turn.failed", {"code": "cancelled", "message": CANCELLED_WAITING}))
                    await running.log.close()
                    return
                await run_turn()

        titled = False

        async def run_turn() -> None:
            nonlocal titled
            try:
                async with self.registry.use(bundle_id) as pinned:
                    request = TurnInput(
                        inbox=running.inbox,
                        scope=scope,
                        turn_id=turn_id,
                        message=message,
                        attachments=attachments,
                        user_timezone=user_timezone,
                        meter=meter,
                    )
                    context = self.registry.context_for(pinned, scope.tenant, scope.project)
                    result = await runner.run(pinned, context, request, emit)
                    self.metrics.observe_result(result, scope.tenant)
                assert self.meta is not None
                await self.meta.touch_conversation(scope, at=datetime.now(UTC), title=message[:80])
                titler = self.titler
                if result.outcome in ("completed", "exited") and titler and await titler.should_title(scope):
                    titler.start(running, message, result.answer)  # it closes the turn's event log when done
                    titled = True
            except Exception as exc:
                log.exception("turn %s failed", turn_id)
                await self.end_unstarted(scope, turn_id, "failed")  # when it failed before it began
                await self.settle_usage(meter)
                await running.log.append(
                    TurnEvent(
                        "turn.failed", {"code": "internal_error", "message": f"the turn failed: {type(exc).__name__}"}
                    )
                )
            finally:
                self._busy.pop(key, None)
                running.inbox.close()
                running.ended.set()
                if not titled:
                    await running.log.close()
                self._forget_old_turns()

        running.task = asyncio.create_task(run(), name=f"turn {turn_id}")
        running.task.add_done_callback(lambda _: self._turn_ended(running, admitted))
        if provisional_title:
            await self._title_with_message(scope, message)
        return running

    async def _queue_turn(
        self,
        scope: ConversationScope,
        bundle_id: str,
        message: str,
        *,
        turn_id: str | None,
        attachments: tuple[tuple[str, str, bytes], ...],
        user_timezone: str,
    ) -> RunningTurn:
        """Distributed mode: admit the turn, store it as accepted with its request, queue it for a worker.

        409 ``turn_in_progress`` while the conversation has a turn that has not ended (in any process).
        """
        assert self.distributed is not None
        parts = self.distributed
        turn_id = turn_id or new_id("turn")
        self.registry.context_for(self.registry.current(bundle_id), scope.tenant, scope.project)
        if self.usage is not None:  # every process spends: admit against what the store holds now
            await self.usage.reload(self.config.descriptors.assembly.scopes())
        self._metered(scope, turn_id, bundle_id)  # 429 when a budget of the scope is used up
        lease = await self.admission.admit_queued(scope.tenant, turn_id, queued=await parts.queue.depth())
        request = TurnRequest(bundle_id, message, user_timezone, attachments, tenant_lease=lease)
        now = datetime.now(UTC)
        prompt = record_block(BlockType.USER_PROMPT, turn_id, "user.prompt", now, "user", text=message)
        try:
            await parts.claims.accept_queued_turn(
                scope, turn_id, accepted_at=now, head=(block_record(prompt),), request=request.to_bytes()
            )
        except StorageError as error:
            if lease:
                await self.admission.release_lease(scope.tenant, turn_id)
            if error.code in ("turn_exists", "turn_in_progress"):
                raise ServiceError(409, error.code, error.message) from None
            raise
        await parts.queue.enqueue(scope, turn_id)  # lost with Redis? a worker's reconciler queues it again
        return RunningTurn(scope=scope, turn_id=turn_id, bundle_id=bundle_id, log=parts.event_log(turn_id))

    async def _deliver_queued(
        self, scope: ConversationScope, turn_id: str, event: LiveEvent, *, bundle_id: str
    ) -> LiveDelivery:
        """Distributed mode: send a live event to the conversation's unfinished turn, wherever it runs; start the
        next turn with it when none is unfinished."""
        assert self.distributed is not None and self.store is not None
        handle = self.store.conversation(scope)
        try:
            await handle.read_turn_log(turn_id)
        except StorageError:
            raise not_found(f"turn {turn_id}") from None
        for attempt in range(8):
            snapshot = await handle.load()
            current = next((t for t in snapshot.turns if t.state in ("accepted", "running")), None)
            if current is None:
                started = await self._start_with(scope, bundle_id, event)
                if started is None:
                    continue
                return started
            message = {"kind": event.kind, "message": event.message, "files": encode_attachments(event.attachments)}
            reply = await self.distributed.control.send(current.turn_id, message)
            if reply is None:  # still queued (or its worker died): it takes the event when it (re)starts
                return LiveDelivery(current.turn_id, None, started_turn=False)
            if reply.get("closed"):  # it is ending: once committed, the event starts the next turn
                await asyncio.sleep(0.05 * (attempt + 1))
                continue
            if "path" not in reply:
                raise ServiceError(500, "internal_error", "the turn's worker could not take the event")
            return LiveDelivery(current.turn_id, str(reply["path"]), started_turn=False)
        raise ServiceError(409, "turn_in_progress", "the conversation's turns kept changing; send the event again")

    async def cancel_turn(self, scope: ConversationScope, turn_id: str) -> bool:
        """Cancel a turn of the conversation ``scope`` names; return whether it was running (or waiting).

        :raises ServiceError: 404 when the conversation has no such turn.
        """
        running = self.turns.get(turn_id)
        if self.distributed is None or (running is not None and running.scope == scope):
            running = self.turn_in_scope(scope, turn_id)
            was_running = running.task is not None and not running.task.done()
            if was_running and running.task is not None:
                running.task.cancel()
            return was_running
        assert self.store is not None
        try:
            record = (await self.store.conversation(scope).read_turn_log(turn_id)).turn
        except StorageError:
            raise not_found(f"turn {turn_id}") from None
        if record.state not in ("accepted", "running"):
            return False
        claimed = await self.distributed.claims.owner_alive(scope, turn_id)
        if claimed:  # a live worker runs it (or begins it): it ends it, and its commit records the cancel
            reply = await self.distributed.control.send(turn_id, {"kind": "cancel"})
            if reply is not None:
                return bool(reply.get("cancelled"))
        # Still queued, or its worker does not answer (it died, or hangs): end it in the store, whoever owns it; a
        # worker that still runs it is refused at its next write.
        if claimed:
            message = "the turn was cancelled while its worker did not answer"
        elif record.state == "accepted" and not record.attempts:
            message = CANCELLED_WAITING
        else:
            message = "the turn was cancelled while no worker ran it (its worker had stopped)"
        attempts = await self.distributed.claims.end_turn(
            scope, turn_id, state="cancelled", code="cancelled", error=message
        )
        if attempts is None:
            return False
        await self.tell_stored_end(scope, turn_id, attempts=attempts)
        return True

    async def tell_stored_end(self, scope: ConversationScope, turn_id: str, *, attempts: int | None = None) -> None:
        """Distributed mode: end the event log of a turn that has ended with its stored end, unless the log holds
        an end already (its worker died between the commit and the end event; it was parked, cancelled or ended
        by an operator). The end is numbered after every attempt's epoch (``attempts``: read from the store when
        not given), so no client's position is reused."""
        assert self.distributed is not None and self.store is not None
        if attempts is None:
            attempts = (await self.store.conversation(scope).read_turn_log(turn_id)).turn.attempts
        events = self.distributed.event_log(turn_id)
        await events.take_over(epoch_floor(attempts))
        if not events.closed:
            if not events.ended:
                await events.append(await self.stored_turn_end(scope, turn_id))
            await events.close()

    async def delete_conversation(self, scope: ConversationScope) -> bool:
        """Delete the conversation ``scope`` names, as its owner asked (or its retention ran out); return False when
        it does not exist (deleted already).

        Its running turn is cancelled first (a waiting one too), and the deletion waits, up to :data:`DELETE_WAIT_S`,
        until it has stopped and a title being made for it has too: a turn that ends writes its commit, memory and
        usage. Then :func:`~berth.turns.erasure.erase_conversation` erases it from every store, and this process
        forgets it (the event logs it keeps for replay, the conversation kept resident for its next turn). From the
        start of the deletion the conversation takes no new turn.
        """
        assert self.meta is not None and self.store is not None and self.memory_index is not None
        if await self.meta.get_conversation(scope) is None:
            return False
        key = _key(scope)
        if key in self._deleting:  # deleted at this moment by another request: it is gone when that one ends
            return True
        self._deleting.add(key)
        try:
            await self._stop_conversation(scope)
            redis = self.distributed.redis if self.distributed is not None else None
            erased = await erase_conversation(
                scope, store=self.store, memory=self.memory_index, meta=self.meta, redis=redis
            )
            for turn_id in [t for t, running in self.turns.items() if running.scope == scope]:
                self.turns.pop(turn_id, None)
            self.resident.take(scope)
            return erased.existed
        finally:
            self._deleting.discard(key)

    async def _stop_conversation(self, scope: ConversationScope) -> None:
        """Cancel the conversation's running (or waiting) turn and a title being made for it; wait until they stop."""
        deadline = asyncio.get_running_loop().time() + DELETE_WAIT_S
        if self.distributed is not None:
            await self._stop_queued_turns(scope, deadline)
        else:
            await self._stop_local_turns(scope, deadline)
        if self.titler is not None:
            await self.titler.forget(scope)

    async def _stop_local_turns(self, scope: ConversationScope, deadline: float) -> None:
        """Cancel the conversation's turn that has not ended (running, waiting for a slot, or being admitted) and wait
        for every task of its turns to finish: one that has ended still stores its usage, and is not cancelled."""
        key = _key(scope)
        loop = asyncio.get_running_loop()
        while True:
            busy = self._busy.get(key)  # the turn that has not ended (cleared as its end is emitted)
            tasks = [
                running.task
                for running in self.turns.values()
                if running.scope == scope and running.task is not None and not running.task.done()
            ]
            if not tasks and busy is None:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("the turns of conversation %s did not stop in time; it is deleted all the same", key[3])
                return
            if busy is not None and (running := self.turns.get(busy)) is not None and running.task is not None:
                running.task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=remaining)
            else:
                await asyncio.sleep(0.01)  # being admitted: it is a task in a moment (or refused)

    async def _stop_queued_turns(self, scope: ConversationScope, deadline: float) -> None:
        """Distributed mode: cancel the conversation's unfinished turns wherever they run, then wait until the event
        logs of those and of a turn that just ended are closed (their workers close them last: after the commit, the
        usage and a title)."""
        assert self.distributed is not None and self.store is not None
        snapshot = await self.store.conversation(scope).load()
        now = datetime.now(UTC)
        watched = []
        for turn in snapshot.turns:
            if turn.state in ("accepted", "running"):
                await self.cancel_turn(scope, turn.turn_id)
                watched.append(turn.turn_id)
            elif turn.ended_at is not None and (now - turn.ended_at).total_seconds() < TITLE_TIMEOUT_S + 5:
                watched.append(turn.turn_id)  # its title may be on its way
        loop = asyncio.get_running_loop()
        for turn_id in watched:
            events = self.distributed.event_log(turn_id)
            while await events.exists() and not await events.is_closed():
                if loop.time() >= deadline:
                    log.warning("turn %s did not close its events in time; it is deleted all the same", turn_id)
                    return
                await asyncio.sleep(0.05)

    async def file_source(self, scope: ConversationScope, path: str, *, filename: str, mime: str) -> FileSource:
        """Where a committed file of the conversation is read from: its bytes, an object store's stream, or a
        presigned URL to redirect to (distributed storage with ``presigned_downloads``).

        :raises StorageError: ``artifact_not_found`` or ``unsafe_artifact_path``.
        """
        assert self.store is not None
        handle = self.store.conversation(scope)
        objects = self.distributed.connections.artifact_store if self.distributed is not None else None
        locate = getattr(handle, "artifact_at", None)
        if objects is None or locate is None:
            return FileSource(data=await handle.read_artifact(path))
        data, key = await locate(path)
        if data is not None:
            return FileSource(data=data)
        url = await objects.download_url(key, filename=filename, mime=mime)
        return FileSource(url=url) if url else FileSource(chunks=objects.chunks(key))

    def models_for(self, scope: ConversationScope) -> ModelResolver:
        """The model resolver of a scope: role (None = default) → (model reference, provider)."""
        assert self.models is not None
        resolver: ModelResolver = self.models.resolver(self.config.settings_for(scope.tenant, scope.project))
        return resolver

    async def hand_on_unseen(self, running: RunningTurn, ended: TurnEvent) -> TurnEvent:
        """Start the next turn with the live events the ending turn took too late to see; say so in ``ended``.

        They arrived while the final round ran, so its answer does not account for them. A cancelled turn
        hands nothing on (the user asked it to stop). Its ``next_turn`` names the new turn, or why none started.
        """
        unseen = running.inbox.unseen
        if not unseen or ended.data.get("code") == "cancelled":
            return ended
        message = "\n\n".join(received.event.message for received in unseen)
        files = tuple(file for received in unseen for file in received.event.attachments)
        try:
            following = await self.start_turn(running.scope, running.bundle_id, message, attachments=files)
        except ServiceError as refused:
            log.warning("the live events that came too late for turn %s start no turn: %s", running.turn_id, refused)
            next_turn: dict[str, Any] = {"error": {"code": refused.code, "message": refused.message}}
        else:
            next_turn = {
                "turn_id": following.turn_id,
                "events_url": events_url(running.scope, following.turn_id),
                "message": message,
            }
        return TurnEvent(ended.type, {**ended.data, "next_turn": next_turn})

    def running_turn(self, scope: ConversationScope) -> RunningTurn | None:
        """The turn of the conversation ``scope`` names that runs (or waits for a slot) in this process now."""
        turn_id = self._busy.get(_key(scope))
        running = self.turns.get(turn_id) if turn_id is not None else None
        return running if running is not None and running.scope == scope else None

    async def deliver_live_event(
        self, scope: ConversationScope, turn_id: str, event: LiveEvent, *, bundle_id: str
    ) -> LiveDelivery:
        """Send a follow-up or steer to turn ``turn_id``; return the turn that took it and how.

        The event goes to the conversation's running turn (the one named, or a newer one that runs now):
        the returned :class:`ReceivedEvent` says where it is recorded. When no turn runs — the named one
        has ended — it starts the next turn (with ``bundle_id``, the ended turn's bundle when this process
        ran it) and the returned event is None. A turn id this conversation never had is a 404.
        """
        if self.distributed is not None:
            return await self._deliver_queued(scope, turn_id, event, bundle_id=bundle_id)
        addressed = self.turns.get(turn_id)
        if addressed is None or addressed.scope != scope:
            addressed = None
            await self._known_turn(scope, turn_id)
        bundle_id = addressed.bundle_id if addressed is not None else bundle_id
        for _ in range(5):  # each pass either delivers, starts a turn, or waits for a turn that is ending
            current = self.running_turn(scope)
            if current is not None:
                try:
                    received = await current.inbox.deliver(event)
                except LiveInboxClosedError:
                    await current.ended.wait()
                    continue
                kind: Literal["user.followup", "user.steer"] = (
                    "user.steer" if event.kind == "steer" else "user.followup"
                )
                await current.log.append(TurnEvent(kind, live_event_data(received)))
                for notice in attachment_notices(received.blocks):  # its files the model does not get as they are
                    await current.log.append(TurnEvent("notice", notice))
                return LiveDelivery(current.turn_id, received.block.path, started_turn=False)
            started = await self._start_with(scope, bundle_id, event)
            if started is not None:
                return started
        raise ServiceError(409, "turn_in_progress", "the conversation's turns kept changing; send the event again")

    async def _start_with(self, scope: ConversationScope, bundle_id: str, event: LiveEvent) -> LiveDelivery | None:
        """Start the conversation's next turn with a live event; None when another one started just now (the
        caller delivers the event to that one instead)."""
        try:
            started = await self.start_turn(scope, bundle_id, event.message, attachments=event.attachments)
        except ServiceError as refused:
            if refused.code == "turn_in_progress":
                return None
            raise
        return LiveDelivery(started.turn_id, None, started_turn=True)

    async def _known_turn(self, scope: ConversationScope, turn_id: str) -> None:
        """404 unless the conversation ``scope`` names has a turn ``turn_id`` in the store."""
        assert self.store is not None
        snapshot = await self.store.conversation(scope).load()
        if not any(turn.turn_id == turn_id for turn in snapshot.turns):
            raise not_found(f"turn {turn_id}")

    async def _accept(self, scope: ConversationScope, turn_id: str, message: str) -> None:
        """Store the turn as ``accepted``, with the user's message, before the client hears of it (202): if this
        process dies before the turn begins, the next one finds it ``interrupted``, not gone."""
        assert self.store is not None
        now = datetime.now(UTC)
        prompt = record_block(BlockType.USER_PROMPT, turn_id, "user.prompt", now, "user", text=message)
        try:
            await self.store.conversation(scope).accept_turn(turn_id, accepted_at=now, head=(block_record(prompt),))
        except StorageError as error:
            if error.code == "turn_exists":
                raise ServiceError(
                    409, "turn_exists", f"turn id {turn_id} is already used in this conversation"
                ) from None
            raise

    async def _title_with_message(self, scope: ConversationScope, message: str) -> None:
        """Title an untitled conversation with the message of its first accepted turn, until a better title comes."""
        assert self.meta is not None
        try:
            await self.meta.touch_conversation(scope, at=datetime.now(UTC), title=message[:80])
        except Exception:  # the turn goes on: the title is set again when it ends
            log.warning("could not title conversation %s with its first message", scope.conversation_id, exc_info=True)

    def _metered(self, scope: ConversationScope, turn_id: str, bundle_id: str) -> TurnUsageMeter:
        """The usage meter of a turn about to start; 429 ``budget_exceeded`` (with ``Retry-After`` until the
        budget resets) when a budget of its tenant, project or user is used up."""
        if self.usage is None:
            raise ServiceError(503, "starting", "the host is still starting", headers={"Retry-After": "1"})
        exhausted = self.usage.exhausted(scope)
        if exhausted is not None:
            self.metrics.admission_rejections.labels(tenant=scope.tenant, reason="budget").inc()
            raise ServiceError(
                429,
                "budget_exceeded",
                exhausted.message(during_turn=False),
                details=exhausted.details(),
                headers={"Retry-After": str(exhausted.retry_after_s)},
            )
        return self.usage.meter(scope, turn_id, bundle_id)

    async def settle_usage(self, meter: TurnUsageMeter) -> None:
        """Store the turn's model calls (once; a failure is logged by the ledger, never raised)."""
        if self.usage is not None:
            await self.usage.settle(meter)

    async def end_unstarted(
        self, scope: ConversationScope, turn_id: str, state: Literal["cancelled", "failed"]
    ) -> None:
        """Record the end of an accepted turn that never began (a no-op once it began: its commit records it)."""
        assert self.store is not None
        try:
            await self.store.conversation(scope).end_unstarted_turn(turn_id, state=state, ended_at=datetime.now(UTC))
        except Exception:  # the turn's end is reported to the client anyway; the next load tidies the record
            log.warning("could not record the end of turn %s", turn_id, exc_info=True)

    @staticmethod
    def _turn_ended(running: RunningTurn, admitted: TurnAdmission) -> None:
        """A turn's task ended, however: return what it was admitted with, and let the task go.

        A finished turn stays in :attr:`turns` (up to :data:`FINISHED_TURNS_KEPT`) only to replay its events;
        dropping the task frees its coroutine and context, objects the garbage collector would walk at every
        full collection for as long as the turn is kept.
        """
        admitted.release_soon()
        running.task = None

    def _check_embedders(self) -> None:
        """Refuse to start when a scope names an embedder no installed plugin provides."""
        known = self.plugins.embedders()
        scopes: list[tuple[str | None, str | None]] = [(None, None), *self.config.descriptors.assembly.scopes()]
        for tenant, project in scopes:
            provider = self.config.settings_for(tenant, project).embedder.provider
            if provider not in known:
                where = f"{tenant}/{project}" if tenant else "platform"
                raise ConfigError(
                    "embedder_unknown",
                    f"{where}: platform.embedder.provider {provider!r} is not installed "
                    f"(installed: {', '.join(sorted(known)) or 'none'})",
                )

    def _embedder(self, config: EmbedderConfig) -> Embedder:
        """The embedder ``platform.embedder`` names for a scope, built by its plugin."""
        factories = self.plugins.embedders()
        factory = factories.get(config.provider)
        if factory is None:
            known = ", ".join(sorted(factories)) or "none"
            raise ConfigError(
                "embedder_unknown", f"platform.embedder.provider {config.provider!r} is not installed (known: {known})"
            )
        built: Embedder = factory(config)
        return built

    def turn_in_scope(self, scope: ConversationScope, turn_id: str) -> RunningTurn:
        """A turn the API ran in exactly this scope; 404 otherwise."""
        running = self.turns.get(turn_id)
        if running is None or running.scope != scope:
            raise not_found(f"turn {turn_id}")
        return running

    async def turn_event_frames(self, scope: ConversationScope, turn_id: str, after: int) -> AsyncIterator[bytes]:
        """A turn's SSE frames after sequence ``after``: live from the process running it, from Redis in a
        distributed deployment (any API process serves any turn), else its end as the store records it.

        :raises ServiceError: 404 when the conversation has no such turn.
        """
        running = self.turns.get(turn_id)
        if running is not None and running.scope == scope:
            return running.log.frames(after)
        if self.distributed is not None:
            assert self.store is not None
            try:
                record = (await self.store.conversation(scope).read_turn_log(turn_id)).turn
            except StorageError:
                raise not_found(f"turn {turn_id}") from None
            events = self.distributed.event_log(turn_id)
            if record.state in ("accepted", "running") or await events.exists():
                return self._redis_frames(scope, turn_id, events, after)
        return _single_frame(await self.stored_end_frame(scope, turn_id, after))

    async def _redis_frames(
        self, scope: ConversationScope, turn_id: str, events: RedisTurnEventLog, after: int
    ) -> AsyncIterator[bytes]:
        """A turn's frames from Redis; when Redis lost them (restarted while the turn ran) or its log ends
        without the turn's end (its worker died between the commit and that event), the turn's end as the store
        records it, so no client waits for an end that will never come."""
        last = after
        marker = f"id: {turn_id}:".encode()
        told_end = past_end = False
        async for chunk in events.frames(after, heartbeat_s=REDIS_HEARTBEAT_S):
            # While idle: has Redis lost the log, or the part of it this client has read (so nothing may come)?
            if chunk == HEARTBEAT and ((stored := await events.last_seq()) is None or stored < last):
                assert self.store is not None
                record = (await self.store.conversation(scope).read_turn_log(turn_id)).turn
                if record.state not in ("accepted", "running"):
                    past_end = True
                    break
            at = chunk.rfind(marker)
            if at >= 0:
                end = chunk.index(b"\n", at)
                last = int(chunk[at + len(marker) : end])
            told_end = told_end or b"event: turn.completed\n" in chunk or b"event: turn.failed\n" in chunk
            yield chunk
        # The stored end, unless the client has had it: a worker died between the commit and the end event, or
        # the log ends before the client's position (Redis lost it after the client read it).
        if not told_end and (past_end or not await events.holds_end()):
            yield await self.stored_end_frame(scope, turn_id, last)

    async def stored_end_frame(self, scope: ConversationScope, turn_id: str, after: int) -> bytes:
        """The SSE frame of :meth:`stored_turn_end` for a client that has read up to sequence ``after``.

        It is numbered after the client's position and after every attempt's epoch (as :meth:`tell_stored_end`
        numbers it), never ``after + 1`` alone: when Redis lost a turn's events, number ``after + 1`` may have been
        another event that some other client read before the loss, and one number never names two events.
        """
        event, attempts = await self._stored_end(scope, turn_id)
        return encode_frame(f"{turn_id}:{max(after, epoch_floor(attempts)) + 1}", event)

    async def stored_turn_end(self, scope: ConversationScope, turn_id: str) -> TurnEvent:
        """The last event of a turn this process does not hold (it ran before a restart), from its stored record.

        A turn that was acknowledged or running when its process died is ``interrupted`` (the store records
        so when it opens, or when a load finds it later): ``turn.failed {code: interrupted}``. A committed
        turn ends as it did: ``turn.completed {turn_id, outcome, answer, replayed: true}`` (the answer with its
        citations rendered, from the turn's log) or ``turn.failed {code}``. A turn still ``accepted`` or
        ``running`` after the load belongs to another live process on the same storage root: 409
        ``turn_elsewhere``, since its events are that process's.
        """
        return (await self._stored_end(scope, turn_id))[0]

    async def _stored_end(self, scope: ConversationScope, turn_id: str) -> tuple[TurnEvent, int]:
        """:meth:`stored_turn_end`, with the attempts the store counts for the turn."""
        assert self.store is not None
        snapshot = await self.store.conversation(scope).load()
        record = next((turn for turn in snapshot.turns if turn.turn_id == turn_id), None)
        if record is None:
            raise not_found(f"turn {turn_id}")
        if record.state in ("running", "accepted"):
            raise ServiceError(
                409,
                "turn_elsewhere",
                f"turn {turn_id} is {record.state} in another process on this storage root; its events are "
                "served there (ask the same server), or wait for it to end and read the conversation",
            )
        if record.state == "interrupted":
            message = "the turn was interrupted: the process serving it stopped before it finished"
            interrupted = {"code": "interrupted", "message": message, "turn_id": turn_id}
            return TurnEvent("turn.failed", interrupted), record.attempts
        if record.state == "completed":
            outcome = record.exit_reason or "completed"
            answer = await self._stored_answer(scope, turn_id, snapshot.sources)
            data = {"turn_id": turn_id, "outcome": outcome, "answer": answer, "replayed": True}
            return TurnEvent("turn.completed", data), record.attempts
        code = record.exit_reason if record.state == "failed" and record.exit_reason else record.state
        message = record.error or f"the turn {record.state}"
        return TurnEvent("turn.failed", {"code": code, "message": message, "turn_id": turn_id}), record.attempts

    async def conversation_replays(self, scope: ConversationScope) -> list[TurnReplay]:
        """The conversation's turns as they were shown live, from their turn logs (usage priced by the price table
        of the turn's model)."""
        assert self.store is not None
        handle = self.store.conversation(scope)
        snapshot = await handle.load()
        ledger = self.usage
        price = partial(ledger.cost_of, scope) if ledger is not None else None
        return await read_turn_replays(handle, snapshot, price=price)

    async def _stored_answer(
        self, scope: ConversationScope, turn_id: str, sources: Sequence[SourceRecord]
    ) -> str | None:
        """The answer a committed turn gave (citations rendered), from its log; None when it gave none."""
        assert self.store is not None
        turn_log = await self.store.conversation(scope).read_turn_log(turn_id)
        for entry in reversed(turn_log.rounds):
            for record in entry.blocks:
                if record.type == BlockType.ASSISTANT_COMPLETION:
                    text = block_from_record(record).text
                    rows = tuple(sorted((SourceRow.model_validate_json(r.json) for r in sources), key=lambda r: r.sid))
                    return render_citations(text, citation_lookup(SourcesPool(rows=rows))) if text else text
        return None

    def _forget_old_turns(self) -> None:
        # Scanning every turn costs what the table holds: only when it has grown well past the limit.
        if len(self.turns) <= FINISHED_TURNS_KEPT + FINISHED_TURNS_KEPT // 4:
            return
        finished = [t for t in self.turns.values() if t.log.closed]
        for old in sorted(finished, key=lambda t: t.started)[: max(len(finished) - FINISHED_TURNS_KEPT, 0)]:
            self.turns.pop(old.turn_id, None)
