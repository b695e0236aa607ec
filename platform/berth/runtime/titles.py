"""Conversation titles (SPEC §4.1): a short title from the ``summarizer`` role after the first exchange.

:func:`make_title` asks the model for a title of the first prompt and answer; :func:`clean_title`
turns whatever the model wrote into one short line (no quotes, no "Title:" prefix, no markup), or
None when nothing usable is left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from berth.models.protocol import ModelCompleted, ModelProvider, ModelRequest, TextDelta, Usage
from berth.runtime.render import PromptMessage, PromptPart, RenderedPrompt

__all__ = ["TITLE_MAX_CHARS", "MadeTitle", "clean_title", "make_title"]

TITLE_MAX_CHARS: Final = 80
EXCERPT_CHARS: Final = 2_000
"""How much of the prompt and of the answer the summarizer is shown."""

INSTRUCTIONS: Final = (
    "Write a title of at most six words for the conversation below, in the language of the user's message. "
    "Reply with the title only: no quotes, no punctuation at the end, no explanation."
)

_MARKUP = re.compile(r"</?channel:[a-z_]+>|[*_`#]+")
_PREFIX = re.compile("^\\s*(?:title|titre|titel)\\s*[:\uff1a-]\\s*", re.IGNORECASE)
_QUOTES = "\"'\u201c\u201d\u2018\u2019\u00ab\u00bb\u300c\u300d"


@dataclass(frozen=True, slots=True)
class MadeTitle:
    """What the summarizer made: the cleaned title (None when unusable) and the call's usage."""

    title: str | None
    usage: Usage


def clean_title(text: str) -> str | None:
    """One line of at most :data:`TITLE_MAX_CHARS` characters from a model's reply, or None if nothing is left."""
    line = next((line for line in _MARKUP.sub("", text).splitlines() if line.strip()), "")
    line = " ".join(_PREFIX.sub("", line).split())
    line = line.lstrip(_QUOTES).rstrip(_QUOTES + ".!;:, ").lstrip()
    if len(line) > TITLE_MAX_CHARS:
        cut = line[: TITLE_MAX_CHARS - 1]
        line = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(".,;:") + "…"
    return line or None


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " …"


async def make_title(provider: ModelProvider, prompt: str, answer: str | None) -> MadeTitle:
    """Ask ``provider`` (the summarizer) for a title of the exchange ``prompt`` → ``answer``."""
    exchange = f"User: {_excerpt(prompt)}"
    if answer:
        exchange += f"\n\nAssistant: {_excerpt(answer)}"
    request = ModelRequest(
        prompt=RenderedPrompt(
            messages=(
                PromptMessage(role="system", parts=(PromptPart(section="system", text=INSTRUCTIONS),)),
                PromptMessage(role="user", parts=(PromptPart(section="current_turn", text=exchange),)),
            ),
            checkpoints=(),
            start=0,
        ),
        max_output_tokens=32,
        metadata={"purpose": "title"},
    )
    pieces: list[str] = []
    usage = Usage()
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            pieces.append(event.text)
        elif isinstance(event, ModelCompleted):
            usage = event.usage
    return MadeTitle(clean_title("".join(pieces)), usage)
