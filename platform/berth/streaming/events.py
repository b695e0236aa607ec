"""The records a channel stream produces.

The parser (:mod:`berth.streaming.parser`) produces :data:`ParserEvent`\\ s carrying raw channel
text; the renderer (:mod:`berth.streaming.rendering`) turns them into :data:`StreamEvent`\\ s, in
which text is rendered for clients (citations replaced) and JSON fields stream on their own.
They are slotted dataclasses rather than pydantic models because one is built for every chunk on
the hot path; they never cross a process boundary as they are (the API encodes them). Nothing changes
an event once built, but they are not declared ``frozen``: a frozen dataclass sets each field through
``object.__setattr__``, which makes building one three to four times dearer.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import JsonValue


@dataclass(slots=True)
class ChannelOpened:
    """An opening tag started instance ``instance`` (0, 1, …) of ``channel``.

    ``declared`` is false for a channel name the stream was not told about; such a channel is
    parsed as plain text, never emitted to clients, and reported in the results.
    """

    channel: str
    instance: int
    marker: str | None
    declared: bool = True


@dataclass(slots=True)
class ChannelText:
    """A piece of raw channel content as the model wrote it (parser output only)."""

    channel: str
    instance: int
    text: str


@dataclass(slots=True)
class ChannelDelta:
    """A piece of channel content ready for clients.

    ``text`` has citations rendered when the channel replaces them; ``raw`` is the model's text the
    piece was rendered from. Pieces never split a tag or a citation token, and the concatenated
    ``text`` (and ``raw``) of an instance does not depend on how the input was chunked.
    """

    channel: str
    instance: int
    marker: str | None
    text: str
    raw: str


@dataclass(slots=True)
class FieldDelta:
    """A piece of a top-level string field of a composite JSON channel, decoded (escapes resolved)."""

    channel: str
    instance: int
    marker: str
    field: str
    text: str


@dataclass(slots=True)
class FieldCompleted:
    """A top-level field of a composite JSON channel is complete; ``value`` is its parsed JSON value."""

    channel: str
    instance: int
    marker: str
    field: str
    value: JsonValue


@dataclass(slots=True)
class ChannelClosed:
    """An instance ended: at its closing tag, or at the end of the stream when ``unterminated``."""

    channel: str
    instance: int
    marker: str | None
    unterminated: bool = False


@dataclass(slots=True)
class OutsideText:
    """Text found outside any channel; never lost (the runtime turns it into a protocol notice)."""

    text: str


#: What :class:`berth.streaming.ChannelParser` produces.
ParserEvent = ChannelOpened | ChannelText | ChannelClosed | OutsideText

#: What subscribers of a channel receive.
ChannelEvent = ChannelOpened | ChannelDelta | FieldDelta | FieldCompleted | ChannelClosed

#: What :class:`berth.streaming.ChannelRenderer` produces.
StreamEvent = ChannelEvent | OutsideText
