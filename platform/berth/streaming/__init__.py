"""Channel streaming: the model's tagged output, parsed incrementally and delivered to clients.

The model answers in tagged channels (``<channel:answer>…</channel:answer>``, SPEC §4.2 and §5.1).
This package parses them from chunks of any size, renders ``[[S:n]]`` citations in what clients see
(never in the stored raw text), streams the top-level fields of JSON channels as they complete, and
runs subscribers beside the primary emitter. Layers, bottom up:

* :class:`ChannelParser` — tags → raw channel events (synchronous, incremental);
* :class:`ChannelRenderer` — citations, composite JSON and results on top (synchronous);
* :class:`ChannelStream` — the primary emitter and subscribers on top (async).

See ``docs/streaming.md`` for the protocol as bundle authors see it.
"""

from berth.streaming.channels import ChannelFormat, ChannelSpec
from berth.streaming.citations import (
    CitationScanner,
    CitationSource,
    CitationStyle,
    SourceLookup,
    cited_sids,
    render_citations,
)
from berth.streaming.composite_json import CompositeJsonStreamer
from berth.streaming.errors import ChannelSetupError, StreamPolicyError, StreamProblem
from berth.streaming.events import (
    ChannelClosed,
    ChannelDelta,
    ChannelEvent,
    ChannelOpened,
    ChannelText,
    FieldCompleted,
    FieldDelta,
    OutsideText,
    ParserEvent,
    StreamEvent,
)
from berth.streaming.parser import ChannelParser
from berth.streaming.rendering import ChannelRenderer
from berth.streaming.results import ChannelResult, InstanceResult, StreamResult, parse_json_channel
from berth.streaming.stream import ChannelStream, Emitter
from berth.streaming.subscribers import Subscriber, SubscriberFactory, SubscriberFailure

__all__ = [
    "ChannelClosed",
    "ChannelDelta",
    "ChannelEvent",
    "ChannelFormat",
    "ChannelOpened",
    "ChannelParser",
    "ChannelRenderer",
    "ChannelResult",
    "ChannelSetupError",
    "ChannelSpec",
    "ChannelStream",
    "ChannelText",
    "CitationScanner",
    "CitationSource",
    "CitationStyle",
    "CompositeJsonStreamer",
    "Emitter",
    "FieldCompleted",
    "FieldDelta",
    "InstanceResult",
    "OutsideText",
    "ParserEvent",
    "SourceLookup",
    "StreamEvent",
    "StreamPolicyError",
    "StreamProblem",
    "StreamResult",
    "Subscriber",
    "SubscriberFactory",
    "SubscriberFailure",
    "cited_sids",
    "parse_json_channel",
    "render_citations",
]
