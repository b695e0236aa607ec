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


class TurnOut(BaseModel):
    """One turn of a conversation."""

    turn_id: str
    state: str
    prompt: str | None
    answer: str | None
    followups: list[str]
    citations: list[Citation]
    attachments: list[dict[str, Any]]
    feedback: list[FeedbackOut]
    started_at: datetime | None


class ConversationDetail(ConversationOut):
    """A conversation with its turns."""

    turns: list[TurnOut]


class WidgetOut(BaseModel):
    """A widget of a bundle."""

    alias: str
    title: str
    icon: str | None
    url: str


class BundleOut(BaseModel):
    """A bundle the caller may use."""

    id: str
    title: str
    description: str
    version: str | None
    default: bool
    state: str
    widgets: list[WidgetOut]


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


class UsageRow(BaseModel):
    """Usage summed over a group of model calls (or over the whole period: the report's ``total``).

    ``cost_usd`` sums the calls whose model has a price in ``platform.models.prices``; it is null when none
    has, and ``unpriced_calls`` counts the calls left out of it (their cost is unknown, not zero).
    """

    calls: int
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    total_tokens: int = Field(description="input + output + cache read + cache write: what token budgets count")
    cost_usd: float | None
    unpriced_calls: int


class UsageGroup(UsageRow):
    """One group of a usage report: a user id, a bundle id, a UTC day (``YYYY-MM-DD``) or a model label."""

    key: str


class UsageReportOut(BaseModel):
    """``GET /v1/{tenant}/{project}/usage``: the period's usage per group, and the total."""

    model_config = ConfigDict(populate_by_name=True)

    tenant: str
    project: str
    from_: datetime = Field(alias="from", serialization_alias="from")
    to: datetime
    group_by: Literal["user", "bundle", "day", "model"]
    groups: list[UsageGroup]
    total: UsageRow
