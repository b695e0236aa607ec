"""Channel specs: which channels a response may carry and how each is parsed, rendered and emitted.

The model writes tagged channels (``<channel:answer>…</channel:answer>``, SPEC §4.2); a
:class:`ChannelSpec` per declared channel says what its content is (``format``), whether citation
tokens in it are rendered for clients (``replace_citations``), under which marker it is streamed to
clients (``emit_marker``) and, for JSON channels, whether top-level fields stream on their own
(``composite``) and which pydantic model validates the parsed object (``json_model``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from berth.streaming.errors import ChannelSetupError

#: The formats a channel's content may have.
ChannelFormat = Literal["markdown", "text", "html", "json", "code"]

#: The longest channel name; a longer name is not a tag but ordinary text.
CHANNEL_NAME_MAX = 64

_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{CHANNEL_NAME_MAX}}}")
_FENCED_FORMATS = frozenset({"markdown", "text"})


class ChannelSpec(BaseModel):
    """How one channel is parsed, rendered and emitted.

    ``name`` matches ``[A-Za-z0-9_-]{1,64}`` and is stored lower-cased (tags are case-insensitive).
    ``format`` decides where the closing tag is recognised: in ``markdown`` and ``text`` a tag inside
    a fenced code block is text; in ``code``, ``json`` and ``html`` the closing tag always ends the
    channel (even inside backticks or a JSON string). ``emit_marker`` is the marker deltas carry to
    clients; ``None`` keeps the channel internal (subscribers and results still see it).
    ``composite`` streams each top-level field of a JSON object to ``composite_marker`` as soon as it
    is complete; ``json_model`` validates the parsed object of each instance.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    format: ChannelFormat = "markdown"
    replace_citations: bool = False
    emit_marker: str | None = None
    composite: bool = False
    composite_marker: str = "canvas"
    json_model: type[BaseModel] | None = None

    @field_validator("name")
    @classmethod
    def _lower_case_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"channel name {value!r} must be 1 to {CHANNEL_NAME_MAX} characters of A-Z a-z 0-9 _ -")
        return value.lower()

    @field_validator("emit_marker", "composite_marker")
    @classmethod
    def _non_empty_marker(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("a marker must be a non-empty string (use emit_marker=None to keep it internal)")
        return value

    @model_validator(mode="after")
    def _options_fit_the_format(self) -> ChannelSpec:
        if self.format != "json" and (self.composite or self.json_model is not None):
            raise ValueError(f"channel {self.name!r}: composite and json_model need format 'json', not {self.format!r}")
        if self.replace_citations and self.format == "code":
            raise ValueError(f"channel {self.name!r}: citations are never replaced in a 'code' channel")
        if self.replace_citations and self.format == "json" and not self.composite:
            raise ValueError(
                f"channel {self.name!r}: in a json channel citations are rendered only in composite "
                "string fields; set composite=True or replace_citations=False"
            )
        return self

    @property
    def tracks_fences(self) -> bool:
        """Whether a closing tag inside a fenced code block is text rather than the channel's end."""
        return self.format in _FENCED_FORMATS


def undeclared_channel_spec(name: str) -> ChannelSpec:
    """Return the spec an undeclared channel is parsed with: plain text, never emitted to clients."""
    return ChannelSpec(name=name, format="text")


def index_channels(channels: Iterable[ChannelSpec]) -> Mapping[str, ChannelSpec]:
    """Return the specs by (lower-case) name; raise :class:`ChannelSetupError` on a duplicate name."""
    indexed: dict[str, ChannelSpec] = {}
    for spec in channels:
        if spec.name in indexed:
            raise ChannelSetupError(
                "duplicate_channel", f"channel {spec.name!r} is declared twice; declare each channel once"
            )
        indexed[spec.name] = spec
    return indexed
