"""Composite JSON: top-level fields stream to their own marker before the object closes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.streaming import (
    ChannelClosed,
    ChannelSpec,
    CitationSource,
    CompositeJsonStreamer,
    FieldCompleted,
    FieldDelta,
    StreamEvent,
    StreamResult,
)
from berth.streaming.composite_json import FieldEvent

RenderRun = Callable[..., tuple[list[StreamEvent], StreamResult]]

CANVAS = ChannelSpec(name="canvas", format="json", composite=True)


def stream(text: str, chunk_size: int | None = None) -> list[FieldEvent]:
    streamer = CompositeJsonStreamer("canvas", 0, "canvas")
    events: list[FieldEvent] = []
    size = chunk_size or max(len(text), 1)
    for start in range(0, len(text), size):
        events.extend(streamer.feed(text[start : start + size]))
    events.extend(streamer.finish())
    return events


def completed(events: list[FieldEvent]) -> list[tuple[str, object]]:
    return [(e.field, e.value) for e in events if isinstance(e, FieldCompleted)]


def string_deltas(events: list[FieldEvent], field: str) -> list[str]:
    return [e.text for e in events if isinstance(e, FieldDelta) and e.field == field]


def test_each_field_is_emitted_as_soon_as_its_value_is_complete() -> None:
    streamer = CompositeJsonStreamer("canvas", 0, "canvas")
    assert streamer.feed('{"title": "Q3"') == [
        FieldDelta("canvas", 0, "canvas", "title", "Q3"),
        FieldCompleted("canvas", 0, "canvas", "title", "Q3"),
    ]
    assert streamer.feed(', "charts": [1, {"a": 2}]') == [
        FieldCompleted("canvas", 0, "canvas", "charts", [1, {"a": 2}])
    ]
    assert streamer.feed(', "n": 12') == []  # a number may still go on
    assert streamer.feed(" ") == [FieldCompleted("canvas", 0, "canvas", "n", 12)]
    assert not streamer.done
    assert streamer.feed("}") == []
    assert streamer.done


def test_string_fields_stream_progressively_before_their_closing_quote() -> None:
    streamer = CompositeJsonStreamer("canvas", 0, "canvas")
    assert streamer.feed('{"body": "Once upon') == [FieldDelta("canvas", 0, "canvas", "body", "Once upon")]
    assert streamer.feed(" a time") == [FieldDelta("canvas", 0, "canvas", "body", " a time")]
    assert streamer.feed('"') == [FieldCompleted("canvas", 0, "canvas", "body", "Once upon a time")]


def test_escapes_split_across_chunks_are_decoded_whole() -> None:
    text = '{"s": "line\\nquote\\" tab\\t slash\\/ e\\u00e9 smile\\ud83d\\ude00 end"}'
    expected = json.loads(text)["s"]
    for size in (1, 2, 3, 5, 7):
        events = stream(text, size)
        assert "".join(string_deltas(events, "s")) == expected
        assert completed(events) == [("s", expected)]


def test_a_lone_surrogate_becomes_a_replacement_character() -> None:
    assert completed(stream('{"s": "a\\ud83d b\\ude00"}', 1)) == [("s", "a\ufffd b\ufffd")]


def test_brackets_and_quotes_inside_nested_strings_do_not_end_a_value() -> None:
    text = '{"list": ["]", "}", "\\"]"], "obj": {"k": "{[\\\\"}}'
    assert completed(stream(text, 1)) == list(json.loads(text).items())


@pytest.mark.parametrize(("literal", "value"), [("true", True), ("false", False), ("null", None), ("-1.5e3", -1500.0)])
def test_literals_and_numbers_complete_at_the_next_delimiter(literal: str, value: object) -> None:
    assert completed(stream(f'{{"a": {literal}, "b": {literal}}}', 1)) == [("a", value), ("b", value)]


def test_a_number_cut_off_by_the_end_of_the_stream_is_complete_at_finish() -> None:
    assert completed(stream('{"n": 42', 1)) == [("n", 42)]


def test_a_code_fence_and_blank_lines_before_the_object_are_skipped() -> None:
    assert completed(stream('\n ```json\n\n  {"a": 1}\n```', 1)) == [("a", 1)]


def test_a_channel_that_is_not_an_object_streams_nothing() -> None:
    assert stream('[{"a": 1}]') == []
    assert stream("plain words") == []


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ('{"a": 1, "b": nope, "c": 3}', ["a"]),
        ('{"a" 1}', []),
        ('{"a": 1 "b": 2}', ["a"]),
        ("{1: 2}", []),
        ('{"a": "bad \\q escape", "b": 2}', []),
        ('{"a": "bad \\u12G4 hex", "b": 2}', []),
        ('{"bad \\q key": 1}', []),
        ('{"a": [1, 2}, "b": 2}', []),
    ],
)
def test_malformed_json_stops_the_field_stream_without_raising(text: str, fields: list[str]) -> None:
    assert [field for field, _ in completed(stream(text, 1))] == fields


def test_field_names_with_escapes_are_decoded() -> None:
    assert completed(stream('{"a\\"b\\u00e9": 1}', 1)) == [('a"bé', 1)]


def test_fields_go_to_the_composite_marker_and_arrive_before_the_channel_closes(render: RenderRun) -> None:
    events, result = render([CANVAS], ['<channel:canvas>{"title": "T", "rows": [1, 2]}</channel:canvas>'])
    field_events = [e for e in events if isinstance(e, FieldDelta | FieldCompleted)]
    assert {e.marker for e in field_events} == {"canvas"}
    closed_at = next(i for i, e in enumerate(events) if isinstance(e, ChannelClosed))
    assert all(events.index(e) < closed_at for e in field_events)
    assert result.channel("canvas").instances[0].parsed == {"title": "T", "rows": [1, 2]}


def test_a_custom_composite_marker_is_used(render: RenderRun) -> None:
    spec = ChannelSpec(name="report", format="json", composite=True, composite_marker="panel")
    events, _ = render([spec], ['<channel:report>{"a": "x", "b": 1}</channel:report>'])
    assert [(e.marker, e.field) for e in events if isinstance(e, FieldCompleted)] == [
        ("panel", "a"),
        ("panel", "b"),
    ]


def test_citations_in_composite_string_fields_are_rendered_when_the_channel_asks(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    spec = ChannelSpec(name="canvas", format="json", composite=True, replace_citations=True)
    text = '<channel:canvas>{"body": "Fact [[S:2]].", "n": 1}</channel:canvas>'
    events, result = render([spec], list(text), sources=sources)
    body = "".join(e.text for e in events if isinstance(e, FieldDelta) and e.field == "body")
    assert body == "Fact [Source 2](https://example.org/s/2)."
    assert [s.sid for s in result.channel("canvas").used_sources] == [2]
    assert result.channel("canvas").raw_text == '{"body": "Fact [[S:2]].", "n": 1}'


def test_a_citation_candidate_at_the_end_of_a_field_is_released_when_the_field_completes(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    spec = ChannelSpec(name="canvas", format="json", composite=True, replace_citations=True)
    events, _ = render(
        [spec], list('<channel:canvas>{"a": "x [[S:1", "b": "[[S:1]]"}</channel:canvas>'), sources=sources
    )
    deltas = [(e.field, e.text) for e in events if isinstance(e, FieldDelta)]
    assert "".join(text for field, text in deltas if field == "a") == "x [[S:1"
    assert "".join(text for field, text in deltas if field == "b") == "[Source 1](https://example.org/s/1)"
    assert [e.field for e in events if isinstance(e, FieldCompleted)] == ["a", "b"]


def test_an_unfinished_string_field_releases_its_held_text_when_the_channel_ends(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    spec = ChannelSpec(name="canvas", format="json", composite=True, replace_citations=True)
    events, _ = render([spec], ['<channel:canvas>{"a": "cut [['], sources=sources)
    assert "".join(e.text for e in events if isinstance(e, FieldDelta)) == "cut [["
    assert not any(isinstance(e, FieldCompleted) for e in events)


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=5),
    ensure_ascii=st.booleans(),
    data=st.data(),
)
def test_any_object_in_any_chunking_streams_every_field_exactly(
    obj: dict[str, object], ensure_ascii: bool, data: st.DataObject
) -> None:
    text = json.dumps(obj, ensure_ascii=ensure_ascii)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=12))))
    streamer = CompositeJsonStreamer("c", 0, "canvas")
    events: list[FieldEvent] = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        events.extend(streamer.feed(text[a:b]))
    events.extend(streamer.finish())
    assert completed(events) == list(obj.items())
    for key, value in obj.items():
        if isinstance(value, str):
            assert "".join(string_deltas(events, key)) == value
