"""Conversations, turns, events, feedback and files (SPEC §5.2, §9)."""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from berth.api.attachments import check_attachment, scan_attachments, sniff_mime
from berth.api.deps import conversation_scope, scoped_caller, services
from berth.api.downloads import content_type, disposition, sniffed_stream
from berth.api.errors import SCOPED_ERRORS, invalid_request
from berth.api.schemas import (
    Citation,
    ConversationDetail,
    ConversationOut,
    ConversationPage,
    ConversationPatch,
    CreateConversation,
    FeedbackIn,
    FeedbackOut,
    FeedbackReport,
    LiveEventAccepted,
    LiveEventIn,
    StartTurn,
    TurnOut,
    TurnStarted,
)
from berth.api.sse import parse_last_event_id
from berth.runtime.blocks import BlockType
from berth.runtime.live import LiveEvent
from berth.runtime.paths import FilePath, LogicalPathError, ToolCallPath, parse_path
from berth.runtime.persistence import restore_conversation
from berth.runtime.sources import citation_lookup
from berth.runtime.tool_calls import full_result_artifact
from berth.storage.conversations import StorageError
from berth.storage.meta import ConversationMeta, Feedback
from berth.storage.scope import OwnerScope
from berth.streaming import cited_sids, render_citations
from berth.turns.callers import Caller
from berth.turns.errors import ServiceError, not_found
from berth.turns.running import events_url, new_id
from berth.turns.services import HostServices

router = APIRouter(prefix="/v1/{tenant}/{project}", tags=["conversations"], responses=SCOPED_ERRORS)
Services = Annotated[HostServices, Depends(services)]
ScopedCaller = Annotated[Caller, Depends(scoped_caller)]


def _out(meta: ConversationMeta) -> ConversationOut:
    return ConversationOut(
        id=meta.scope.conversation_id,
        title=meta.title,
        title_source=meta.title_source,
        bundle=meta.bundle,
        created_at=meta.created_at,
        updated_at=meta.updated_at,
    )


async def _conversation(
    host: HostServices, who: Caller, tenant: str, project: str, conversation_id: str
) -> ConversationMeta:
    scope = conversation_scope(who, tenant, project, conversation_id)
    assert host.meta is not None
    meta = await host.meta.get_conversation(scope)
    if meta is None:
        raise not_found(f"conversation {conversation_id}")
    return meta


def _bundle_for(host: HostServices, tenant: str, project: str, requested: str | None, fallback: str | None) -> str:
    visible = host.config.descriptors.scope_bundles(tenant, project)
    bundle = requested or fallback or visible.default_bundle or (visible.bundles[0] if visible.bundles else None)
    if bundle is None or bundle not in visible.bundles:
        raise ServiceError(404, "bundle_not_found", f"bundle {bundle!r} is not available in {tenant}/{project}")
    return bundle


@router.post("/conversations", status_code=201, response_model=ConversationOut)
async def create_conversation(
    tenant: str, project: str, body: CreateConversation, who: ScopedCaller, host: Services
) -> ConversationOut:
    """Create a conversation (optionally with a title and a bundle)."""
    bundle = _bundle_for(host, tenant, project, body.bundle, None) if body.bundle else None
    now = datetime.now(UTC)
    scope = conversation_scope(who, tenant, project, new_id("c"))
    meta = ConversationMeta(scope, body.title, bundle, now, now, "user" if body.title else None)
    assert host.meta is not None
    await host.meta.create_conversation(meta)
    return _out(meta)


@router.patch("/conversations/{conversation_id}", response_model=ConversationOut)
async def update_conversation(
    tenant: str, project: str, conversation_id: str, body: ConversationPatch, who: ScopedCaller, host: Services
) -> ConversationOut:
    """Rename a conversation; the summarizer never replaces a title the user gave."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    assert host.meta is not None
    await host.meta.set_title(meta.scope, body.title, source="user")
    renamed = await host.meta.get_conversation(meta.scope)
    assert renamed is not None
    return _out(renamed)


@router.get("/conversations", response_model=ConversationPage)
async def list_conversations(
    tenant: str,
    project: str,
    who: ScopedCaller,
    host: Services,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before: datetime | None = None,
) -> ConversationPage:
    """The caller's conversations, most recently active first."""
    assert host.meta is not None
    owner = OwnerScope(tenant=tenant, project=project, user_id=who.user_id)
    items = await host.meta.list_conversations(owner, limit=limit + 1, before=before)
    page = items[:limit]
    return ConversationPage(
        items=[_out(m) for m in page], next_before=page[-1].updated_at if len(items) > limit else None
    )


@router.get("/conversations/{conversation_id}", response_model=ConversationDetail)
async def get_conversation(
    tenant: str, project: str, conversation_id: str, who: ScopedCaller, host: Services
) -> ConversationDetail:
    """A conversation with its turns: prompts, answers, citations, attachments, feedback."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    assert host.store is not None and host.meta is not None
    handle = host.store.conversation(meta.scope)
    snapshot = await handle.load()
    restored = (
        await restore_conversation(handle, now=datetime.now(UTC)) if snapshot.version or snapshot.uncommitted else None
    )
    feedback = await host.meta.feedback_for(meta.scope)
    states = {turn.turn_id: turn for turn in snapshot.turns}
    turns: list[TurnOut] = []
    if restored is not None:
        lookup = citation_lookup(restored.sources)
        for layout in restored.timeline.turn_layouts():
            blocks = restored.timeline.blocks[layout.start : layout.end]
            prompt = next((b.text for b in blocks if b.type == BlockType.USER_PROMPT), None)
            answer = next((b.text for b in blocks if b.type == BlockType.ASSISTANT_COMPLETION), None)
            followups = next((b.data for b in blocks if b.type == BlockType.ASSISTANT_FOLLOWUPS), None)
            citations = [
                Citation(sid=row.sid, url=row.url, title=row.title)
                for sid in cited_sids(answer or "")
                if (row := restored.sources.get(sid)) is not None
            ]
            record = states.get(layout.turn_id)
            turns.append(
                TurnOut(
                    turn_id=layout.turn_id,
                    state=record.state if record else "completed",
                    prompt=prompt,
                    answer=render_citations(answer, lookup) if answer else answer,
                    followups=_followups(followups),
                    citations=citations,
                    attachments=[
                        {
                            "name": b.meta.get("name"),
                            "mime": b.mime,
                            "size": b.meta.get("size"),
                            "path": b.path,
                            **(
                                {"sent": b.meta["sent"], "sent_note": b.meta.get("sent_note")}
                                if b.meta.get("sent")
                                else {}
                            ),
                        }
                        for b in blocks
                        if b.type == BlockType.USER_ATTACHMENT
                    ],
                    feedback=[
                        FeedbackOut(reaction=f.reaction, text=f.text, origin=f.origin, created_at=f.created_at)
                        for f in feedback
                        if f.turn_id == layout.turn_id
                    ],
                    started_at=record.started_at if record else None,
                )
            )
    return ConversationDetail(**_out(meta).model_dump(), turns=turns)


def _followups(data: object) -> list[str]:
    items = data.get("followups") if isinstance(data, dict) else None
    return [str(item) for item in items] if isinstance(items, list) else []


Body = TypeVar("Body", bound=BaseModel)
Files = tuple[tuple[str, str, bytes], ...]


async def _body_with_files(request: Request, host: HostServices, model: type[Body]) -> tuple[Body, Files]:
    """A body as JSON, or as multipart fields with files (each checked; the request's size is held to the
    tenant's limit by the app's middleware)."""
    limits = host.config.descriptors.gateway
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form(max_files=20, max_fields=20)
        fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        attachments = []
        total = 0
        for _, upload in form.multi_items():
            if isinstance(upload, str):
                continue
            data = await upload.read()
            total += len(data)
            if total > limits.attachments.max_message_bytes:
                raise ServiceError(
                    413, "attachments_too_large", f"attachments exceed {limits.attachments.max_message_bytes} bytes"
                )
            name, mime = check_attachment(upload.filename or "attachment", data, limits.attachments)
            attachments.append((name, mime, data))
        if attachments and limits.attachments.antivirus is not None:
            await scan_attachments(attachments, limits.attachments.antivirus)
        try:
            return model.model_validate(fields), tuple(attachments)
        except ValidationError as exc:
            raise invalid_request(exc.errors()) from None
    if not content_type.startswith("application/json"):
        raise ServiceError(415, "unsupported_media_type", "send application/json, or multipart/form-data with files")
    body = await request.body()
    try:
        return model.model_validate_json(body), ()
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None


def _content_with_files(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that takes ``model`` as JSON, or as multipart with files."""
    schema = model.model_json_schema()
    return {
        "application/json": {"schema": schema},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": schema.get("required", []),
                "properties": {
                    **schema["properties"],
                    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                },
            }
        },
    }


START_TURN_CONTENT = _content_with_files(StartTurn)


@router.post(
    "/conversations/{conversation_id}/turns",
    status_code=202,
    response_model=TurnStarted,
    responses={
        200: {
            "description": "with `Accept: text/event-stream`: the turn's events, as from `events_url` "
            "(which `Content-Location` names, for a resume with `Last-Event-ID`)",
            "content": {"text/event-stream": {}},
        }
    },
    # the body is read by the route itself (JSON or multipart, under the tenant's size limit): documented here
    openapi_extra={"requestBody": {"required": True, "content": START_TURN_CONTENT}},
)
async def start_turn(
    tenant: str, project: str, conversation_id: str, request: Request, who: ScopedCaller, host: Services
) -> TurnStarted | StreamingResponse:
    """Start a turn; it runs in the background and streams its events at ``events_url``.

    A client that accepts ``text/event-stream`` gets the events in this response instead (one request per
    turn); a dropped stream resumes from ``events_url`` like any other.
    """
    meta = await _conversation(host, who, tenant, project, conversation_id)
    body, attachments = await _body_with_files(request, host, StartTurn)
    bundle = _bundle_for(host, tenant, project, body.bundle, meta.bundle)
    assert host.store is not None
    if body.turn_id is not None:
        snapshot = await host.store.conversation(meta.scope).load()
        if any(turn.turn_id == body.turn_id for turn in snapshot.turns):
            raise ServiceError(409, "turn_exists", f"turn id {body.turn_id} is already used in this conversation")
    running = await host.start_turn(
        meta.scope, bundle, body.message, turn_id=body.turn_id, attachments=attachments, user_timezone=body.timezone
    )
    url = events_url(meta.scope, running.turn_id)
    if "text/event-stream" in request.headers.get("accept", ""):
        return _event_stream(running.log.frames(), {"Content-Location": url})
    return TurnStarted(turn_id=running.turn_id, events_url=url)


def _event_stream(frames: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    """A turn's SSE frames as a response (not cached, not buffered by proxies)."""
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )


_RESUME_HEADER = "the id of the last event received (`<turn_id>:<n>`): the stream resumes after it"
_RESUME_QUERY = "the same as the `Last-Event-ID` header, for clients that cannot set headers (the header wins)"


@router.get(
    "/conversations/{conversation_id}/turns/{turn_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def turn_events(
    tenant: str,
    project: str,
    conversation_id: str,
    turn_id: str,
    who: ScopedCaller,
    host: Services,
    resume_after: Annotated[str | None, Header(alias="Last-Event-ID", description=_RESUME_HEADER)] = None,
    last_event_id: Annotated[str | None, Query(description=_RESUME_QUERY)] = None,
) -> StreamingResponse:
    """The turn's events as SSE; reconnect with ``Last-Event-ID`` to resume without loss or duplicates.

    A turn this process does not hold (it ran before a restart) answers with its last event from the store:
    ``turn.failed {code: interrupted}`` when the process serving it died, else how it ended; one that another
    live process on the same storage root runs answers 409 ``turn_elsewhere``. An id whose sequence number has
    more than 18 digits is refused: 400 ``last_event_id_invalid``.
    """
    scope = conversation_scope(who, tenant, project, conversation_id)
    if resume_after:
        after = parse_last_event_id(turn_id, resume_after)
    else:
        after = parse_last_event_id(turn_id, last_event_id, where="last_event_id")
    return _event_stream(await host.turn_event_frames(scope, turn_id, after))


@router.post(
    "/conversations/{conversation_id}/turns/{turn_id}/events",
    status_code=202,
    response_model=LiveEventAccepted,
    openapi_extra={"requestBody": {"required": True, "content": _content_with_files(LiveEventIn)}},
)
async def send_live_event(
    tenant: str, project: str, conversation_id: str, turn_id: str, request: Request, who: ScopedCaller, host: Services
) -> LiveEventAccepted:
    """Send a follow-up or a steer to a running turn (SPEC §4.1).

    The event is recorded in the turn at once, streamed to the turn's subscribers as ``user.followup`` /
    ``user.steer``, and taken into account at the loop's next decision; a steer may also stop the answer
    being written (``react.steer``). When the turn has ended, the event starts the next turn: the answer
    says which (``started_turn``).
    """
    meta = await _conversation(host, who, tenant, project, conversation_id)
    body, attachments = await _body_with_files(request, host, LiveEventIn)
    bundle = _bundle_for(host, tenant, project, None, meta.bundle)
    event = LiveEvent(kind=body.kind, message=body.message, attachments=attachments)
    delivery = await host.deliver_live_event(meta.scope, turn_id, event, bundle_id=bundle)
    return LiveEventAccepted(
        turn_id=delivery.turn_id,
        kind=body.kind,
        started_turn=delivery.started_turn,
        path=delivery.path,
        events_url=events_url(meta.scope, delivery.turn_id),
    )


@router.post("/conversations/{conversation_id}/turns/{turn_id}/cancel", status_code=202)
async def cancel_turn(
    tenant: str, project: str, conversation_id: str, turn_id: str, who: ScopedCaller, host: Services
) -> dict[str, Any]:
    """Cancel a running turn: the model stream and the running tool stop; the turn is recorded as cancelled."""
    cancelled = await host.cancel_turn(conversation_scope(who, tenant, project, conversation_id), turn_id)
    return {"turn_id": turn_id, "cancelled": cancelled}


@router.post("/conversations/{conversation_id}/turns/{turn_id}/feedback", response_model=FeedbackOut)
async def give_feedback(
    tenant: str, project: str, conversation_id: str, turn_id: str, body: FeedbackIn, who: ScopedCaller, host: Services
) -> FeedbackOut:
    """Record the user's reaction to a turn (replaces their earlier one)."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    assert host.store is not None and host.meta is not None
    snapshot = await host.store.conversation(meta.scope).load()
    if not any(turn.turn_id == turn_id for turn in snapshot.turns):
        raise not_found(f"turn {turn_id}")
    feedback = Feedback(meta.scope, turn_id, body.reaction, body.text, "user", datetime.now(UTC))
    await host.meta.put_feedback(feedback)
    return FeedbackOut(reaction=feedback.reaction, text=feedback.text, origin="user", created_at=feedback.created_at)


@router.get("/feedback", response_model=FeedbackReport)
async def feedback_report(
    tenant: str,
    project: str,
    who: ScopedCaller,
    host: Services,
    start: Annotated[datetime, Query(alias="from")],
    end: Annotated[datetime, Query(alias="to")],
) -> FeedbackReport:
    """Turns with feedback in ``[from, to)`` and the satisfaction rate (ok / (ok + not_ok))."""
    if not who.is_admin and who.tenant == "*":
        raise ServiceError(403, "forbidden", "feedback reports need a tenant key or the admin role")
    assert host.meta is not None
    rows = await host.meta.feedback_between(tenant, project, start, end)
    rows = [r for r in rows if who.is_admin or r.scope.user_id == who.user_id]
    ok = sum(r.reaction == "ok" for r in rows)
    not_ok = sum(r.reaction == "not_ok" for r in rows)
    turns = [
        {
            "conversation_id": r.scope.conversation_id,
            "turn_id": r.turn_id,
            "reaction": r.reaction,
            "text": r.text,
            "origin": r.origin,
            "created_at": r.created_at.isoformat(),
        }
        for r in rows
    ]
    return FeedbackReport(turns=turns, total=len(rows), satisfaction_rate=(ok / (ok + not_ok)) if ok + not_ok else None)


@router.get(
    "/conversations/{conversation_id}/files/{path:path}",
    response_class=Response,
    responses={
        200: {
            "description": "the file's bytes, typed by its name; `Content-Disposition` names it (RFC 6266)",
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        307: {"description": "a presigned URL of the object store to download it from (`presigned_downloads`)"},
    },
)
async def conversation_file(
    tenant: str, project: str, conversation_id: str, path: str, who: ScopedCaller, host: Services
) -> Response:
    """A file the user may see: a turn's ``outputs/`` or an attachment (``fi:<turn>.outputs/<rel>``), or the whole
    text of a tool result the timeline holds capped (``tc:<turn>.<call>.result``)."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    try:
        parsed = parse_path(path, conversation_id=conversation_id)
    except LogicalPathError as exc:
        raise ServiceError(400, exc.code, str(exc)) from None
    if isinstance(parsed, ToolCallPath) and parsed.part == "result":
        name = f"{parsed.turn_id}.{parsed.call_id}.result.txt"
        stored = full_result_artifact(parsed.turn_id, parsed.call_id)
    elif isinstance(parsed, FilePath) and parsed.area in ("outputs", "attachments") and parsed.rel:
        name = parsed.rel.rsplit("/", 1)[-1]
        stored = f"{parsed.turn_id}/{parsed.area}/{parsed.rel}"
    else:
        raise ServiceError(
            404,
            "not_found",
            "only fi:<turn>.outputs/…, fi:<turn>.attachments/… and tc:<turn>.<call>.result can be downloaded",
        )
    named_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    try:
        source = await host.file_source(meta.scope, stored, filename=name, mime=named_type)
    except StorageError:
        raise not_found(f"file {path}") from None
    if source.url is not None:  # a presigned URL of the object store (another origin, always an attachment)
        return RedirectResponse(source.url, status_code=307, headers={"Cache-Control": "no-store"})
    # the type the bytes show, never the name's: an uploaded evil.html is text, saved and never rendered
    if source.chunks is not None:
        mime, chunks = await sniffed_stream(source.chunks)
        headers = {"Content-Disposition": disposition(mime, name)}
        return StreamingResponse(chunks, media_type=content_type(mime), headers=headers)
    data = source.data or b""
    mime = sniff_mime(data)
    headers = {"Content-Disposition": disposition(mime, name)}
    return Response(data, media_type=content_type(mime), headers=headers)


__all__ = ["router"]
