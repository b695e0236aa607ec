"""The incremental channel tag parser: text chunks of any size in, channel events out.

``<channel:NAME>`` opens an instance of channel ``NAME`` and ``</channel:NAME>`` closes it; names are
``[A-Za-z0-9_-]{1,64}`` and tags are case-insensitive. The parser is a synchronous state machine that
never looks back: it scans each chunk once (``str.find`` for ``<``, one anchored regex per ``<``) and
keeps only a tail that could still become a tag — at most 74 characters — for the next chunk. So the
events it yields do not depend on how the text was chunked, beyond how the text pieces are cut, and
a tag is never split between two pieces.

Rules, in the order they are applied:

* outside any channel, an opening tag opens an instance (0, 1, … per name); everything else —
  including a stray closing tag — is reported as :class:`~berth.streaming.events.OutsideText`;
* inside a channel only its own closing tag ends it (there is no nesting): an opening tag, or the
  closing tag of another channel, is content;
* in ``markdown`` and ``text`` channels a closing tag inside a fenced code block is content
  (:mod:`berth.streaming.fences`); in ``code``, ``json`` and ``html`` channels it always ends the
  channel, even inside backticks;
* an undeclared channel name still opens an instance, reported with ``declared=False``;
* at the end of the stream an open instance is closed with ``unterminated=True`` and a held tail is
  flushed as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from berth.streaming.channels import (
    CHANNEL_NAME_MAX,
    ChannelSpec,
    index_channels,
    undeclared_channel_spec,
)
from berth.streaming.events import ChannelClosed, ChannelOpened, ChannelText, OutsideText, ParserEvent
from berth.streaming.fences import FenceTracker

_TAG = re.compile(rf"<(/?)channel:([A-Za-z0-9_-]{{1,{CHANNEL_NAME_MAX}}})>", re.IGNORECASE)
# A proper prefix of some tag that reaches the end of the buffer: it may still become a tag.
_TAG_PREFIX = re.compile(
    rf"</?(?:c(?:h(?:a(?:n(?:n(?:e(?:l(?::[A-Za-z0-9_-]{{0,{CHANNEL_NAME_MAX}}})?)?)?)?)?)?)?)?\Z",
    re.IGNORECASE,
)
#: The longest tag (``</channel:`` + the longest name + ``>``); a held tail is always shorter.
TAG_MAX_LEN = len("</channel:>") + CHANNEL_NAME_MAX


@dataclass(slots=True)
class _OpenInstance:
    spec: ChannelSpec
    instance: int
    fences: FenceTracker | None


class ChannelParser:
    """Splits a stream of text chunks into channel events (see the module docstring for the rules).

    Call :meth:`feed` with each chunk and :meth:`finish` once at the end; each returns the events
    the new text completed, in order.
    """

    def __init__(self, channels: Iterable[ChannelSpec]) -> None:
        self._declared = index_channels(channels)
        self._undeclared: dict[str, ChannelSpec] = {}
        self._instance_counts: dict[str, int] = {}
        self._open: _OpenInstance | None = None
        self._tail = ""
        self._finished = False

    @property
    def channels(self) -> Mapping[str, ChannelSpec]:
        """The declared channel specs by lower-case name."""
        return self._declared

    def spec(self, name: str) -> ChannelSpec:
        """Return the spec channel ``name`` is parsed with (a plain-text spec when undeclared)."""
        name = name.lower()
        spec = self._declared.get(name)
        if spec is None:
            spec = self._undeclared.get(name)
            if spec is None:
                spec = self._undeclared[name] = undeclared_channel_spec(name)
        return spec

    def feed(self, chunk: str) -> list[ParserEvent]:
        """Parse the next chunk; return the events it completed."""
        if self._finished:
            raise RuntimeError("ChannelParser.feed() called after finish()")
        events: list[ParserEvent] = []
        buf = self._tail + chunk if self._tail else chunk
        self._tail = ""
        pos = 0  # start of the text not yet reported
        search = 0  # where to look for the next "<"
        while (start := buf.find("<", search)) >= 0:
            match = _TAG.match(buf, start)
            if match is None:
                if len(buf) - start < TAG_MAX_LEN and _TAG_PREFIX.match(buf, start):
                    self._report_text(events, buf[pos:start])
                    self._tail = buf[start:]
                    return events
                search = start + 1
                continue
            end = match.end()
            closing = match.group(1) == "/"
            open_ = self._open
            if open_ is None:
                if not closing:
                    self._report_text(events, buf[pos:start])
                    self._open_instance(events, match.group(2).lower())
                    pos = end
                search = end
                continue
            if closing and match.group(2).lower() == open_.spec.name:
                self._report_text(events, buf[pos:start])
                pos = start
                if open_.fences is None or open_.fences.tag_is_boundary():
                    self._close_instance(events, unterminated=False)
                    pos = end
            search = end
        self._report_text(events, buf[pos:] if pos else buf)
        return events

    def finish(self) -> list[ParserEvent]:
        """End the stream: flush the held tail as text and close an open instance as unterminated."""
        if self._finished:
            return []
        self._finished = True
        events: list[ParserEvent] = []
        self._report_text(events, self._tail)
        self._tail = ""
        if self._open is not None:
            self._close_instance(events, unterminated=True)
        return events

    def _report_text(self, events: list[ParserEvent], text: str) -> None:
        if not text:
            return
        open_ = self._open
        if open_ is None:
            events.append(OutsideText(text))
            return
        events.append(ChannelText(open_.spec.name, open_.instance, text))
        if open_.fences is not None:
            open_.fences.feed(text)

    def _open_instance(self, events: list[ParserEvent], name: str) -> None:
        spec = self.spec(name)
        instance = self._instance_counts.get(name, 0)
        self._instance_counts[name] = instance + 1
        self._open = _OpenInstance(spec, instance, FenceTracker() if spec.tracks_fences else None)
        events.append(ChannelOpened(name, instance, spec.emit_marker, name in self._declared))

    def _close_instance(self, events: list[ParserEvent], *, unterminated: bool) -> None:
        open_ = self._open
        assert open_ is not None
        self._open = None
        events.append(ChannelClosed(open_.spec.name, open_.instance, open_.spec.emit_marker, unterminated))
