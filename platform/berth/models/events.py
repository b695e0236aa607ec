"""What a model call yields: :class:`TextDelta` events, then one :class:`ModelCompleted` with the :class:`Usage`.

Re-exported by :mod:`berth.models.protocol`, which also holds the request (and so imports the renderer); a provider
plugin imports these from here, so loading it at start-up does not import the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelCompleted", "ModelEvent", "StopReason", "TextDelta", "Usage"]

StopReason: TypeAlias = Literal["end_turn", "max_tokens", "stop_sequence", "refusal", "other"]
"""Why the model stopped, normalized across providers (``other`` keeps anything unforeseen visible)."""


class Usage(BaseModel):
    """Token usage of one model call (Anthropic's accounting: the three input counts do not overlap).

    ``input_tokens`` are the uncached input tokens, ``cache_read_input_tokens`` were served from the
    provider's prompt cache, ``cache_creation_input_tokens`` were written to it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cache_read_input_tokens: int = Field(0, ge=0)
    cache_creation_input_tokens: int = Field(0, ge=0)

    @property
    def total_input_tokens(self) -> int:
        """Every input token of the call, cached or not."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def plus(self, other: Usage) -> Usage:
        """Return the sum of two usages (for a turn's totals)."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @classmethod
    def total(cls, *usages: Usage) -> Usage:
        """The sum of ``usages`` as one ``Usage`` (what :meth:`plus` gives them one by one, made once)."""
        return cls(
            input_tokens=sum(u.input_tokens for u in usages),
            output_tokens=sum(u.output_tokens for u in usages),
            cache_read_input_tokens=sum(u.cache_read_input_tokens for u in usages),
            cache_creation_input_tokens=sum(u.cache_creation_input_tokens for u in usages),
        )


@dataclass(slots=True)
class TextDelta:
    """A piece of the model's response text, in order.

    A plain slotted dataclass, not a pydantic model: a provider makes one per streamed chunk, and a
    chunk's text needs no validation. Not declared ``frozen`` for the same reason (a frozen dataclass's
    ``__init__`` costs three times as much); nothing changes a delta once made.
    """

    text: str
    type: Literal["text_delta"] = "text_delta"


class ModelCompleted(BaseModel):
    """The last event of a successful call: why the model stopped and what the call cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["completed"] = "completed"
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None


ModelEvent: TypeAlias = TextDelta | ModelCompleted
"""What :meth:`ModelProvider.stream` yields."""
