"""Request and response bodies of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Request bodies refuse unknown fields."""

    model_config = ConfigDict(extra="forbid")


class CreateConversation(Strict):
    """``POST …/conversations``."""

    title: str | None = Field(None, max_length=200)
    bundle: str | None = None


class ConversationOut(BaseModel):
    """A conversation in lists and after creation."""

    id: str
    title: str | None
    title_source: Literal["user", "summary", "message"] | None = Field(
        None, description="who set the title: the user, the summarizer, or the first message (provisional)"
    )
    bundle: str | None
    created_at: datetime
    updated_at: datetime


class ConversationPage(BaseModel):
    """A page of conversations, most recent first; pass ``next_before`` as ``before`` for the next page."""

    items: list[ConversationOut]
    next_before: datetime | None


class StartTurn(Strict):
    """``POST …/turns`` as JSON (send multipart with a ``message`` field to attach files)."""

    message: str = Field(min_length=1, max_length=100_000)
    bundle: str | None = None
    turn_id: str | None = Field(None, pattern=r"^turn_[A-Za-z0-9_-]{1,64}$")
    timezone: str = "UTC"


class TurnStarted(BaseModel):
    """Answer to starting a turn."""

    turn_id: str
    events_url: str


class LiveEventIn(Strict):
    """``POST …/turns/{turn_id}/events`` as JSON (or multipart, ``kind`` and ``message`` fields, to attach files)."""

    kind: Literal["followup", "steer"]
    message: str = Field(min_length=1, max_length=100_000)


class LiveEventAccepted(BaseModel):
    """Where a live event went: into the running turn (``path`` records it), or it started the next turn."""

    turn_id: str = Field(description="the turn that takes the event: the running one, or the one it started")
    kind: Literal["followup", "steer"]
    started_turn: bool = Field(description="true when no turn was running and the event started this one")
    path: str | None = Field(None, description="the logical path of the event's block in the running turn")
    events_url: str


class ConversationPatch(Strict):
    """``PATCH /conversations/{id}``: what the user may change."""

    title: str = Field(min_length=1, max_length=200)


class FeedbackIn(Strict):
    """``POST …/turns/{turn_id}/feedback``."""

    reaction: Literal["ok", "not_ok", "neutral"]
    text: str = Field("", max_length=5000)


class Citation(BaseModel):
    """A source an answer cites."""

    sid: int
    url: str
    title: str


class FeedbackOut(BaseModel):
    """Feedback on a turn."""

    reaction: str
    text: str
    origin: str
    created_at: datetime


class ToolCallOut(BaseModel):
    """A tool call of a turn, as its card showed it live."""

    seq: int = Field(description="where in the turn it happened (orders tools and live events)")
    call_id: str
    tool_id: str
    params: Any
    ok: bool | None = Field(description="null: the call never returned (the turn was stopped or interrupted)")
    summary: str | None = Field(description="what the tool.result event showed")
    code: str | None = Field(None, description="the program of an exec.python call")
    artifacts: list[dict[str, Any]] = Field(default_factory=list, description="files it produced: path, mime, size")


class LiveEventOut(BaseModel):
    """A follow-up or steer the user sent while the turn ran."""

    seq: int
    kind: Literal["followup", "steer"]
    message: str
    attachments: list[dict[str, Any]]


class NoticeOut(BaseModel):
    """A notice the turn showed."""

    code: str
    message: str


class TurnUsageOut(BaseModel):
    """The tokens the turn used, and their cost by the price table (null: the model has no price)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cost_usd: float | None


class TurnOut(BaseModel):
    """One turn of a conversation: what a client needs to show it again as it was shown live."""

    turn_id: str
    state: str = Field(description="completed, cancelled (stopped by the user), failed, interrupted, running, accepted")
    outcome: str | None = Field(None, description="how the loop ended it: completed, exited, iteration_limit, …")
    prompt: str | None
    answer: str | None = Field(description="with citations as markdown links; a stopped turn's partial answer")
    partial: bool = Field(False, description="the answer is what a stopped turn had written when it was stopped")
    followups: list[str]
    citations: list[Citation]
    attachments: list[dict[str, Any]]
    reasoning: list[str] = Field(default_factory=list, description="the thinking of each round, in order")
    tools: list[ToolCallOut] = Field(default_factory=list)
    live_events: list[LiveEventOut] = Field(default_factory=list)
    notices: list[NoticeOut] = Field(default_factory=list)
    artifacts: list[dict[str, Any]] = Field(default_factory=list, description="files the turn produced")
    status_message: str | None = Field(None, description="why the turn did not simply complete")
    usage: TurnUsageOut | None = None
    feedback: list[FeedbackOut]
    started_at: datetime | None
    ended_at: datetime | None = None


class ConversationDetail(ConversationOut):
    """A conversation with its turns."""

    turns: list[TurnOut]


class WidgetOut(BaseModel):
    """A widget of a bundle."""

    alias: str
    title: str
    icon: str | None
    url: str


class ToolThreadsOut(BaseModel):
    """The threads the bundle's sync tools run in for this tenant."""

    state: str = Field(
        description="ok, or degraded: its stuck threads reached degraded_at; sync tool calls are "
        "refused with tool_pool_exhausted until they return"
    )
    size: int
    degraded_at: int
    busy: int = Field(description="threads held by calls, stuck ones included")
    stuck: int = Field(description="threads whose call timed out or was cancelled and that have not returned")
    waiting: int = Field(description="calls waiting for a thread")


class BundleLoadErrorOut(BaseModel):
    """Why the bundle's last load failed. ``file`` and ``line`` (in the bundle's code) are shown to admin keys only;
    others get the code and a message without the host's file paths."""

    generation: int | None = Field(description="the generation that failed to load (null: the props failed)")
    serving_generation: int | None = Field(description="the generation that still serves (null: none does)")
    code: str
    message: str
    file: str | None = None
    line: int | None = None


class BundleOut(BaseModel):
    """A bundle the caller may use."""

    id: str
    title: str
    description: str
    version: str | None
    default: bool
    state: str = Field(
        description="loaded, degraded (loaded, but its sync tools are refused for this tenant: see "
        "tool_threads), failed or not_loaded"
    )
    widgets: list[WidgetOut]
    tool_threads: ToolThreadsOut
    load_error: BundleLoadErrorOut | None = Field(
        None,
        description="the last load failed: for a failed bundle, to every caller; while an older generation still "
        "serves (a reload failed), to admin keys only",
    )


class FeedbackReport(BaseModel):
    """Feedback in a period."""

    turns: list[dict[str, Any]]
    total: int
    satisfaction_rate: float | None


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code``, a message that says what to do, and ``details`` by code."""

    code: str
    message: str
    details: dict[str, Any]


class ErrorResponse(BaseModel):
    """Every error the API answers: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail


class Readiness(BaseModel):
    """``/readyz``: ready, and what each check found."""

    ready: bool
    checks: dict[str, Any]
