"""The ReAct loop (SPEC §4.1): one turn, from the user's message to a persisted final answer.

A turn loads the conversation (one read), contributes the user prompt, then runs rounds — render →
call the model (streaming) → parse channels → validate the action → execute it → contribute the
blocks it produced — until the model completes or exits, or the iteration budget runs out. Each
round's blocks are appended to the turn log as the round completes; the timeline, the sources pool
and the turn's files are committed atomically at the end. A protocol problem becomes a
``react.notice`` the model sees next round and costs one iteration; it never crashes the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from berth.bundle.context import BundleContext
from berth.config.models.assembly import ModelRef, ReactConfig
from berth.config.redaction import redact
from berth.models.errors import ModelContextOverflow, ModelError
from berth.models.protocol import ModelCompleted, ModelProvider, ModelRequest, TextDelta, Usage
from berth.runtime.announce import AnnounceState
from berth.runtime.attachments import prepare as prepare_attachments
from berth.runtime.blocks import Author, Block, BlockType, make_block
from berth.runtime.caching import editable_tail_start
from berth.runtime.compaction import SummaryRequest, compact_timeline, estimate_prompt_tokens
from berth.runtime.events import EventSink, TurnEvent
from berth.runtime.live import (
    LiveEvent,
    LiveInbox,
    ReceivedEvent,
    announce_line,
    attachment_block,
    attachment_notices,
    model_copies,
)
from berth.runtime.mcp_tools import add_mcp_tools, sync_mcp_tools
from berth.runtime.media import stock_shelf
from berth.runtime.memory import MemorySearch
from berth.runtime.metering import ModelCall, TurnMeter
from berth.runtime.paths import FilePath, RecordPath, parse_path
from berth.runtime.persistence import TurnRecorder, restore_conversation
from berth.runtime.plan import PlanBookCache, apply_step_markers
from berth.runtime.protocol import (
    DECISION_CHANNELS,
    PROTOCOL_TEXT,
    Action,
    Decision,
    ProtocolNotice,
    interpret_response,
)
from berth.runtime.pruning import plan_pruning
from berth.runtime.render import PromptMessage, PromptPart, RenderedPrompt, TimelineRenderer
from berth.runtime.resident import ResidentConversation, ResidentConversations
from berth.runtime.sources import SourcesPool, citation_lookup
from berth.runtime.timeline import Timeline
from berth.runtime.tool_calls import execute_tool_call, full_result_artifact
from berth.runtime.toolbox import RuntimeTool, ToolBox, function_tool, system_message
from berth.runtime.tools import react_tools
from berth.runtime.tools.execution import TOOL_ID, exec_tool
from berth.runtime.turn import BundleView, TurnState
from berth.runtime.workspace import Workspace, artifact_path
from berth.storage.conversations import ArtifactWrite, ConversationHandle, ConversationStore, TurnLog, TurnUsage
from berth.storage.memory import MemoryEntry
from berth.storage.scope import ConversationScope
from berth.streaming import ChannelClosed, ChannelDelta, ChannelStream, StreamEvent, render_citations
from berth.tools.packs import ToolPackFactory
from berth.tools.scoped import EXEC_PACK

if TYPE_CHECKING:
    from berth.execution.profiles import Execution
    from berth.host.generation import BundleGeneration

log = logging.getLogger(__name__)

TurnOutcome = Literal["completed", "exited", "iteration_limit", "failed", "cancelled"]
ModelResolver = Callable[[str | None], tuple[ModelRef, ModelProvider]]
"""Returns the model reference and provider for a role (None = the default model)."""

STEERED = "the user steered while the answer was being written: that response is dropped and the model decides again"


def utc_now() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class TurnInput:
    """What starts a turn."""

    scope: ConversationScope
    turn_id: str
    message: str
    user_timezone: str = "UTC"
    attachments: Sequence[tuple[str, str, bytes]] = ()
    """``(name, mime, data)`` of each attachment; text attachments are shown to the model."""
    meter: TurnMeter | None = None
    """Told of every model call the turn makes; asked after every round whether a budget is crossed."""
    inbox: LiveInbox | None = None
    """The follow-ups and steers the user sends while the turn runs (SPEC §4.1)."""
    resume: TurnLog | None = None
    """The turn's log when this process takes over a turn another one began and died running (distributed
    mode): the turn goes on after its last logged round, and no logged tool call runs again."""


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended (also what the turn log records)."""

    turn_id: str
    outcome: TurnOutcome
    answer: str | None
    followups: tuple[str, ...]
    sources_used: tuple[dict[str, Any], ...]
    usage: Usage
    rounds: int
    generation: int
    model: str
    error: dict[str, str] | None = None
    unseen_live_events: tuple[LiveEvent, ...] = ()
    """Live events that arrived while the final round ran: the model never saw them (they start the next turn)."""


@dataclass
class _RoundBuffer:
    """Blocks a round produced, in order."""

    blocks: list[Block] = field(default_factory=list)


class TurnRunner:
    """Runs turns of one host: storage, models and tool packs are passed in, never fetched globally.

    :param resident: the conversations kept in memory between turns (their committed timeline and rendered
        parts; see :mod:`berth.runtime.resident`), shared by a process's runners; default: the runner's own,
        with the default budget. ``ResidentConversations(0)`` keeps none.
    :param result_preview_chars: the cap of a tool result in the timeline for every scope (tests); None: each
        scope's ``react.result_preview_chars``.
    """

    def __init__(
        self,
        *,
        store: ConversationStore,
        models: ModelResolver,
        tool_packs: Mapping[str, ToolPackFactory] | None = None,
        memory: Callable[[ConversationScope], MemorySearch] | None = None,
        clock: Callable[[], datetime] = utc_now,
        result_preview_chars: int | None = None,
        resident: ResidentConversations | None = None,
        execution: Execution | None = None,
    ) -> None:
        self._store = store
        self._execution = execution
        self._resident = resident if resident is not None else ResidentConversations()
        self._models = models
        self._tool_packs = dict(tool_packs or {})
        self._memory = memory
        self._clock = clock
        self._preview_chars = result_preview_chars

    def forget(self, scope: ConversationScope) -> None:
        """Drop what this runner keeps in memory of the conversation ``scope`` names (it was deleted)."""
        self._resident.take(scope)

    async def run(
        self, generation: BundleGeneration, context: BundleContext, turn: TurnInput, emit: EventSink
    ) -> TurnResult:
        """Run one turn of ``generation``'s agent in ``context``'s scope; stream events to ``emit``."""
        now = self._clock()
        handle = self._store.conversation(turn.scope)
        resident = self._resident.take(turn.scope)
        restored = await restore_conversation(handle, now=now, committed=resident.committed if resident else None)
        timeline, sources = restored.timeline, restored.sources
        reused = resident if resident is not None and restored.reused else None
        renderer = reused.renderer if reused is not None else TimelineRenderer()
        last_request_at = timeline.blocks[-1].ts if len(timeline) else None
        bundle = BundleView(
            bundle_id=generation.bundle_id,
            skills=dict(generation.skills),
            knowledge=dict(generation.knowledge),
        )
        memory = self._memory(turn.scope) if self._memory else None
        state = TurnState(
            scope=turn.scope,
            turn_id=turn.turn_id,
            bundle=bundle,
            timeline=timeline,
            sources=sources,
            workspace=Workspace(turn.turn_id, handle, attachments={name: data for name, _, data in turn.attachments}),
            clock=self._clock,
            memory=memory,
            plans=reused.plans if reused is not None else PlanBookCache(),
            media_shelf=renderer.media,
        )
        agent = generation.hooks.agent(context)
        react = self._react_settings(context, agent.react if agent else {})
        model_ref, provider = self._models(agent.model_role if agent else None)
        state.model = model_ref
        label = model_label(model_ref)
        recorder = TurnRecorder(
            handle, turn.turn_id, base_version=restored.version, sources=sources, stored=restored.stored
        )
        pruned = plan_pruning(
            timeline,
            now=now,
            last_request_at=last_request_at,
            cache_ttl_seconds=react.cache_ttl_seconds or None,
            previously_pruned=_pruned_by_previous_turn(timeline),
        )

        async def store_files(files: tuple[ArtifactWrite, ...]) -> None:
            await recorder.begun()  # the turn's row first: its files belong to it
            await handle.store_files(turn.turn_id, files)

        state.store_files = store_files
        resumed_rounds = 0
        resumed = turn.resume is not None and _began(turn.resume)
        await prepare_attachments(turn.attachments, model_ref)  # documents' text, downscaled images: off the loop
        if turn.resume is not None and resumed:
            head, logged_rounds = recorder.resume(turn.resume)
            timeline.contribute(*head, *(block for entry in logged_rounds for block in entry))
            state.continue_numbering(block for entry in logged_rounds for block in entry)
            await state.workspace.restore()  # the files its earlier attempts stored as they announced them
            resumed_rounds = sum(1 for entry in logged_rounds if not _live_only(entry))
        else:
            head = self._head_blocks(turn, generation, model_ref, now, pruned)
            timeline.contribute(*head)
            recorder.start(head, started_at=now, generation=f"{generation.bundle_id}:{generation.number}")
        files = {name: (mime, data) for name, mime, data in turn.attachments}
        state.model_copies.update(model_copies(head, files, model_ref))
        await self._stock_media(renderer, timeline, head, state.workspace.attachments, state.model_copies, handle)
        inbox = turn.inbox
        if inbox is not None:
            inbox.cancel_streams = react.steer == "cancel_stream"
            inbox.model = model_ref  # images and PDFs sent from now on reach the model as themselves if it reads them
            early = inbox.attach(recorder.record_live)
            if early:  # sent while the turn waited for a slot
                await recorder.record_live(early)
        await emit(
            TurnEvent(
                "turn.started",
                {
                    "turn_id": turn.turn_id,
                    "bundle": generation.bundle_id,
                    "generation": generation.number,
                    "model": label,
                    **({"resumed_after_round": resumed_rounds} if resumed else {}),
                },
            )
        )
        if not resumed:  # the files the model does not get as they are: the user is told at once
            for notice in attachment_notices(head):
                await emit(TurnEvent("notice", notice))
        usage = Usage()
        round_usages: list[Usage] = []  # each round's model call, summed once when the turn ends
        rounds = resumed_rounds

        async def finish(
            outcome: TurnOutcome, decision: Decision | None, final: list[Block], error: dict[str, str] | None
        ) -> TurnResult:
            nonlocal usage
            unseen = inbox.close() if inbox is not None else ()
            usage = Usage.total(usage, *round_usages, state.compaction_usage)  # every call the turn made
            state.timeline.contribute(*final)
            answer = decision.answer if decision else None
            used = self._sources_used(answer or "", state.sources)
            remembered = await _memory_entries(memory, [*head, *final], state.timeline) if memory is not None else ()
            await recorder.commit(
                state.timeline,
                sources=state.sources,
                state={"failed": "failed", "cancelled": "cancelled"}.get(outcome, "completed"),  # type: ignore[arg-type]
                ended_at=self._clock(),
                final_round=final,
                artifacts=(
                    *state.workspace.artifact_writes(),
                    *self._capped_results(state),
                    *(ArtifactWrite(f"{turn.turn_id}/attachments/{name}", data) for name, _, data in turn.attachments),
                    *self._model_copy_writes(state),
                    *self._live_attachment_writes(turn.turn_id, inbox),
                ),
                usage=TurnUsage(**usage.model_dump()),
                exit_reason=outcome,
                memory=remembered,
            )
            if recorder.committed is not None:
                self._resident.keep(turn.scope, ResidentConversation(recorder.committed, renderer, state.plans))
            result = TurnResult(
                turn_id=turn.turn_id,
                outcome=outcome,
                answer=answer,
                followups=decision.followups if decision else (),
                sources_used=used,
                usage=usage,
                rounds=rounds,
                generation=generation.number,
                model=label,
                error=error,
                unseen_live_events=tuple(received.event for received in unseen),
            )
            try:
                await generation.hooks.after_turn(context, turn, result)
            except Exception:
                log.exception("berth_after_turn of bundle %s failed", generation.bundle_id)
            if outcome in ("failed", "cancelled") and error is not None:
                await emit(TurnEvent("turn.failed", dict(error)))
            else:
                await emit(
                    TurnEvent(
                        "turn.completed",
                        {
                            "turn_id": turn.turn_id,
                            "answer": render_citations(answer, citation_lookup(state.sources)) if answer else answer,
                            "followups": list(result.followups),
                            "sources_used": list(used),
                            "usage": {
                                **usage.model_dump(),
                                "cost_usd": turn.meter.cost_usd() if turn.meter is not None else None,
                            },
                            "outcome": outcome,
                        },
                    )
                )
            return result

        decision: Decision | None = None

        async def rounds_until_done() -> TurnResult:
            nonlocal decision, rounds, pruned, last_request_at
            try:
                await generation.hooks.before_turn(context, turn)
            except Exception as exc:
                error = {"code": "turn_vetoed", "message": redact(f"the bundle refused this turn: {exc}")}
                return await finish("failed", None, [self._status_block(state, "failed", error["message"])], error)
            toolbox = await self._toolbox(
                generation, context, bundle, agent.tools if agent else None, with_memory=memory is not None
            )
            state.toolbox = toolbox
            if agent is None:
                error = {
                    "code": "bundle_has_no_agent",
                    "message": f"bundle '{generation.bundle_id}' defines no agent (berth_agent)",
                }
                return await finish("failed", None, [self._status_block(state, "failed", error["message"])], error)
            system = system_message(
                protocol=PROTOCOL_TEXT,
                instructions=agent.instructions,
                toolbox=toolbox,
                skills=generation.skills,
                bundle_title=generation.info.title or generation.bundle_id,
            )

            def estimate(candidate: Timeline) -> int:
                """The size of the prompt ``candidate`` would render to (what compaction must shrink)."""
                quiet = AnnounceState(
                    iteration=1, max_iterations=react.max_iterations, budget_tokens_left=0, now=self._clock()
                )
                rendered = TimelineRenderer().render(
                    candidate,
                    system=system,
                    sources=state.sources,
                    announce=quiet,
                    offset=react.cache_checkpoint_offset,
                    pruned_turns=state.pruned_turns,
                )
                return estimate_prompt_tokens(rendered)

            max_actions = 4 if react.multi_action == "safe_fanout" else 1
            last_estimate = 0
            compaction_failed = False
            for iteration in range(resumed_rounds + 1, react.max_iterations + 1):
                rounds = iteration
                if generation.mcp is not None:  # servers that came back (or went down) since the last round
                    state.notices.extend(sync_mcp_tools(toolbox, generation.mcp))
                pruned = plan_pruning(
                    state.timeline,
                    now=self._clock(),
                    last_request_at=last_request_at,
                    cache_ttl_seconds=react.cache_ttl_seconds or None,
                    previously_pruned=pruned,
                )
                state.pruned_turns = pruned

                def render(
                    iteration: int = iteration,
                    pruned: frozenset[str] = pruned,
                    used: int = last_estimate,
                    new_live: frozenset[int] = frozenset(),
                ) -> RenderedPrompt:
                    plans = state.plan_book()
                    announce = AnnounceState(
                        iteration=iteration,
                        max_iterations=react.max_iterations,
                        budget_tokens_left=react.context_budget_tokens - used,
                        now=self._clock(),
                        user_timezone=turn.user_timezone,
                        open_plans=plans.open_plans(),
                        current_plan_id=current.plan_id if (current := plans.current) is not None else None,
                        notices=tuple(state.notices),
                        inactive_tools=tuple(
                            f"{tool_id}: {reason}" for tool_id, reason in sorted(toolbox.inactive.items())
                        ),
                        live_events=tuple(
                            announce_line(received, new=received.number in new_live)
                            for received in (inbox.received if inbox is not None else ())
                        ),
                    )
                    return renderer.render(
                        state.timeline,
                        system=system,
                        sources=state.sources,
                        announce=announce,
                        offset=react.cache_checkpoint_offset,
                        pruned_turns=pruned,
                    )

                while True:  # a steer that stops the model stream makes the loop decide again, in the same round
                    new_live = self._take_live(inbox, state, renderer.media)
                    used_before = last_estimate
                    prompt = render(used=used_before, new_live=new_live)
                    last_estimate = estimate_prompt_tokens(prompt)
                    over_budget = last_estimate > react.compaction_threshold * react.context_budget_tokens
                    if over_budget and not compaction_failed:  # one failed compaction per turn is enough
                        compaction_failed = not await self._compact(
                            state, react, emit, force=False, estimate=estimate, meter=turn.meter
                        )
                        prompt = render(used=used_before, new_live=new_live)
                        last_estimate = estimate_prompt_tokens(prompt)
                    if inbox is not None and inbox.steer_waiting():  # it came while the round was rendered
                        continue
                    state.visible_from = prompt.start
                    state.editable_from = editable_tail_start(
                        state.timeline, start=prompt.start, offset=react.cache_checkpoint_offset
                    )
                    state.notices.clear()
                    last_request_at = self._clock()
                    try:
                        try:
                            called = await self._call_model(provider, model_ref, prompt, state, emit, iteration, inbox)
                        except ModelContextOverflow:
                            if not await self._compact(
                                state, react, emit, force=True, estimate=estimate, meter=turn.meter
                            ):
                                raise
                            called = await self._call_model(
                                provider,
                                model_ref,
                                render(used=used_before, new_live=new_live),
                                state,
                                emit,
                                iteration,
                                inbox,
                            )
                    except ModelError as exc:
                        error = {"code": f"model_{exc.code}", "message": str(exc.message)}
                        return await finish(
                            "failed", decision, [self._status_block(state, "failed", error["message"])], error
                        )
                    if called is not None:
                        result, completed = called
                        break
                    cancelled = {"code": "stream_cancelled", "message": STEERED, "round": iteration}
                    await emit(TurnEvent("notice", cancelled))
                round_usages.append(completed.usage)
                if turn.meter is not None:
                    turn.meter.model_called(ModelCall(label, "round", completed.usage, self._clock()))
                decision = interpret_response(result, max_actions=max_actions)
                blocks, final = await self._execute(decision, state, toolbox, react, emit)
                for plan_block in (b for b in blocks if b.type == BlockType.REACT_PLAN):
                    await emit(TurnEvent("plan", {"plan": plan_block.data}))
                if final is not None:
                    outcome: TurnOutcome = "completed" if final == "complete" else "exited"
                    return await finish(outcome, decision, blocks, None)
                state.timeline.contribute(*blocks)
                await recorder.record_round(blocks, sources=state.sources)
                breach = turn.meter.breach() if turn.meter is not None else None
                if breach is not None:
                    error = {"code": "budget_exceeded", "message": breach.message}
                    return await finish(
                        "failed", decision, [self._status_block(state, "failed", breach.message)], error
                    )
            notice = f"the turn used all {react.max_iterations} iterations without completing"
            await emit(TurnEvent("notice", {"code": "iteration_limit", "message": notice}))
            return await finish(
                "iteration_limit", decision, [self._status_block(state, "iteration_limit", notice)], None
            )

        try:
            return await rounds_until_done()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            error = {"code": "cancelled", "message": "the turn was cancelled"}
            status = self._status_block(state, "cancelled", error["message"])
            return await finish("cancelled", decision, [*self._partial_answer_blocks(state), status], error)

    # -- a round ---------------------------------------------------------------------------------

    async def _call_model(
        self,
        provider: ModelProvider,
        model_ref: ModelRef,
        prompt: RenderedPrompt,
        state: TurnState,
        emit: EventSink,
        round_: int,
        inbox: LiveInbox | None = None,
    ) -> tuple[Any, ModelCompleted] | None:
        """Stream one model call through the channel parser; None when a steer stopped it (decide again)."""
        lookup = citation_lookup(state.sources)

        streamed = state.streamed_answer
        streamed.clear()

        async def forward(event: StreamEvent) -> None:
            if isinstance(event, ChannelDelta) and event.marker:
                if event.marker == "answer":
                    streamed.append((event.instance, event.raw))
                await emit(
                    TurnEvent(
                        "channel.delta",
                        {
                            "channel": event.channel,
                            "instance": event.instance,
                            "marker": event.marker,
                            "text": event.text,
                        },
                    )
                )
            elif isinstance(event, ChannelClosed) and event.marker:
                await emit(
                    TurnEvent(
                        "channel.done", {"channel": event.channel, "instance": event.instance, "marker": event.marker}
                    )
                )

        stream = ChannelStream(DECISION_CHANNELS, sources=lookup, emit=forward)
        completed: ModelCompleted | None = None
        metadata = {"user_id": state.scope.user_id, "turn_id": state.turn_id, "round": str(round_)}
        request = ModelRequest(prompt=prompt, metadata=metadata)
        if inbox is None:
            async for event in provider.stream(request):
                if isinstance(event, TextDelta):
                    await stream.feed(event.text)
                else:
                    completed = event
        else:
            try:
                with inbox.streaming():
                    events = provider.stream(request)
                    try:
                        async for event in events:
                            if isinstance(event, TextDelta):
                                await stream.feed(event.text)
                            else:
                                completed = event
                    finally:  # a stopped stream closes its connection now, not when it is collected
                        close = getattr(events, "aclose", None)
                        if close is not None:
                            await close()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not inbox.claim_steer_cancel() or task is None:
                    raise
                if task.uncancel() > 0:  # cancelled for another reason as well (the turn is being cancelled)
                    raise
                return None
        result = await stream.finish()
        if completed is None:
            completed = ModelCompleted(stop_reason="other", usage=Usage())
        return result, completed

    async def _execute(
        self, decision: Decision, state: TurnState, toolbox: ToolBox, react: ReactConfig, emit: EventSink
    ) -> tuple[list[Block], Literal["complete", "exit"] | None]:
        """Carry out a decision; return the round's blocks and whether the turn ends."""
        call_id = state.next_call_id()
        now = self._clock()
        blocks: list[Block] = []
        turn_id = state.turn_id
        if decision.thinking.strip():
            blocks.append(
                record_block(
                    BlockType.REACT_THINKING,
                    turn_id,
                    f"react.thinking.{call_id}",
                    now,
                    "assistant",
                    text=decision.thinking,
                    call_id=call_id,
                )
            )
        notices = list(decision.notices)
        action = decision.action
        if action is not None and action.notes.strip():
            blocks.append(
                record_block(
                    BlockType.REACT_NOTES,
                    turn_id,
                    f"react.notes.{call_id}",
                    now,
                    "assistant",
                    text=action.notes,
                    call_id=call_id,
                )
            )
            blocks.extend(
                apply_step_markers(state.plan_book(), action.notes, turn_id=turn_id, now=now, call_id=call_id)
            )
        if action is not None and action.action == "complete":
            if decision.answer is None or not decision.answer.strip():
                notices.append(ProtocolNotice("answer_missing", "a complete action needs a <channel:answer>"))
            else:
                blocks.extend(self._final_blocks(decision, state, now))
                return self._with_notices(blocks, notices, state, call_id, now), "complete"
        elif action is not None and action.action == "exit":
            reason = action.notes.strip() or "the agent stopped"
            if decision.answer and decision.answer.strip():
                blocks.extend(self._final_blocks(decision, state, now))
            blocks.append(self._status_block(state, "exited", reason))
            return self._with_notices(blocks, notices, state, call_id, now), "exit"
        elif decision.answer and decision.answer.strip() and not decision.actions:
            # an answer was streamed without a valid action: keep it rather than throw it away
            blocks.extend(self._final_blocks(decision, state, now))
            return self._with_notices(blocks, notices, state, call_id, now), "complete"
        calls = [a for a in decision.actions if a.action == "call_tool"]
        if len(calls) > 1 and not all(_read_only(toolbox, a) for a in calls):
            notices.append(
                ProtocolNotice(
                    "multi_action_refused",
                    f"{len(calls)} actions in one response, but not every tool is read-only; only the first ran",
                )
            )
            calls = calls[:1]
        for index, call_action in enumerate(calls):
            this_call = call_id if index == 0 else state.next_call_id()
            blocks.extend(
                await execute_tool_call(
                    call_action,
                    decision,
                    this_call,
                    state,
                    toolbox,
                    emit,
                    notices,
                    clock=self._clock,
                    preview_chars=self._preview_chars or react.result_preview_chars,
                )
            )
        blocks = self._with_notices(blocks, notices, state, call_id, now)
        for notice in notices:
            await emit(TurnEvent("notice", {"code": notice.code, "message": redact(notice.message)}))
        return blocks, None

    # -- helpers ---------------------------------------------------------------------------------

    def _with_notices(
        self, blocks: list[Block], notices: list[ProtocolNotice], state: TurnState, call_id: str, now: datetime
    ) -> list[Block]:
        for n, notice in enumerate(notices, start=1):
            blocks.append(
                record_block(
                    BlockType.REACT_NOTICE,
                    state.turn_id,
                    f"react.notice.{call_id}-{n}",
                    now,
                    "runtime",
                    mime="application/json",
                    data={"code": notice.code, "message": redact(notice.message)},
                    call_id=call_id,
                )
            )
        return blocks

    def _final_blocks(self, decision: Decision, state: TurnState, now: datetime) -> list[Block]:
        blocks = [
            record_block(
                BlockType.ASSISTANT_COMPLETION,
                state.turn_id,
                "assistant.completion",
                now,
                "assistant",
                mime="text/markdown",
                text=decision.answer,
            )
        ]
        if decision.followups:
            blocks.append(
                record_block(
                    BlockType.ASSISTANT_FOLLOWUPS,
                    state.turn_id,
                    "assistant.followups",
                    now,
                    "assistant",
                    mime="application/json",
                    data={"followups": list(decision.followups)},
                )
            )
        return blocks

    def _partial_answer_blocks(self, state: TurnState) -> list[Block]:
        """The answer a cancelled turn had streamed when it stopped, kept (``meta.partial``): what the user saw of
        it stays in the conversation, for them and for the model's next turn; none when nothing was streamed."""
        partial = state.partial_answer()
        if not partial.strip():
            return []
        return [
            record_block(
                BlockType.ASSISTANT_COMPLETION,
                state.turn_id,
                "assistant.completion",
                self._clock(),
                "assistant",
                mime="text/markdown",
                text=partial,
                meta={"partial": True},
            )
        ]

    def _status_block(self, state: TurnState, status: str, message: str) -> Block:
        return record_block(
            BlockType.TURN_STATUS,
            state.turn_id,
            "turn.status",
            self._clock(),
            "runtime",
            text=redact(message),
            meta={"state": status},
        )

    def _head_blocks(
        self, turn: TurnInput, generation: BundleGeneration, model_ref: ModelRef, now: datetime, pruned: frozenset[str]
    ) -> list[Block]:
        header = record_block(
            BlockType.TURN_HEADER,
            turn.turn_id,
            "turn.header",
            now,
            "runtime",
            mime="application/json",
            data={
                "bundle": generation.bundle_id,
                "generation": generation.number,
                "model": model_label(model_ref),
                "pruned": sorted(pruned),
            },
        )
        prompt = record_block(BlockType.USER_PROMPT, turn.turn_id, "user.prompt", now, "user", text=turn.message)
        blocks = [header, prompt]
        blocks.extend(
            attachment_block(turn.turn_id, name, mime, data, now, model=model_ref)
            for name, mime, data in turn.attachments
        )
        return blocks

    @staticmethod
    async def _stock_media(
        renderer: TimelineRenderer,
        timeline: Timeline,
        head: Sequence[Block],
        attachments: Mapping[str, bytes],
        copies: Mapping[str, bytes],
        handle: ConversationHandle,
    ) -> None:
        """Put the bytes of the images and PDFs the prompt shows as themselves on the renderer's shelf: this
        turn's from its request (or their downscaled ``copies``), earlier turns' (when this renderer has not seen
        them) from the store."""
        prefix = f"fi:{head[0].turn_id}.attachments/" if head else ""
        for block in head:
            if block.meta.get("media") and block.path.startswith(prefix):
                copy_path = str(block.meta.get("media_path") or "")
                if copy_path in copies:
                    renderer.media[copy_path] = copies[copy_path]
                    continue
                data = attachments.get(block.path.removeprefix(prefix))
                if data is not None:
                    renderer.media[block.path] = data
        visible = timeline.media_blocks(timeline.latest_summary_index or 0)
        if await stock_shelf(renderer.media, visible, handle):
            renderer.forget_parts()

    def _react_settings(self, context: BundleContext, overrides: Mapping[str, Any]) -> ReactConfig:
        merged = {**context.settings.react.model_dump(), **dict(overrides)}
        return ReactConfig.model_validate(merged)

    async def _toolbox(
        self,
        generation: BundleGeneration,
        context: BundleContext,
        bundle: BundleView,
        allowed: Sequence[str] | None,
        *,
        with_memory: bool,
    ) -> ToolBox:
        toolbox = ToolBox()
        scoped = generation.tools_in(context, self._tool_packs)
        for tool_id, spec in scoped.specs.items():
            toolbox.add(function_tool(tool_id, spec))
        toolbox.inactive.update(scoped.inactive)
        if generation.mcp is not None:
            await add_mcp_tools(toolbox, generation.mcp)
        for tool in react_tools(bundle, with_memory=with_memory):
            toolbox.add(tool)
        exec_options = scoped.runtime_packs.get(EXEC_PACK)
        if exec_options is not None:
            if self._execution is None:
                toolbox.inactive[TOOL_ID] = "isolated execution is not enabled on this host"
            else:
                options = self._execution.options_for(generation.bundle_id, exec_options)
                toolbox.add(exec_tool(self._execution, context.settings.exec, options, toolbox, scoped.specs))
        toolbox.restrict(allowed)
        return toolbox

    async def _compact(
        self,
        state: TurnState,
        react: ReactConfig,
        emit: EventSink,
        *,
        force: bool,
        estimate: Callable[[Timeline], int],
        meter: TurnMeter | None = None,
    ) -> bool:
        summarizer_ref, provider = self._models("summarizer")

        async def summarize(request: SummaryRequest) -> str:
            instructions = (
                f"Summarize these conversation turns in at most {request.max_tokens} tokens. Keep facts, "
                "decisions, open questions and the logical paths of files and results."
            )
            if request.previous_summary:
                instructions += f"\nFold in this earlier summary:\n{request.previous_summary}"
            prompt = RenderedPrompt(
                messages=(
                    PromptMessage(role="system", parts=(PromptPart(section="system", text=instructions),)),
                    PromptMessage(role="user", parts=(PromptPart(section="current_turn", text=request.transcript),)),
                ),
                checkpoints=(),
                start=0,
            )
            pieces: list[str] = []
            async for event in provider.stream(ModelRequest(prompt=prompt, max_output_tokens=request.max_tokens)):
                if isinstance(event, TextDelta):
                    pieces.append(event.text)
                else:
                    state.compaction_usage = state.compaction_usage.plus(event.usage)
                    if meter is not None:
                        call = ModelCall(model_label(summarizer_ref), "compaction", event.usage, self._clock())
                        meter.model_called(call)
            return "".join(pieces)

        outcome = await compact_timeline(
            state.timeline,
            summarizer=summarize,
            context_budget_tokens=react.context_budget_tokens,
            now=self._clock(),
            threshold=react.compaction_threshold,
            force=force,
            estimate=estimate,
        )
        if outcome.status in ("not_needed", "nothing_to_compact"):
            return False  # nothing happened: only the current turn is over the budget
        await emit(
            TurnEvent(
                "compaction",
                {
                    "status": outcome.status,
                    "message": outcome.message,
                    "covered_turn_ids": list(outcome.covered_turn_ids),
                },
            )
        )
        if not outcome.applied:
            state.notices.append(outcome.message)
        return outcome.applied

    @staticmethod
    def _take_live(inbox: LiveInbox | None, state: TurnState, shelf: dict[str, bytes]) -> frozenset[int]:
        """Contribute the live events that arrived since the last decision (the bytes of their images and PDFs
        shown as themselves onto the renderer's ``shelf``); return their numbers."""
        if inbox is None:
            return frozenset()
        taken: tuple[ReceivedEvent, ...] = inbox.take()
        for received in taken:
            files = {name: data for name, _, data in received.event.attachments}
            copies = model_copies(
                received.blocks, {name: (mime, data) for name, mime, data in received.event.attachments}, inbox.model
            )
            state.model_copies.update(copies)
            shelf.update(copies)
            for block in received.blocks:
                name = str(block.meta.get("name"))
                if block.meta.get("media") and not block.meta.get("media_path") and name in files:
                    shelf[block.path] = files[name]
            state.timeline.contribute(*received.blocks)
        return frozenset(received.number for received in taken)

    @staticmethod
    def _model_copy_writes(state: TurnState) -> tuple[ArtifactWrite, ...]:
        """The downscaled copies of images the turn showed the model, stored beside its attachments (a later
        render in any process reads them like any file)."""
        writes = []
        for path, data in sorted(state.model_copies.items()):
            parsed = parse_path(path)
            if isinstance(parsed, FilePath):
                writes.append(ArtifactWrite(artifact_path(parsed.turn_id, parsed.area, parsed.rel), data))
        return tuple(writes)

    @staticmethod
    def _live_attachment_writes(turn_id: str, inbox: LiveInbox | None) -> tuple[ArtifactWrite, ...]:
        """The files of the live events the turn took, stored beside its own attachments."""
        if inbox is None:
            return ()
        return tuple(
            ArtifactWrite(f"{turn_id}/attachments/live-{received.number}/{name}", data)
            for received in inbox.received
            for name, _, data in received.event.attachments
        )

    @staticmethod
    def _sources_used(answer: str, sources: SourcesPool) -> tuple[dict[str, Any], ...]:
        from berth.streaming import cited_sids

        rows = [sources.get(sid) for sid in cited_sids(answer)]
        return tuple({"sid": row.sid, "url": row.url, "title": row.title} for row in rows if row is not None)

    @staticmethod
    def _capped_results(state: TurnState) -> tuple[ArtifactWrite, ...]:
        """The capped results not stored yet (a turn without a store for its files while it runs)."""
        return tuple(
            ArtifactWrite(full_result_artifact(state.turn_id, path.split(".")[-2]), text.encode("utf-8"))
            for path, text in sorted(state.full_results.items())
            if path not in state.stored_results
        )


__all__ = ["RuntimeTool", "TurnInput", "TurnResult", "TurnRunner"]


def _pruned_by_previous_turn(timeline: Any) -> frozenset[str]:
    """The turns the previous turn rendered as cards (recorded in its header), so a warm cache keeps them."""
    for block in reversed(timeline.blocks):
        if block.type == BlockType.TURN_HEADER and isinstance(block.data, dict):
            pruned = block.data.get("pruned")
            return frozenset(str(t) for t in pruned) if isinstance(pruned, list) else frozenset()
    return frozenset()


def _began(log: TurnLog) -> bool:
    """Whether a turn's log shows it began (its head holds the turn header), not only that it was accepted."""
    return any(record.type == BlockType.TURN_HEADER for entry in log.rounds[:1] for record in entry.blocks)


def _live_only(blocks: Sequence[Block]) -> bool:
    """Whether a turn-log entry holds only a live event (a follow-up or steer), not a round of the loop."""
    return bool(blocks) and all(b.type in (BlockType.USER_FOLLOWUP, BlockType.USER_STEER) for b in blocks)


def model_label(model_ref: ModelRef) -> str:
    """What clients and logs see of the model: ``provider:model``, never a local file path."""
    return model_ref.label


def _read_only(toolbox: ToolBox, action: Action) -> bool:
    """True when the action calls a known read-only (exploration) tool."""
    tool = toolbox.get(action.tool_call.tool_id) if action.tool_call is not None else None
    return tool is not None and tool.read_only


def record_block(
    block_type: BlockType, turn_id: str, record: str, ts: datetime, author: Author, **content: Any
) -> Block:
    """A block at ``ar:<turn_id>.<record>`` (``content``: text or data, mime, meta, call_id)."""
    return make_block(block_type, RecordPath(turn_id, record), ts, author, **content)


async def _memory_entries(memory: MemorySearch, blocks: list[Block], timeline: Timeline) -> tuple[MemoryEntry, ...]:
    """The turn's memory entries, for its commit to write; none (logged) when they cannot be made: the turn's
    answer matters more than its place in the memory index."""
    ordinals = {turn_id: n for n, turn_id in enumerate(timeline.turn_ids(), start=1)}
    try:
        return await memory.entries(blocks, turn_ordinals=ordinals)
    except Exception:
        log.exception("the turn's memory entries could not be made (its embedder failed); it commits without them")
        return ()
