"""The synchronous streaming pipeline: tags → rendered deltas, composite fields and results.

:class:`ChannelRenderer` wraps the :class:`~berth.streaming.parser.ChannelParser` and, per channel
instance, renders citations (:mod:`berth.streaming.citations`), streams composite JSON fields
(:mod:`berth.streaming.composite_json`) and records results (:mod:`berth.streaming.results`). It
knows nothing of asyncio, emitters or subscribers; :class:`berth.streaming.ChannelStream` puts
those on top.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from berth.streaming.channels import ChannelSpec
from berth.streaming.citations import CitationScanner, CitationSource, CitationStyle, SourceLookup
from berth.streaming.composite_json import CompositeJsonStreamer, FieldEvent
from berth.streaming.errors import StreamProblem
from berth.streaming.events import (
    ChannelClosed,
    ChannelDelta,
    ChannelOpened,
    ChannelText,
    FieldDelta,
    OutsideText,
    ParserEvent,
    StreamEvent,
)
from berth.streaming.parser import ChannelParser
from berth.streaming.results import Clock, ResultRecorder, StreamResult

_NO_SOURCES: Mapping[int, CitationSource] = {}


class _InstanceRendering:
    """Per-instance state: the citation scanner, the composite streamer and its field scanner."""

    __slots__ = (
        "channel",
        "citations",
        "composite",
        "composite_marker",
        "field",
        "field_citations",
        "field_citations_enabled",
        "field_unknown_sids",
        "field_used",
        "instance",
        "marker",
        "sources",
    )

    def __init__(self, spec: ChannelSpec, instance: int, marker: str | None, sources: SourceLookup) -> None:
        self.channel = spec.name
        self.instance = instance
        self.marker = marker
        self.sources = sources
        self.composite_marker = spec.composite_marker
        self.citations: CitationScanner | None = None
        self.composite: CompositeJsonStreamer | None = None
        self.field_citations_enabled = False
        self.field = ""
        self.field_citations: CitationScanner | None = None
        self.field_used: dict[int, CitationSource] = {}
        self.field_unknown_sids: dict[int, None] = {}
        if spec.format == "json":
            if spec.composite:
                self.composite = CompositeJsonStreamer(spec.name, instance, spec.composite_marker)
                self.field_citations_enabled = spec.replace_citations
        elif spec.replace_citations:
            style: CitationStyle = "html" if spec.format == "html" else "markdown"
            self.citations = CitationScanner(sources, style)

    def used(self) -> tuple[list[CitationSource], list[int]]:
        """Sources cited in what this instance emitted, and the unknown SIDs."""
        used = dict(self.field_used)
        unknown = dict(self.field_unknown_sids)
        if self.citations is not None:
            used.update(self.citations.used)
            unknown.update(self.citations.unknown_sids)
        return list(used.values()), list(unknown)


class ChannelRenderer:
    """Turns model output chunks into client-ready events and, at the end, a :class:`StreamResult`.

    Per instance it yields :class:`ChannelOpened`, then :class:`ChannelDelta` pieces (citations
    rendered when the spec says so; never a partial tag or partial citation token), interleaved for
    composite JSON channels with :class:`FieldDelta` / :class:`FieldCompleted`, then
    :class:`ChannelClosed`; text outside channels comes as :class:`OutsideText`. For any chunking of
    the same text the events differ only in how delta text is cut.
    """

    def __init__(
        self,
        channels: Iterable[ChannelSpec],
        *,
        sources: SourceLookup | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self._parser = ChannelParser(channels)
        self._sources: SourceLookup = _NO_SOURCES if sources is None else sources
        self._recorder = ResultRecorder(self._parser.channels, clock)
        self._open: _InstanceRendering | None = None
        self._finished = False

    @property
    def channels(self) -> Mapping[str, ChannelSpec]:
        """The declared channel specs by lower-case name."""
        return self._parser.channels

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` has been called."""
        return self._finished

    def feed(self, chunk: str) -> list[StreamEvent]:
        """Process the next chunk of model output; return the events it completed."""
        self._recorder.fed(chunk)
        return self._render(self._parser.feed(chunk))

    def finish(self) -> list[StreamEvent]:
        """End the stream: flush held text and close an open instance as unterminated."""
        if self._finished:
            return []
        self._finished = True
        return self._render(self._parser.finish())

    def result(self, *, stopped_by: StreamProblem | None = None, subscriber_failures: int = 0) -> StreamResult:
        """Return the results; call after :meth:`finish`."""
        if not self._finished:
            raise RuntimeError("ChannelRenderer.result() called before finish()")
        return self._recorder.result(stopped_by=stopped_by, subscriber_failures=subscriber_failures)

    def _render(self, events: list[ParserEvent]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for event in events:
            if type(event) is ChannelText:
                self._render_text(event.text, out)
            elif type(event) is ChannelOpened:
                spec = self._parser.spec(event.channel)
                self._open = _InstanceRendering(spec, event.instance, event.marker, self._sources)
                self._recorder.opened(spec, event.instance, declared=event.declared)
                out.append(event)
            elif type(event) is ChannelClosed:
                self._render_close(event, out)
            else:
                assert type(event) is OutsideText
                self._recorder.outside(event.text)
                out.append(event)
        return out

    def _render_text(self, raw: str, out: list[StreamEvent]) -> None:
        open_ = self._open
        assert open_ is not None
        self._recorder.text(raw)
        if open_.citations is None:
            out.append(ChannelDelta(open_.channel, open_.instance, open_.marker, raw, raw))
        else:
            text, consumed = open_.citations.feed(raw)
            if consumed:
                out.append(ChannelDelta(open_.channel, open_.instance, open_.marker, text, consumed))
        if open_.composite is not None:
            self._render_fields(open_, open_.composite.feed(raw), out)

    def _render_close(self, event: ChannelClosed, out: list[StreamEvent]) -> None:
        open_ = self._open
        assert open_ is not None
        self._open = None
        if open_.citations is not None:
            text, consumed = open_.citations.flush()
            if consumed:
                out.append(ChannelDelta(open_.channel, open_.instance, open_.marker, text, consumed))
        if open_.composite is not None:
            self._render_fields(open_, open_.composite.finish(), out)
            self._flush_field_citations(open_, out)  # a string field the object never finished
        used, unknown = open_.used()
        self._recorder.closed(unterminated=event.unterminated, used_sources=used, unknown_sids=unknown)
        out.append(event)

    def _render_fields(self, open_: _InstanceRendering, events: list[FieldEvent], out: list[StreamEvent]) -> None:
        if not open_.field_citations_enabled:
            out.extend(events)
            return
        for event in events:
            if type(event) is FieldDelta:
                scanner = open_.field_citations
                if scanner is None:
                    scanner = open_.field_citations = CitationScanner(open_.sources)
                    open_.field = event.field
                text, consumed = scanner.feed(event.text)
                if consumed:
                    out.append(FieldDelta(event.channel, event.instance, event.marker, event.field, text))
            else:
                self._flush_field_citations(open_, out)
                out.append(event)

    def _flush_field_citations(self, open_: _InstanceRendering, out: list[StreamEvent]) -> None:
        """Release what the field's citation scanner held, and keep what it cited for the results."""
        scanner = open_.field_citations
        if scanner is None:
            return
        open_.field_citations = None
        text, _ = scanner.flush()
        if text:
            out.append(FieldDelta(open_.channel, open_.instance, open_.composite_marker, open_.field, text))
        for sid, source in scanner.used.items():
            open_.field_used.setdefault(sid, source)
        open_.field_unknown_sids.update(scanner.unknown_sids)
