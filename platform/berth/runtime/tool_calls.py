"""One tool call of a round: validate the params, run the tool (with its timeout), turn the result into blocks.

A result joins the sources pool when it carries sources (their SIDs are shown next to it); a result over the
preview size (``react.result_preview_chars``) is stored and shown as a bounded preview, and kept whole as a file of
the turn (:func:`full_result_artifact`), stored as the call ends: ``react.read`` and the files route read it.

What a tool returns or raises enters the turn here, so known secret values are masked here
(:mod:`berth.config.redaction`): a value a tool revealed and then echoed (in an error, a result, a summary, a
source) reaches the model, the stored blocks and the events as ``***``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from berth.config.redaction import redact, redact_value, secret_needles
from berth.runtime.blocks import Block, BlockType, make_block
from berth.runtime.events import EventSink, TurnEvent
from berth.runtime.paths import ToolCallPath
from berth.runtime.protocol import Action, Decision, ProtocolNotice
from berth.runtime.sources import Source, source_line
from berth.runtime.toolbox import ToolBox, ToolNotice
from berth.runtime.turn import TurnState
from berth.storage.conversations import ArtifactWrite
from berth.tools.results import ToolOutput

log = logging.getLogger(__name__)


def full_result_artifact(turn_id: str, call_id: str) -> str:
    """Where the whole text of the capped result of call ``call_id`` is kept among the turn's files."""
    return f"{turn_id}/results/{call_id}.result.txt"


async def execute_tool_call(
    action: Action,
    decision: Decision,
    call_id: str,
    state: TurnState,
    toolbox: ToolBox,
    emit: EventSink,
    notices: list[ProtocolNotice],
    *,
    clock: Callable[[], datetime],
    preview_chars: int,
) -> list[Block]:
    """Validate and run one tool call; return its blocks (call, code, result or notice, plan snapshots).

    Failures the model can act on become a ``react.notice`` with a stable code; the full text of a
    result over ``preview_chars`` stays readable at its ``tc:`` path (``state.full_results``).
    """
    assert action.tool_call is not None
    tool_id, params = action.tool_call.tool_id, action.tool_call.params
    now = clock()
    turn_id = state.turn_id
    call_block = make_block(
        BlockType.REACT_TOOL_CALL,
        ToolCallPath(turn_id, call_id, "call"),
        now,
        "assistant",
        mime="application/json",
        data={"tool_id": tool_id, "params": params},
        call_id=call_id,
    )
    blocks = [call_block]
    if decision.code is not None:
        blocks.append(
            Block(
                type=BlockType.REACT_TOOL_CODE,
                path=str(ToolCallPath(turn_id, call_id, "code")),
                turn_id=turn_id,
                ts=now,
                author="assistant",
                mime="text/x-python",
                text=decision.code,
                call_id=call_id,
            )
        )
    await emit(TurnEvent("tool.call", {"call_id": call_id, "tool_id": tool_id, "params": params}))
    tool = toolbox.get(tool_id)

    def notice_block(code: str, message: str) -> Block:
        return Block(
            type=BlockType.REACT_NOTICE,
            path=str(ToolCallPath(turn_id, call_id, "notice")),
            turn_id=turn_id,
            ts=clock(),
            author="runtime",
            mime="application/json",
            data={"code": code, "message": message, "tool_id": tool_id},
            call_id=call_id,
        )

    async def failed(code: str, message: str) -> list[Block]:
        message = redact(message)
        await emit(TurnEvent("notice", {"code": code, "message": message, "call_id": call_id}))
        await emit(
            TurnEvent(
                "tool.result",
                {"call_id": call_id, "tool_id": tool_id, "ok": False, "summary": f"{code}: {message}", "paths": []},
            )
        )
        return [*blocks, notice_block(code, message)]

    if tool is None:
        return await failed(*toolbox.refusal(tool_id))
    try:
        validated = tool.params_model.model_validate(params)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
        return await failed("tool_params_invalid", f"params of {tool_id} do not match its schema: {problems}")
    state.current_call_id = call_id
    state.current_code = decision.code
    state.pending_blocks.clear()
    outputs_before = state.workspace.outputs()
    try:
        run = tool.run(validated, state)
        value = await (asyncio.wait_for(run, tool.timeout_s) if tool.timeout_s else run)
    except ToolNotice as notice:
        return await failed(notice.code, notice.message)
    except TimeoutError:
        return await failed("tool_timeout", f"{tool_id} did not finish within {tool.timeout_s:g} s")
    except Exception as exc:
        log.warning("tool %s failed", tool_id, exc_info=True)
        return await failed("tool_failed", f"{tool_id} raised {type(exc).__name__}: {exc}")
    output = _masked(value if isinstance(value, ToolOutput) else ToolOutput(value=value))
    produced = state.workspace.outputs_since(outputs_before)
    if produced and state.store_files is not None:  # stored before announced: a download never finds nothing
        await state.store_files(state.workspace.writes_of(path for path, _, _ in produced))
    for path, mime, size in produced:
        await emit(TurnEvent("artifact", {"call_id": call_id, "path": path, "mime": mime, "size": size}))
    sids: tuple[int, ...] = ()
    if output.sources:
        merge = state.sources.merge(
            Source(
                url=s.url,
                title=s.title,
                text=s.text,
                mime=s.mime,
                source_type=s.source_type,
                published_at=s.published_at,
                fetched_at=now,
            )
            for s in output.sources
        )
        state.sources, sids = merge.pool, merge.sids
        await emit(
            TurnEvent(
                "citation.sources",
                {
                    "sids": list(sids),
                    "sources": [
                        {"sid": sid, "url": row.url, "title": row.title}
                        for sid in sids
                        if (row := state.sources.get(sid))
                    ],
                },
            )
        )
    text = output.value if isinstance(output.value, str) else json.dumps(output.value, ensure_ascii=False, default=str)
    result_at = ToolCallPath(turn_id, call_id, "result")
    result_path = str(result_at)
    shown = text
    if len(text) > preview_chars:
        state.full_results[result_path] = text
        if state.store_files is not None:  # kept whole now: downloadable at once, and it outlives the process
            await state.store_files((ArtifactWrite(full_result_artifact(turn_id, call_id), text.encode("utf-8")),))
            state.stored_results.add(result_path)
        shown = (
            f"{text[:preview_chars]}\n… [{len(text)} characters in all; read the rest with "
            f"react.read(paths=['{result_path}'], lines='1-200')]"
        )
    if sids:
        shown += "\nsources: " + ", ".join(f"[[S:{sid}]]" for sid in sids)
        # each row once, where it arrived: from the next turn on this is cached history, and the SOURCES POOL
        # rebuilt every round leaves it out
        rows = (state.sources.get(sid) for sid in dict.fromkeys(sids))
        shown += "".join(f"\n{source_line(row)}" for row in rows if row is not None)
    ok = not output.is_error
    meta: dict[str, Any] = {"tool_id": tool_id, "ok": ok, "size": len(text), "sids": list(sids)}
    summary = output.summary or text[:200]
    meta["summary"] = summary  # what the tool.result event shows, for a client that replays the turn later
    if produced:
        meta["artifacts"] = [{"path": path, "mime": mime, "size": size} for path, mime, size in produced]
    if state.reopened_media:  # react.read shows an image again: the renderer puts it after this result
        media_path, media_mime = state.reopened_media[0]
        meta.update(media="image", media_path=media_path, media_mime=media_mime)
        state.reopened_media.clear()
    blocks.append(
        make_block(BlockType.REACT_TOOL_RESULT, result_at, clock(), "tool", text=shown, call_id=call_id, meta=meta)
    )
    blocks.extend(state.pending_blocks)
    state.pending_blocks.clear()
    await emit(
        TurnEvent(
            "tool.result",
            {
                "call_id": call_id,
                "tool_id": tool_id,
                "ok": ok,
                "summary": summary,
                "paths": [result_path],
            },
        )
    )
    if output.is_error:
        notices.append(ProtocolNotice("tool_failed", f"{tool_id} reported an error; see {result_path}"))
    return blocks


def _masked(output: ToolOutput) -> ToolOutput:
    """``output`` with known secret values masked in its value, summary and sources (images are left as they are)."""
    if not secret_needles():
        return output
    return output.model_copy(
        update={
            "value": redact_value(output.value),
            "summary": redact(output.summary) if output.summary is not None else None,
            "sources": [
                source.model_copy(
                    update={"url": redact(source.url), "title": redact(source.title), "text": redact(source.text)}
                )
                for source in output.sources
            ],
        }
    )
