"""A citation marker is never shown raw: whatever it names, however it is spaced, however it is chunked.

A marker citing sources the pool does not have is dropped; one citing more than the per-token limit links
the known sources among the first it names; one listing many sources with spaces still renders.
"""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from berth.streaming import ChannelDelta, ChannelRenderer, ChannelSpec, CitationScanner, CitationSource, cited_sids
from berth.streaming.citations import MAX_SIDS_PER_TOKEN, TOKEN_MAX_LEN, CitationStyle, parse_sids, render_citations

# the grammar of a marker, as a reader would recognise one (any case, spaces and tabs anywhere inside)
RAW_MARKER = re.compile(r"\[\[[ \t]*s[ \t]*:[ \t\d,\-]*\]\]", re.I)

ANSWER = ChannelSpec(name="answer", replace_citations=True, emit_marker="answer")


def pool_of(sids: set[int]) -> dict[int, CitationSource]:
    return {sid: CitationSource(sid=sid, url=f"https://example.org/{sid}", title=f"T{sid}") for sid in sids}


blanks = st.text(alphabet=" \t", max_size=2)
sids = st.integers(0, 12) | st.integers(0, 10**6)
items = st.one_of(
    st.builds(lambda sid, b: f"{sid}{b}", sids, blanks),
    st.builds(lambda low, high, b1, b2: f"{low}{b1}-{b2}{high}", sids, sids, blanks, blanks),
)
markers = st.builds(
    lambda b1, s, b2, b3, body, b4: f"[[{b1}{s}{b2}:{b3}{body}{b4}]]",
    blanks,
    st.sampled_from("Ss"),
    blanks,
    blanks,
    st.lists(items, min_size=1, max_size=40).flatmap(
        lambda parts: st.lists(blanks, min_size=len(parts), max_size=len(parts)).map(
            lambda gaps: ",".join(f"{gap}{part}" for gap, part in zip(gaps, parts, strict=True))
        )
    ),
    blanks,
)
prose = st.text(alphabet=st.characters(blacklist_characters="[]", blacklist_categories=["Cs"]), max_size=20)


def streamed(text: str, pool: dict[int, CitationSource], cuts: list[int], style: CitationStyle) -> str:
    scanner = CitationScanner(pool, style)
    pieces, position = [], 0
    for cut in cuts:
        pieces.append(scanner.feed(text[position : position + cut])[0])
        position += cut
    pieces.append(scanner.feed(text[position:])[0])
    pieces.append(scanner.flush()[0])
    return "".join(pieces)


@given(
    pieces=st.lists(st.one_of(prose, markers), max_size=8),
    known=st.sets(st.integers(0, 12), max_size=6),
    cuts=st.lists(st.integers(1, 40), max_size=40),
    style=st.sampled_from(["markdown", "html"]),
)
@example(pieces=["see ", "[[S:1-100]]"], known=set(), cuts=[], style="markdown")
@example(pieces=["[[S:" + ", ".join(map(str, range(100, 140))) + "]]"], known=set(), cuts=[3], style="markdown")
@settings(max_examples=400, deadline=None)
def test_no_marker_is_ever_shown_raw_whatever_it_names_and_however_it_is_chunked(
    pieces: list[str], known: set[int], cuts: list[int], style: CitationStyle
) -> None:
    text = "".join(pieces)
    pool = pool_of(known)
    whole = render_citations(text, pool, style)
    assert RAW_MARKER.search(whole) is None, whole
    assert streamed(text, pool, cuts, style) == whole


@given(pieces=st.lists(st.one_of(prose, markers), max_size=6), known=st.sets(st.integers(0, 12), max_size=6))
@settings(max_examples=100, deadline=None)
def test_the_answer_channel_never_emits_a_raw_marker(pieces: list[str], known: set[int]) -> None:
    document = "<channel:answer>" + "".join(pieces) + "</channel:answer>"
    renderer = ChannelRenderer([ANSWER], sources=pool_of(known))
    events = [event for cut in range(0, len(document), 5) for event in renderer.feed(document[cut : cut + 5])]
    events.extend(renderer.finish())
    emitted = "".join(event.text for event in events if isinstance(event, ChannelDelta))
    assert RAW_MARKER.search(emitted) is None, emitted


def test_a_marker_of_unknown_sources_disappears() -> None:
    assert render_citations("Paris [[S:7]] and [[ s : 8 - 9 ]].", pool_of({1})) == "Paris and."


def test_a_marker_naming_more_sources_than_the_limit_links_the_known_among_the_first() -> None:
    assert (
        render_citations("see [[S:1-100]]", pool_of({2, 3}))
        == "see [T2](https://example.org/2), [T3](https://example.org/3)"
    )
    assert render_citations("see [[S:1-100]]", pool_of({99})) == "see"
    assert render_citations("see [[S:1-100]]", {}) == "see"


def test_a_wide_range_is_never_expanded_beyond_the_limit() -> None:
    assert parse_sids("5-1000000000") == tuple(range(5, 5 + MAX_SIDS_PER_TOKEN))
    assert parse_sids("3, 1-1000000, 2") == (3, 1, 2, *range(4, MAX_SIDS_PER_TOKEN + 1))
    assert cited_sids("[[S:1-100]]") == tuple(range(1, MAX_SIDS_PER_TOKEN + 1))


def test_a_long_spaced_out_list_of_sources_still_renders() -> None:
    marker = "[[S:" + ", ".join(map(str, range(100, 164))) + "]]"  # 64 sources of three digits: ~390 characters
    assert len(marker) < TOKEN_MAX_LEN
    assert render_citations(f"a {marker} b", pool_of({7})) == "a b"
    assert render_citations(f"a {marker} b", {163: CitationSource(sid=163, url="https://e.org/", title="x")}) == (
        "a [x](https://e.org/) b"
    )


def test_a_long_marker_split_across_chunks_is_held_until_it_closes() -> None:
    marker = "[[S:" + ", ".join(map(str, range(100, 140))) + "]]"
    scanner = CitationScanner(pool_of({139}))
    emitted = [scanner.feed(marker[cut : cut + 7])[0] for cut in range(0, len(marker), 7)]
    assert "".join(emitted) + scanner.flush()[0] == "[T139](https://example.org/139)"
    assert all(piece == "" for piece in emitted[:-1])
