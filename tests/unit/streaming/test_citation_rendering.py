"""Citation tokens: grammar, rendering per format, unknown SIDs, chunk safety and used sources."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.streaming import (
    ChannelDelta,
    ChannelSpec,
    CitationScanner,
    CitationSource,
    StreamEvent,
    StreamResult,
    cited_sids,
    render_citations,
)
from berth.streaming.citations import MAX_SIDS_PER_TOKEN, TOKEN_MAX_LEN, parse_sids

RenderRun = Callable[..., tuple[list[StreamEvent], StreamResult]]

ANSWER = ChannelSpec(name="answer", replace_citations=True, emit_marker="answer")
PAGE = ChannelSpec(name="page", format="html", replace_citations=True, emit_marker="canvas")
NOTES = ChannelSpec(name="notes", format="text", replace_citations=True, emit_marker="notes")
PLAIN = ChannelSpec(name="plain", emit_marker="plain")


def link(sid: int) -> str:
    return f"[Source {sid}](https://example.org/s/{sid})"


@pytest.mark.parametrize(
    ("body", "sids"),
    [("1", (1,)), ("1,3", (1, 3)), ("2-4", (2, 3, 4)), ("4 - 2", (2, 3, 4)), ("3, 1-2, 3", (3, 1, 2))],
)
def test_token_bodies_name_sids_in_order_without_repeats(body: str, sids: tuple[int, ...]) -> None:
    assert parse_sids(body) == sids


def test_a_token_naming_too_many_sources_stands_for_the_first_of_them() -> None:
    first = tuple(range(1, MAX_SIDS_PER_TOKEN + 1))
    assert parse_sids(f"1-{MAX_SIDS_PER_TOKEN}") == first
    assert parse_sids(f"1-{MAX_SIDS_PER_TOKEN + 1}") == first
    assert parse_sids(",".join(str(i) for i in range(1, MAX_SIDS_PER_TOKEN + 2))) == first


@pytest.mark.parametrize(
    ("token", "rendered"),
    [
        ("[[S:1]]", link(1)),
        ("[[S:1,3]]", f"{link(1)}, {link(3)}"),
        ("[[S:2-4]]", f"{link(2)}, {link(3)}, {link(4)}"),
        ("[[ S : 1 , 3 ]]", f"{link(1)}, {link(3)}"),
        ("[[s:\t2 -\t3]]", f"{link(2)}, {link(3)}"),
    ],
)
def test_markdown_tokens_become_title_links(token: str, rendered: str, sources: dict[int, CitationSource]) -> None:
    assert render_citations(f"Paris {token}.", sources) == f"Paris {rendered}."


def test_html_tokens_become_a_sup_cite_with_links(sources: dict[int, CitationSource]) -> None:
    assert render_citations("x [[S:1,3]]", sources, "html") == (
        'x <sup class="cite" data-sids="1,3">'
        '<a href="https://example.org/s/1" title="Source 1">[1]</a>'
        '<a href="https://example.org/s/3" title="Source 3">[3]</a></sup>'
    )


def test_html_rendering_escapes_titles_and_urls() -> None:
    sources = {1: CitationSource(sid=1, url='https://e.org/?a=1&b="2"', title="<b>Tom & Jerry</b>")}
    assert render_citations("[[S:1]]", sources, "html") == (
        '<sup class="cite" data-sids="1"><a href="https://e.org/?a=1&amp;b=&quot;2&quot;" '
        'title="&lt;b&gt;Tom &amp; Jerry&lt;/b&gt;">[1]</a></sup>'
    )


def test_markdown_rendering_escapes_brackets_in_titles_and_parentheses_in_urls() -> None:
    sources = {1: CitationSource(sid=1, url="https://e.org/wiki/A_(b) c", title="[Draft]\nnotes")}
    assert render_citations("[[S:1]]", sources) == r"[\[Draft\] notes](https://e.org/wiki/A_%28b%29%20c)"


def test_a_source_without_title_is_labelled_by_its_url() -> None:
    sources = {7: CitationSource(sid=7, url="https://e.org/x")}
    assert render_citations("[[S:7]]", sources) == "[https://e.org/x](https://e.org/x)"


def test_unknown_sids_are_dropped_never_shown_raw(sources: dict[int, CitationSource]) -> None:
    assert render_citations("a [[ S:99 ]] b", sources) == "a b"
    assert render_citations("a [[S:1,99]] b", sources) == f"a {link(1)} b"


def test_a_source_that_is_not_http_is_not_linked() -> None:
    sources = {1: CitationSource(sid=1, url="javascript:alert(1)", title="x")}
    assert render_citations("[[S:1]]", sources) == ""
    assert not sources[1].citable


@pytest.mark.parametrize(
    "text",
    ["[[S:]]", "[[S:1]", "[S:1]]", "[[X:1]]", "[[S:1;2]]", "[[S : one]]", "[[S:1-]]"],
)
def test_text_that_is_not_a_token_is_left_alone(text: str, sources: dict[int, CitationSource]) -> None:
    assert render_citations(text, sources) == text


def test_a_token_longer_than_the_limit_is_text(sources: dict[int, CitationSource]) -> None:
    token = "[[S:" + " " * TOKEN_MAX_LEN + "1]]"
    assert render_citations(token, sources) == token


def test_a_citation_split_across_chunks_is_never_partly_emitted(sources: dict[int, CitationSource]) -> None:
    text = "see [[ S:1 , 3 ]] and [[S:2-4]]!"
    for cut in range(len(text) + 1):
        scanner = CitationScanner(sources)
        first, raw_first = scanner.feed(text[:cut])
        second, raw_second = scanner.feed(text[cut:])
        last, raw_last = scanner.flush()
        assert first + second + last == render_citations(text, sources)
        assert raw_first + raw_second + raw_last == text
        for piece in (first, second):
            assert "[[" not in piece and not piece.endswith("["), (cut, piece)


def test_a_held_candidate_that_is_not_a_token_is_released_unchanged(
    sources: dict[int, CitationSource],
) -> None:
    scanner = CitationScanner(sources)
    assert scanner.feed("x [[S:1") == ("x", "x")  # the space goes with the token if it is dropped
    assert scanner.feed(" is no citation") == (" [[S:1 is no citation", " [[S:1 is no citation")


def test_the_stored_raw_text_keeps_the_tokens(render: RenderRun, sources: dict[int, CitationSource]) -> None:
    events, result = render([ANSWER], ["<channel:answer>A [[S:1]].</channel:answer>"], sources=sources)
    assert result.channel("answer").raw_text == "A [[S:1]]."
    deltas = [e for e in events if isinstance(e, ChannelDelta)]
    assert "".join(d.text for d in deltas) == f"A {link(1)}."
    assert "".join(d.raw for d in deltas) == "A [[S:1]]."


def test_each_format_renders_its_own_way(render: RenderRun, sources: dict[int, CitationSource]) -> None:
    text = "<channel:page>[[S:2]]</channel:page><channel:notes>[[S:2]]</channel:notes>"
    events, _ = render([PAGE, NOTES], [text], sources=sources)
    rendered = {e.channel: e.text for e in events if isinstance(e, ChannelDelta)}
    assert rendered["page"].startswith('<sup class="cite" data-sids="2">')
    assert rendered["notes"] == link(2)


def test_a_channel_that_does_not_replace_citations_emits_them_raw(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    events, result = render([PLAIN], ["<channel:plain>[[S:1]]</channel:plain>"], sources=sources)
    assert [e.text for e in events if isinstance(e, ChannelDelta)] == ["[[S:1]]"]
    assert result.channel("plain").used_sources == ()


def test_used_sources_are_kept_per_channel_in_order_of_first_citation(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    text = (
        "<channel:answer>[[S:3]] [[S:1,3]] [[S:42]]</channel:answer>"
        "<channel:page>[[S:2]]</channel:page><channel:answer>[[S:5]]</channel:answer>"
    )
    _, result = render([ANSWER, PAGE], list(text), sources=sources)
    assert [s.sid for s in result.channel("answer").used_sources] == [3, 1, 5]
    assert result.channel("answer").unknown_sids == (42,)
    assert [s.sid for s in result.channel("page").used_sources] == [2]


def test_cited_sids_lists_what_raw_text_cites() -> None:
    assert cited_sids("a [[S:3]] b [[S:1-2, 3]] c [[S:nope]]") == (3, 1, 2)


def test_a_token_naming_too_many_sources_links_the_known_among_the_first(
    sources: dict[int, CitationSource],
) -> None:
    token = f"[[S:{MAX_SIDS_PER_TOKEN + 1}, 1-{MAX_SIDS_PER_TOKEN + 1}]]"
    assert render_citations(token, sources) == ", ".join(link(sid) for sid in range(1, 6))
    assert cited_sids(token) == (MAX_SIDS_PER_TOKEN + 1, *range(1, MAX_SIDS_PER_TOKEN))


def test_cited_sids_ignores_tokens_longer_than_the_limit() -> None:
    assert cited_sids("[[S:" + " " * TOKEN_MAX_LEN + "1]] [[S:2]]") == (2,)


def test_many_distinct_tokens_in_one_instance_all_render() -> None:
    # more distinct tokens than the scanner keeps rendered, to go through its eviction
    many = {sid: CitationSource(sid=sid, url=f"https://e.org/{sid}", title=f"S{sid}") for sid in range(1, 1501)}
    scanner = CitationScanner(many)
    rendered, _ = scanner.feed(" ".join(f"[[S:{sid}]]" for sid in [*many, 1, 2]))
    assert rendered == " ".join(f"[S{sid}](https://e.org/{sid})" for sid in [*many, 1, 2])
    assert list(scanner.used) == list(many)


def test_a_two_megabyte_cited_answer_streams_exactly_like_the_one_shot_rendering(
    render: RenderRun, sources: dict[int, CitationSource]
) -> None:
    paragraph = "Growth was strong [[S:1]], costs fell [[ S:2 , 4 ]] and `a < b` [[S:9]].\n"
    body = paragraph * (2 * 1024 * 1024 // len(paragraph))
    text = f"<channel:answer>{body}</channel:answer>"
    events, result = render([ANSWER], [text[i : i + 1000] for i in range(0, len(text), 1000)], sources=sources)
    deltas = [e for e in events if isinstance(e, ChannelDelta)]
    assert "".join(d.text for d in deltas) == render_citations(body, sources)
    assert result.channel("answer").raw_text == body
    assert [s.sid for s in result.channel("answer").used_sources] == [1, 2, 4]
    assert result.channel("answer").unknown_sids == (9,)


citation_tokens = st.lists(st.integers(0, 12), min_size=1, max_size=4).map(
    lambda sids: "[[S:" + ",".join(map(str, sids)) + "]]"
)
prose = st.text(alphabet=st.characters(blacklist_characters="[]"), max_size=20)


@given(
    pieces=st.lists(st.one_of(prose, citation_tokens), max_size=12),
    known=st.sets(st.integers(0, 12), max_size=6),
    cuts=st.lists(st.integers(1, 7), max_size=30),
)
@settings(max_examples=300)
def test_no_citation_token_is_ever_shown_raw_whatever_the_pool_and_the_chunking(
    pieces: list[str], known: set[int], cuts: list[int]
) -> None:
    pool = {sid: CitationSource(sid=sid, url=f"https://example.org/{sid}", title=f"T{sid}") for sid in known}
    text = "".join(pieces)
    whole = render_citations(text, pool)
    scanner = CitationScanner(pool)
    streamed, position = [], 0
    for cut in cuts:
        streamed.append(scanner.feed(text[position : position + cut])[0])
        position += cut
    streamed.append(scanner.feed(text[position:])[0])
    streamed.append(scanner.flush()[0])
    assert "".join(streamed) == whole
    assert "[[S:" not in whole


@given(
    word=st.text(alphabet="abcxyz", min_size=1, max_size=8),
    spaces=st.text(alphabet=" \t", max_size=4),
    after=st.sampled_from([".", ",", "!", " next", "\nnext", ""]),
    cuts=st.lists(st.integers(1, 5), max_size=12),
)
@settings(max_examples=300)
def test_a_dropped_token_takes_the_spaces_before_it_along_whatever_the_chunking(
    word: str, spaces: str, after: str, cuts: list[int], sources: dict[int, CitationSource]
) -> None:
    text = f"{word}{spaces}[[S:99]]{after}"  # SID 99 is in no pool: the token is dropped
    scanner = CitationScanner(sources)
    streamed, position = [], 0
    for cut in cuts:
        streamed.append(scanner.feed(text[position : position + cut])[0])
        position += cut
    streamed.append(scanner.feed(text[position:])[0])
    streamed.append(scanner.flush()[0])
    assert "".join(streamed) == render_citations(text, sources) == f"{word}{after}"


def test_a_known_token_keeps_the_space_before_it(sources: dict[int, CitationSource]) -> None:
    assert render_citations("Paris [[S:1]].", sources) == f"Paris {link(1)}."
    assert render_citations("Paris  [[S:99]] [[S:1]].", sources) == f"Paris {link(1)}."
