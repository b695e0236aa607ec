"""What a channel stream leaves behind: per channel and per instance, raw text, parsed JSON, sources, timing.

:class:`ResultRecorder` is fed by the renderer as the stream goes and builds the frozen
:class:`StreamResult` at the end. Raw text is exactly what the model wrote — citation tokens
included; rendering happens only in emitted deltas. Times are seconds since the stream started,
read from an injectable clock.

The results are slotted dataclasses, built for every model response without validating what the
recorder already made; treat them as immutable (they are not declared ``frozen``, which would make
building them several times dearer).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from berth.streaming.channels import ChannelFormat, ChannelSpec
from berth.streaming.citations import CitationSource
from berth.streaming.errors import StreamProblem

#: A monotonic clock in seconds (``time.perf_counter`` unless a test injects one).
Clock = Callable[[], float]


@dataclass(slots=True, kw_only=True)
class InstanceResult:
    """One instance of a channel: its raw text, and for JSON channels the parsed object.

    ``parsed`` is the ``json_model`` instance when the spec names one, otherwise the plain JSON value;
    ``problem`` says why it is ``None`` (codes ``json_empty``, ``json_invalid``,
    ``json_schema_mismatch``). ``unterminated`` is true when the stream ended before the closing tag.
    """

    instance: int
    raw_text: str
    parsed: Any = None
    problem: StreamProblem | None = None
    unterminated: bool = False
    opened_at_s: float
    closed_at_s: float

    @property
    def duration_s(self) -> float:
        """Seconds between the opening tag and the end of the instance."""
        return self.closed_at_s - self.opened_at_s


@dataclass(slots=True, kw_only=True)
class ChannelResult:
    """Everything one channel produced over the stream.

    ``used_sources`` are the sources its emitted text cited (in order of first citation) and
    ``unknown_sids`` the cited SIDs that could not be rendered; both are empty when the channel does
    not replace citations (use :func:`berth.streaming.cited_sids` on the raw text then).
    """

    name: str
    format: ChannelFormat
    declared: bool
    instances: tuple[InstanceResult, ...] = ()
    used_sources: tuple[CitationSource, ...] = ()
    unknown_sids: tuple[int, ...] = ()

    @property
    def instance_count(self) -> int:
        """How many times the channel was opened."""
        return len(self.instances)

    @property
    def raw_text(self) -> str:
        """The raw text of all instances, in order (for a one-instance channel, its text)."""
        return "".join(instance.raw_text for instance in self.instances)

    @property
    def first_opened_at_s(self) -> float | None:
        """When the first instance opened, or ``None`` if the channel never appeared."""
        return self.instances[0].opened_at_s if self.instances else None

    @property
    def last_closed_at_s(self) -> float | None:
        """When the last instance ended, or ``None`` if the channel never appeared."""
        return self.instances[-1].closed_at_s if self.instances else None


@dataclass(slots=True, kw_only=True)
class StreamResult:
    """The results of one stream: every declared channel (even if absent) and every undeclared one seen.

    ``outside_text`` is all text found outside channels, concatenated; ``stopped_by`` is set when a
    subscriber's policy error stopped the stream (open instances are then unterminated).
    """

    channels: dict[str, ChannelResult]
    outside_text: str = ""
    chars_fed: int = 0
    duration_s: float = 0.0
    stopped_by: StreamProblem | None = None
    subscriber_failures: int = 0

    @property
    def undeclared_channels(self) -> tuple[str, ...]:
        """Names of channels the model opened that were not declared, in order of appearance."""
        return tuple(name for name, channel in self.channels.items() if not channel.declared)

    def channel(self, name: str) -> ChannelResult:
        """Return the result of channel ``name`` (case-insensitive); ``KeyError`` names the known ones."""
        try:
            return self.channels[name.lower()]
        except KeyError:
            known = ", ".join(sorted(self.channels)) or "none"
            raise KeyError(f"no channel {name!r} in this stream (channels: {known})") from None


def parse_json_channel(raw_text: str, model: type[BaseModel] | None) -> tuple[Any, StreamProblem | None]:
    """Parse a JSON channel's raw text (optionally inside a code fence), validating against ``model``.

    Return ``(parsed, None)`` or ``(None, problem)``.
    """
    text = _strip_code_fence(raw_text.strip())
    if not text:
        return None, StreamProblem(code="json_empty", message="the channel holds no JSON value")
    try:
        value = json.loads(text, strict=False)
    except json.JSONDecodeError as error:
        return None, StreamProblem(
            code="json_invalid",
            message=f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}",
        )
    if model is None:
        return value, None
    try:
        return model.model_validate(value), None
    except ValidationError as error:
        details = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or '(root)'}: {detail['msg']}" for detail in error.errors()
        )
        return None, StreamProblem(
            code="json_schema_mismatch", message=f"the JSON does not match {model.__name__}: {details}"
        )


def _strip_code_fence(text: str) -> str:
    if not text.startswith(("```", "~~~")):
        return text
    first_newline = text.find("\n")
    if first_newline < 0:
        return ""
    body = text[first_newline + 1 :].rstrip()
    if body.endswith(("```", "~~~")):
        body = body[:-3]
    return body.strip()


class _ChannelRecord:
    __slots__ = ("declared", "instances", "spec", "unknown_sids", "used_sources")

    def __init__(self, spec: ChannelSpec, *, declared: bool) -> None:
        self.spec = spec
        self.declared = declared
        self.instances: list[InstanceResult] = []
        self.used_sources: dict[int, CitationSource] = {}
        self.unknown_sids: dict[int, None] = {}


class ResultRecorder:
    """Collects what the stream produced and builds the :class:`StreamResult` at the end."""

    def __init__(self, channels: Mapping[str, ChannelSpec], clock: Clock) -> None:
        self._clock = clock
        self._started = clock()
        self._channels = {name: _ChannelRecord(spec, declared=True) for name, spec in channels.items()}
        self._outside: list[str] = []
        self._chars_fed = 0
        self._open: _ChannelRecord | None = None
        self._open_instance = 0
        self._open_parts: list[str] = []
        self._opened_at = 0.0

    def fed(self, chunk: str) -> None:
        """Count a chunk fed to the stream."""
        self._chars_fed += len(chunk)

    def opened(self, spec: ChannelSpec, instance: int, *, declared: bool) -> None:
        """Record the opening of an instance."""
        record = self._channels.get(spec.name)
        if record is None:
            record = self._channels[spec.name] = _ChannelRecord(spec, declared=declared)
        self._open = record
        self._open_instance = instance
        self._open_parts = []
        self._opened_at = self._clock() - self._started

    def text(self, raw: str) -> None:
        """Record raw content of the open instance."""
        self._open_parts.append(raw)

    def outside(self, text: str) -> None:
        """Record text found outside channels."""
        self._outside.append(text)

    def closed(
        self,
        *,
        unterminated: bool,
        used_sources: Iterable[CitationSource] = (),
        unknown_sids: Iterable[int] = (),
    ) -> None:
        """Record the end of the open instance and what its rendered text cited."""
        record = self._open
        assert record is not None, "closed() without opened()"
        self._open = None
        raw_text = "".join(self._open_parts)
        self._open_parts = []
        parsed: Any = None
        problem: StreamProblem | None = None
        if record.spec.format == "json":
            parsed, problem = parse_json_channel(raw_text, record.spec.json_model)
        record.instances.append(
            InstanceResult(
                instance=self._open_instance,
                raw_text=raw_text,
                parsed=parsed,
                problem=problem,
                unterminated=unterminated,
                opened_at_s=self._opened_at,
                closed_at_s=self._clock() - self._started,
            )
        )
        for source in used_sources:
            record.used_sources.setdefault(source.sid, source)
        for sid in unknown_sids:
            record.unknown_sids[sid] = None

    def result(self, *, stopped_by: StreamProblem | None = None, subscriber_failures: int = 0) -> StreamResult:
        """Build the results; call once the stream has finished."""
        channels = {
            name: ChannelResult(
                name=name,
                format=record.spec.format,
                declared=record.declared,
                instances=tuple(record.instances),
                used_sources=tuple(record.used_sources.values()),
                unknown_sids=tuple(record.unknown_sids),
            )
            for name, record in self._channels.items()
        }
        return StreamResult(
            channels=channels,
            outside_text="".join(self._outside),
            chars_fed=self._chars_fed,
            duration_s=self._clock() - self._started,
            stopped_by=stopped_by,
            subscriber_failures=subscriber_failures,
        )
