"""Conversations, turns, events, feedback and files (SPEC §5.2, §9)."""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.routing import Match, Route
from starlette.types import Scope

from berth.api.attachments import check_attachment, scan_attachments, sniff_mime
from berth.api.deps import conversation_scope, host_services, scoped_caller, services
from berth.api.downloads import content_type, disposition, sniffed_stream
from berth.api.errors import SCOPED_ERRORS, invalid_request
from berth.api.schemas import (
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
from berth.api.sse import EventStreamResponse, parse_last_event_id
from berth.runtime.live import LiveEvent
from berth.runtime.paths import FilePath, LogicalPathError, ToolCallPath, parse_path
from berth.runtime.tool_calls import full_result_artifact
from berth.storage.conversations import StorageError
from berth.storage.meta import ConversationMeta, Feedback
from berth.storage.scope import OwnerScope
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


@router.delete("/conversations/{conversation_id}", status_code=204, response_class=Response)
async def delete_conversation(
    tenant: str, project: str, conversation_id: str, who: ScopedCaller, host: Services
) -> Response:
    """Delete a conversation and everything of it: turns, events, files, memory, feedback, title (its usage stays in
    the totals, anonymous). A running turn is cancelled first. Another user's conversation is a 404, as is one
    deleted already."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    if not await host.delete_conversation(meta.scope):
        raise not_found(f"conversation {conversation_id}")
    return Response(status_code=204)


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
    """A conversation with its turns as they were shown live: prompts and attachments, reasoning, tool calls and
    their outcomes, follow-ups and steers, notices, files produced, answers (a stopped turn's partial answer,
    marked ``partial``) with citations, follow-up suggestions, usage and feedback."""
    meta = await _conversation(host, who, tenant, project, conversation_id)
    assert host.meta is not None
    feedback = await host.meta.feedback_for(meta.scope)
    turns = [
        TurnOut.model_validate(
            {
                **asdict(replay),
                "feedback": [
                    FeedbackOut(reaction=f.reaction, text=f.text, origin=f.origin, created_at=f.created_at)
                    for f in feedback
                    if f.turn_id == replay.turn_id
                ],
            }
        )
        for replay in await host.conversation_replays(meta.scope)
    ]
    return ConversationDetail(**_out(meta).model_dump(), turns=turns)


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

    This route documents the API; requests are served by :class:`StartTurnRoute`, which runs the same
    :func:`_start_turn` without FastAPI's per-request dependency solving.
    """
    return await _start_turn(tenant, project, conversation_id, request, who, host)


async def _start_turn(
    tenant: str, project: str, conversation_id: str, request: Request, who: Caller, host: HostServices
) -> TurnStarted | StreamingResponse:
    meta = await _conversation(host, who, tenant, project, conversation_id)
    body, attachments = await _body_with_files(request, host, StartTurn)
    bundle = _bundle_for(host, tenant, project, body.bundle, meta.bundle)
    assert host.store is not None
    if body.turn_id is not None:
        snapshot = await host.store.conversation(meta.scope).load()
        if any(turn.turn_id == body.turn_id for turn in snapshot.turns):
            raise ServiceError(409, "turn_exists", f"turn id {body.turn_id} is already used in this conversation")
    running = await host.start_turn(
        meta.scope,
        bundle,
        body.message,
        turn_id=body.turn_id,
        attachments=attachments,
        user_timezone=body.timezone,
        provisional_title=meta.title is None,
    )
    url = events_url(meta.scope, running.turn_id)
    if "text/event-stream" in request.headers.get("accept", ""):
        return _event_stream(running.log.frames(), {"Content-Location": url})
    return TurnStarted(turn_id=running.turn_id, events_url=url)


class StartTurnRoute(Route):
    """``POST …/conversations/{conversation_id}/turns`` as a plain Starlette route, placed before the API's routes.

    Every turn starts here, so the per-request work of the FastAPI route around the same code — finding the route
    through the included routers (twice), solving its dependencies, validating and encoding the response model —
    was a tenth of the server's CPU per streamed turn. This route calls the same dependency functions and
    :func:`_start_turn` directly; errors go through the app's handlers as before. The FastAPI route stays, for
    the OpenAPI document (and any request this one leaves to it: none).
    """

    def __init__(self) -> None:
        super().__init__(
            "/v1/{tenant}/{project}/conversations/{conversation_id}/turns",
            endpoint=self._endpoint,
            methods=["POST"],
            include_in_schema=False,
            name="start_turn",
        )

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """As :class:`~starlette.routing.Route`, and the route names itself in the scope (the latency metric's
        ``route`` label reads it, as it reads a FastAPI route's)."""
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope

    @staticmethod
    async def _endpoint(request: Request) -> Response:
        params = request.path_params
        tenant, project = params["tenant"], params["project"]
        who = await scoped_caller(request, tenant, project)
        started = await _start_turn(tenant, project, params["conversation_id"], request, who, host_services(request))
        if isinstance(started, StreamingResponse):
            return started
        return Response(started.model_dump_json(), status_code=202, media_type="application/json")


def _event_stream(frames: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    """A turn's SSE frames as a response (not cached, not buffered by proxies)."""
    return EventStreamResponse(
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


__all__ = ["StartTurnRoute", "router"]
