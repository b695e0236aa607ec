"""What a tool may return besides plain JSON data: content with sources and files for the runtime."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SourceType = Literal["web", "file", "attachment", "manual", "kb"]


class SourceCandidate(BaseModel):
    """A source a tool found; the runtime merges it into the conversation's sources pool (stable SIDs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    title: str = ""
    text: str = ""
    mime: str = "text/plain"
    source_type: SourceType = "web"
    published_at: datetime | None = None
    relevance: float | None = None


class ImageContent(BaseModel):
    """An image a tool returned (base64 data); shown to the user, joins the pool as a non-citable row."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mime: str
    data_base64: str
    title: str = ""


class ToolOutput(BaseModel):
    """A tool's result with extras: ``value`` is what the model sees; ``sources`` enter the sources
    pool and the runtime shows their SIDs next to the value; ``images`` are kept as artifacts;
    ``is_error`` marks a failure the model should see as a tool error (MCP ``isError``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: Any = None
    sources: list[SourceCandidate] = Field(default_factory=list)
    images: list[ImageContent] = Field(default_factory=list)
    is_error: bool = False
    summary: str | None = None
