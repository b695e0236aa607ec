"""For any document and any chunking, the emitted text equals the one-chunk result, and no emitted
piece splits a tag or a citation token.

"Splits" is checked on the emitted text (rendered and raw) of each instance: no boundary between
two consecutive pieces falls strictly inside a tag; in channels (and composite fields) that replace
citations, none falls inside a citation token or a rendered citation either. (A piece may end in
``[[S:`` only when the text after it, already seen, rules out a token: ``[[S:[[S:1]]``.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from berth.streaming import (
    ChannelClosed,
    ChannelDelta,
    ChannelOpened,
    ChannelSpec,
    CitationSource,
    FieldCompleted,
    FieldDelta,
    OutsideText,
    StreamEvent,
    StreamResult,
)

RenderRun = Callable[..., tuple[list[StreamEvent], StreamResult]]

SPECS = [
    ChannelSpec(name="answer", emit_marker="answer", replace_citations=True),
    ChannelSpec(name="thinking", emit_marker="thinking"),
    ChannelSpec(name="notes", format="text", replace_citations=True),
    ChannelSpec(name="code", format="code"),
    ChannelSpec(name="page", format="html", replace_citations=True, emit_marker="canvas"),
    ChannelSpec(name="canvas", format="json", composite=True, replace_citations=True),
]
CITING = {"answer", "notes", "page"}

FRAGMENTS = [
    *(f"<channel:{name}>" for name in ("answer", "thinking", "notes", "code", "page", "canvas", "mystery")),
    *(f"</channel:{name}>" for name in ("answer", "thinking", "notes", "code", "page", "canvas", "mystery")),
    "<CHANNEL:Answer>",
    "</Channel:ANSWER>",
    "<channel:",
    "</chan",
    "<channel:ans",
    "<",
    "</",
    ">",
    "[[S:1]]",
    "[[ S : 1 , 3 ]]",
    "[[S:2-4]]",
    "[[S:99]]",
    "[[s:1,99]]",
    "[[S:",
    "[[",
    "[",
    "]]",
    "]",
    "\n```\n",
    "\n```python\n",
    "```",
    "\n~~~\n",
    "`",
    "\n",
    "    ```\n",
    '{"title": "T [[S:1]]", "n": 1, "list": [1, "]"], "s": "a\\"b\\u00e9\\ud83d\\ude00"}',
    "{",
    "}",
    '"',
    "\\",
    ": ",
    ", ",
]
DOCUMENTS = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet='ab <>/[]:S1,-`~\n"\\{}', max_size=6)),
    max_size=40,
).map("".join)

TAG = re.compile(r"</?channel:[A-Za-z0-9_-]{1,64}>", re.IGNORECASE)
CITATION = re.compile(
    r"\[\[[ \t]*[Ss][ \t]*:[ \t]*\d+(?:[ \t]*-[ \t]*\d+)?(?:[ \t]*,[ \t]*\d+(?:[ \t]*-[ \t]*\d+)?)*[ \t]*\]\]"
    r"|\[Source \d\]\(https://example\.org/s/\d\)"
    r'|<sup class="cite".*?</sup>'
)


def cut(text: str, cuts: list[int]) -> list[str]:
    points = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in pairwise(points)]


def pieces_by_stream(events: list[StreamEvent]) -> dict[tuple[str, ...], list[str]]:
    """Emitted pieces per instance (rendered and raw), per composite field, and per stretch of text outside
    channels (the text before a channel opens and the text after it closes are not one stream: in
    ``<channel:ans<channel:answer>…</channel:answer>>`` they join to a tag that was never in the text)."""
    pieces: dict[tuple[str, ...], list[str]] = {}
    stretch = 0
    for event in events:
        if isinstance(event, ChannelOpened | ChannelClosed):
            stretch += 1
        if isinstance(event, ChannelDelta):
            pieces.setdefault(("text", event.channel, str(event.instance)), []).append(event.text)
            pieces.setdefault(("raw", event.channel, str(event.instance)), []).append(event.raw)
        elif isinstance(event, FieldDelta):
            key = ("field", event.channel, str(event.instance), event.field)
            pieces.setdefault(key, []).append(event.text)
        elif isinstance(event, OutsideText):
            pieces.setdefault(("outside", str(stretch)), []).append(event.text)
    return pieces


def structure(events: list[StreamEvent]) -> list[StreamEvent]:
    return [e for e in events if isinstance(e, ChannelOpened | ChannelClosed | FieldCompleted)]


def assert_no_piece_splits_a_token(key: tuple[str, ...], pieces: list[str]) -> None:
    text = "".join(pieces)
    boundaries: set[int] = set()
    position = 0
    for piece in pieces[:-1]:
        position += len(piece)
        boundaries.add(position)
    cites = key[0] == "field" or (key[0] in ("text", "raw") and key[1] in CITING)
    for pattern in (TAG, CITATION) if cites else (TAG,):
        for match in pattern.finditer(text):
            inside = [b for b in boundaries if match.start() < b < match.end()]
            assert not inside, f"{key}: a piece boundary splits {match.group(0)!r}: {pieces!r}"


def summary(result: StreamResult) -> object:
    return (
        result.outside_text,
        {
            name: (
                channel.declared,
                [(i.raw_text, i.parsed, i.problem, i.unterminated) for i in channel.instances],
                channel.used_sources,
                channel.unknown_sids,
            )
            for name, channel in result.channels.items()
        },
    )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=DOCUMENTS, data=st.data())
@example(document="<channel:answer>x [[S:1]] y</channel:answer>", data=None)
@example(document='<channel:canvas>{"a": "[[S:2]]"}</channel:canvas>', data=None)
@example(document="<channel:ans<channel:answer></channel:answer>>", data=None)
def test_any_chunking_emits_what_one_chunk_emits_and_never_splits_a_token(
    render: RenderRun, sources: dict[int, CitationSource], document: str, data: st.DataObject | None
) -> None:
    one_events, one_result = render(SPECS, [document], sources=sources)
    one_pieces = pieces_by_stream(one_events)
    chunkings = [list(document)]
    if data is not None:
        chunkings.append(cut(document, data.draw(st.lists(st.integers(0, len(document)), max_size=25))))
    for chunks in chunkings:
        events, result = render(SPECS, chunks, sources=sources)
        pieces = pieces_by_stream(events)
        assert {k: "".join(v) for k, v in pieces.items()} == {k: "".join(v) for k, v in one_pieces.items()}
        assert structure(events) == structure(one_events)
        assert summary(result) == summary(one_result)
        for key, stream_pieces in pieces.items():
            assert_no_piece_splits_a_token(key, stream_pieces)


@settings(max_examples=200, deadline=None)
@given(document=DOCUMENTS)
def test_no_text_is_lost(render: RenderRun, document: str) -> None:
    events, result = render(SPECS, list(document))
    tags = sum(
        len(f"<channel:{e.channel}>") if isinstance(e, ChannelOpened) else len(f"</channel:{e.channel}>")
        for e in events
        if isinstance(e, ChannelOpened) or (isinstance(e, ChannelClosed) and not e.unterminated)
    )
    raw = sum(len(channel.raw_text) for channel in result.channels.values())
    assert raw + len(result.outside_text) + tags == len(document)
