"""A conversation's turns as a client showed them live, read back from their turn logs (``GET …/conversations/{id}``).

A turn log keeps every round a turn appended, whatever compaction or ``react.hide`` later did to the timeline, so
a turn reopened from it shows what the user saw while it ran: the prompt and its attachments, the reasoning, each
tool call with its parameters and outcome (and the files it produced), the follow-ups and steers sent while it ran,
the notices, and the answer — the partial one of a turn the user stopped, marked as such — with its citations
rendered, its follow-up suggestions and the tokens it used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.models.events import Usage
from berth.runtime.blocks import Block, BlockType
from berth.runtime.persistence import block_from_record
from berth.runtime.sources import SourceRow, SourcesPool, citation_lookup
from berth.storage.conversations import ConversationHandle, ConversationSnapshot, TurnLog, TurnRecord
from berth.streaming import cited_sids, render_citations

__all__ = [
    "LiveEventReplay",
    "NoticeReplay",
    "ToolReplay",
    "TurnReplay",
    "TurnUsageReplay",
    "read_turn_replays",
    "replay_turn",
    "sources_of",
]

SUMMARY_CHARS = 200
"""How much of a tool's result a card shows when the tool gave no summary (as the live ``tool.result`` does)."""

Pricer = Callable[[str, Usage], float | None]
"""The cost in USD of ``usage`` at the price of the model labelled ``provider:model`` (None: unpriced)."""


@dataclass(slots=True)
class ToolReplay:
    """One tool call of a turn: what was asked, and how it went (``ok`` None: it never returned)."""

    seq: int
    """Where in the turn it happened (by time): orders tool calls and live events as they were shown."""
    call_id: str
    tool_id: str
    params: Any
    ok: bool | None = None
    summary: str | None = None
    code: str | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LiveEventReplay:
    """A follow-up or steer the user sent while the turn ran."""

    seq: int
    kind: str
    message: str
    attachments: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class NoticeReplay:
    """A notice the turn showed (a protocol problem, a tool refused, the iteration limit)."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class TurnUsageReplay:
    """The tokens a turn used, and their cost by the price table (None: its model has no price)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cost_usd: float | None


@dataclass(slots=True)
class TurnReplay:
    """One turn as a client shows it.

    :ivar answer: the answer with its citations rendered as markdown links; for a cancelled turn, what it had
        streamed when it was stopped (``partial``).
    :ivar status_message: what the turn's ``turn.status`` says when it did not simply complete (failed, stopped,
        interrupted, out of iterations).
    """

    turn_id: str
    state: str
    outcome: str | None
    prompt: str | None
    answer: str | None
    partial: bool
    followups: list[str]
    citations: list[dict[str, Any]]
    attachments: list[dict[str, Any]]
    reasoning: list[str]
    tools: list[ToolReplay]
    live_events: list[LiveEventReplay]
    notices: list[NoticeReplay]
    artifacts: list[dict[str, Any]]
    status_message: str | None
    usage: TurnUsageReplay | None
    started_at: datetime | None
    ended_at: datetime | None


def _attachment(block: Block) -> dict[str, Any]:
    """An attachment as the UI lists it; ``sent`` and ``sent_note`` when the model did not get it as it is
    (downscaled, read as text, not seen)."""
    attachment = {
        "name": block.meta.get("name"),
        "mime": block.mime,
        "size": block.meta.get("size"),
        "path": block.path,
    }
    if block.meta.get("sent"):
        attachment.update(sent=block.meta["sent"], sent_note=block.meta.get("sent_note"))
    return attachment


def _followups(data: object) -> list[str]:
    items = data.get("followups") if isinstance(data, dict) else None
    return [str(item) for item in items] if isinstance(items, list) else []


def _notice(data: object) -> NoticeReplay:
    found = data if isinstance(data, dict) else {}
    return NoticeReplay(code=str(found.get("code") or "notice"), message=str(found.get("message") or ""))


def _usage(record: TurnRecord, model: str | None, price: Pricer | None) -> TurnUsageReplay | None:
    if record.state in ("accepted", "running"):
        return None
    used = record.usage
    usage = Usage(
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
        cache_read_input_tokens=used.cache_read_input_tokens,
        cache_creation_input_tokens=used.cache_creation_input_tokens,
    )
    cost = price(model, usage) if price is not None and model else None
    return TurnUsageReplay(**usage.model_dump(), cost_usd=cost)


def replay_turn(log: TurnLog, sources: SourcesPool, *, price: Pricer | None = None) -> TurnReplay:
    """One turn as it was shown live, from its log; ``sources`` is the conversation's pool (for citations)."""
    record = log.turn
    blocks = [block_from_record(entry) for entry_round in log.rounds for entry in entry_round.blocks]
    replay = TurnReplay(
        turn_id=record.turn_id,
        state=record.state,
        outcome=record.exit_reason,
        prompt=None,
        answer=None,
        partial=False,
        followups=[],
        citations=[],
        attachments=[],
        reasoning=[],
        tools=[],
        live_events=[],
        notices=[],
        artifacts=[],
        status_message=None,
        usage=None,
        started_at=record.started_at,
        ended_at=record.ended_at,
    )
    tools: dict[str, ToolReplay] = {}
    raw_answer: str | None = None
    model: str | None = None
    live_files: dict[object, list[dict[str, Any]]] = {}
    # where each block happened in the turn: a follow-up sent while a tool ran is logged before that tool's round
    # (which is logged when it ends), but it came after the call, as the client showed it
    when = {position: rank for rank, position in enumerate(sorted(range(len(blocks)), key=lambda i: blocks[i].ts))}
    for position, block in enumerate(blocks):
        seq = when[position]
        kind = block.type
        if kind == BlockType.TURN_HEADER and isinstance(block.data, dict):
            model = str(block.data.get("model") or "") or None
        elif kind == BlockType.USER_PROMPT:
            replay.prompt = block.text
        elif kind == BlockType.USER_ATTACHMENT:
            if block.meta.get("live") is None:
                replay.attachments.append(_attachment(block))
            else:
                live_files.setdefault(block.meta.get("live"), []).append(_attachment(block))
        elif kind in (BlockType.USER_FOLLOWUP, BlockType.USER_STEER):
            attached = live_files.setdefault(block.meta.get("live"), [])
            event_kind = "steer" if kind == BlockType.USER_STEER else "followup"
            replay.live_events.append(LiveEventReplay(seq, event_kind, block.text or "", attached))
        elif kind == BlockType.REACT_THINKING and block.text:
            replay.reasoning.append(block.text)
        elif kind == BlockType.REACT_TOOL_CALL and block.call_id is not None:
            data = block.data if isinstance(block.data, dict) else {}
            tool = ToolReplay(seq, block.call_id, str(data.get("tool_id", "")), data.get("params"))
            tools[block.call_id] = tool
            replay.tools.append(tool)
        elif kind == BlockType.REACT_TOOL_CODE and block.call_id in tools:
            tools[block.call_id].code = block.text
        elif kind == BlockType.REACT_TOOL_RESULT and block.call_id in tools:
            tool = tools[block.call_id]
            tool.ok = bool(block.meta.get("ok", True))
            summary = block.meta.get("summary")  # turns stored before it was recorded: the start of the result
            tool.summary = str(summary) if summary is not None else (block.text or "")[:SUMMARY_CHARS]
            produced = block.meta.get("artifacts")
            if isinstance(produced, list):
                tool.artifacts = [dict(item) for item in produced if isinstance(item, dict)]
                replay.artifacts.extend(tool.artifacts)
        elif kind == BlockType.REACT_NOTICE:
            notice = _notice(block.data)
            replay.notices.append(notice)
            if block.path.startswith("tc:") and block.call_id in tools and tools[block.call_id].ok is None:
                tools[block.call_id].ok = False  # the call was refused or failed: the notice says why
                tools[block.call_id].summary = f"{notice.code}: {notice.message}"
        elif kind == BlockType.ASSISTANT_COMPLETION:
            raw_answer = block.text
            replay.partial = bool(block.meta.get("partial"))
        elif kind == BlockType.ASSISTANT_FOLLOWUPS:
            replay.followups = _followups(block.data)
        elif kind == BlockType.TURN_STATUS and block.meta.get("state") not in (None, "completed"):
            replay.status_message = block.text
    if raw_answer:
        lookup = citation_lookup(sources)
        replay.answer = render_citations(raw_answer, lookup)
        replay.citations = [
            {"sid": row.sid, "url": row.url, "title": row.title}
            for sid in cited_sids(raw_answer)
            if (row := sources.get(sid)) is not None
        ]
    else:
        replay.answer = raw_answer
    replay.usage = _usage(record, model, price)
    return replay


def sources_of(snapshot: ConversationSnapshot) -> SourcesPool:
    """The conversation's sources pool as a snapshot holds it."""
    rows = sorted((SourceRow.model_validate_json(record.json) for record in snapshot.sources), key=lambda r: r.sid)
    return SourcesPool(rows=tuple(rows))


async def read_turn_replays(
    handle: ConversationHandle, snapshot: ConversationSnapshot, *, price: Pricer | None = None
) -> list[TurnReplay]:
    """Every turn of the conversation ``snapshot`` holds, oldest first, each read back from its turn log."""
    sources = sources_of(snapshot)
    turns: Sequence[TurnRecord] = snapshot.turns
    return [replay_turn(await handle.read_turn_log(turn.turn_id), sources, price=price) for turn in turns]
