"""Document chunkers of the knowledge-space indexer: markdown and HTML sections (titles, GitHub anchors, line
ranges), plain-text windows, PDF pages, parts of long sections, the text-file guard and the dispatch by suffix;
with property tests of the markdown and plain-text parsers on arbitrary text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, SkipFile, base_anchor
from berth.knowledge.text import (
    DOCUMENT_SUFFIXES,
    TEXT_WINDOW_CHARS,
    chunk_document,
    chunk_html,
    chunk_markdown,
    chunk_pdf,
    chunk_text,
    decode_text,
)
from berth.testing.documents import encrypted_pdf, pdf_bytes

DEPLOY_MD = """\
---
title: Deploying Berth
tags: [ops]
---
Read this before the first deploy.

# Deploy

Berth runs as a compose stack or on Kubernetes.

```sh
# this is a shell comment, not a heading
docker compose up -d
```

## The compose stack

### Variables

Set `BERTH_SECRET` first.

### Volumes

Data lives in `/var/lib/berth`.

## Usage

Run it.

## Usage

Again, a second section of the same name.

The `berth run` command
-----------------------

Runs one bundle.

Troubleshooting
===============

## Usage
"""


def _file_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _outline(chunks: Sequence[Chunk]) -> list[tuple[str, str, int, int]]:
    return [(chunk.anchor, chunk.title, chunk.first_line, chunk.last_line) for chunk in chunks]


# --- markdown ---------------------------------------------------------------------------------------------------


def test_markdown_sections_have_heading_paths_github_anchors_and_line_ranges() -> None:
    chunks = chunk_markdown("docs/deploy.md", DEPLOY_MD)
    assert _outline(chunks) == [
        ("top", "Deploy", 1, 6),
        ("deploy", "Deploy", 7, 15),
        ("the-compose-stack", "Deploy > The compose stack", 16, 17),
        ("variables", "Deploy > The compose stack > Variables", 18, 21),
        ("volumes", "Deploy > The compose stack > Volumes", 22, 25),
        ("usage", "Deploy > Usage", 26, 29),
        ("usage-1", "Deploy > Usage", 30, 33),
        ("the-berth-run-command", "Deploy > The berth run command", 34, 38),
        ("troubleshooting", "Troubleshooting", 39, 41),
        ("usage-2", "Troubleshooting > Usage", 42, 42),
    ]
    assert {chunk.kind for chunk in chunks} == {"section"}
    lines = _file_lines(DEPLOY_MD)
    for chunk in chunks:  # every section is its lines, verbatim
        assert chunk.text == "\n".join(lines[chunk.first_line - 1 : chunk.last_line])
    assert chunks[0].text.startswith("---\ntitle: Deploying Berth\n")
    assert "# this is a shell comment" in chunks[1].text
    assert chunks[7].text.startswith("The `berth run` command\n-----")


def test_markdown_without_headings_is_one_top_chunk_titled_with_the_file_name() -> None:
    chunks = chunk_markdown("notes/todo.md", "- buy milk\n- # not a heading? it is one: in a list\n")
    assert [chunk.anchor for chunk in chunks] == ["top", "not-a-heading-it-is-one-in-a-list"]
    assert chunks[0].title == "not a heading? it is one: in a list"
    chunks = chunk_markdown("notes/todo.md", "\n\njust text\n```\n# fenced\n```\n")
    assert _outline(chunks) == [("top", "todo.md", 1, 6)]


def test_a_blank_preamble_is_no_chunk_and_a_heading_named_top_does_not_take_its_anchor() -> None:
    chunks = chunk_markdown("a.md", "\n   \n# Top\ntext\n# Top\n")
    assert _outline(chunks) == [("top-1", "Top", 3, 4), ("top-2", "Top", 5, 5)]


def test_heading_text_drops_markup_for_slug_and_title() -> None:
    chunks = chunk_markdown("a.md", "# Use `berth run` with [the CLI](cli.md) & *care*\n")
    assert _outline(chunks) == [("use-berth-run-with-the-cli--care", "Use berth run with the CLI & care", 1, 1)]


def test_lines_are_split_on_newlines_only() -> None:
    chunks = chunk_markdown("a.md", "intro\r# not a heading: a lone CR does not end a line\n# Real\f\n")
    assert _outline(chunks) == [("top", "Real", 1, 1), ("real", "Real", 2, 2)]


def test_a_long_section_is_split_into_parts_at_paragraphs() -> None:
    paragraph = " ".join(["lorem ipsum dolor sit amet"] * 36)  # 971 characters
    body = "\n\n".join(f"{n}: {paragraph}" for n in range(14))
    text = f"# Guide\n\nintro\n\n## Install\n\n{body}\n\n## Next\n\nend\n"
    chunks = chunk_markdown("guide.md", text)
    install = [chunk for chunk in chunks if base_anchor(chunk.anchor) == "install"]
    assert [chunk.anchor for chunk in install] == ["install", "install~p2", "install~p3", "install~p4"]
    assert {chunk.title for chunk in install} == {"Guide > Install"}
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in install)
    lines = _file_lines(text)
    for chunk in install:
        assert chunk.text == "\n".join(lines[chunk.first_line - 1 : chunk.last_line])
    assert install[0].text.startswith("## Install\n")
    assert all(chunk.text.endswith("\n") for chunk in install[:-1])  # each part ends after a paragraph's blank line
    for before, after in pairwise(install):
        assert after.first_line == before.last_line + 1
    assert install[0].first_line == 5
    assert chunks[-1].anchor == "next"
    assert install[-1].last_line == chunks[-1].first_line - 1


def test_a_section_of_one_long_paragraph_is_split_at_lines_and_one_long_line_is_cut() -> None:
    lines = [f"line {n} " + "x" * 990 for n in range(9)]
    chunks = chunk_markdown("a.md", "# Log\n" + "\n".join(lines) + "\n")
    assert [chunk.anchor for chunk in chunks] == ["log", "log~p2", "log~p3"]
    assert [(chunk.first_line, chunk.last_line) for chunk in chunks] == [(1, 5), (6, 9), (10, 10)]
    long_line = "word " * 2000  # 10,000 characters, cut at spaces
    chunks = chunk_markdown("a.md", f"# Data\n{long_line}\ntail\n")
    assert _outline(chunks) == [
        ("data", "Data", 1, 1),
        ("data~p2", "Data", 2, 2),
        ("data~p3", "Data", 2, 2),
        ("data~p4", "Data", 2, 2),
        ("data~p5", "Data", 3, 3),
    ]
    assert [len(chunk.text) for chunk in chunks] == [6, 4_000, 4_000, 2_000, 4]
    assert "".join(chunk.text for chunk in chunks[1:4]) == long_line


# --- plain text -------------------------------------------------------------------------------------------------


def test_plain_text_is_windows_of_whole_paragraphs() -> None:
    paragraph = "a" * 600
    text = f"{paragraph}\n{paragraph}\n\n{paragraph}\n\n\n{paragraph}\n\nshort\n"
    chunks = chunk_text("docs/readme.txt", text)
    assert _outline(chunks) == [("L1-2", "readme.txt", 1, 2), ("L4-9", "readme.txt", 4, 9)]
    assert {chunk.kind for chunk in chunks} == {"window"}
    assert chunks[0].text == f"{paragraph}\n{paragraph}"
    assert chunks[1].text == f"{paragraph}\n\n\n{paragraph}\n\nshort"
    assert all(len(chunk.text) <= TEXT_WINDOW_CHARS for chunk in chunks)


def test_plain_text_cuts_an_over_long_line_into_parts_of_its_range() -> None:
    chunks = chunk_text("a.txt", "intro\n\n" + "y" * 9_000 + "\n")
    assert _outline(chunks) == [
        ("L1-1", "a.txt", 1, 1),
        ("L3-3", "a.txt", 3, 3),
        ("L3-3~p2", "a.txt", 3, 3),
        ("L3-3~p3", "a.txt", 3, 3),
    ]
    assert [len(chunk.text) for chunk in chunks[1:]] == [4_000, 4_000, 1_000]


# --- HTML -------------------------------------------------------------------------------------------------------

PAGE_HTML = """\
<!doctype html>
<html><head><title>Manual</title>
<style>h1 { color: red }</style>
<script>document.write("<h1>not a heading</h1>")</script></head>
<body>
<header><h1>Site name</h1></header>
<nav><a href="/">Home</a> <a href="/docs">Docs</a></nav>
<p>An   introduction
   spread over lines.</p>
<h1 id="intro">Getting started</h1>
<p>Install it with <code>pip</code>.</p>
<ul><li>one</li><li>two</li></ul>
<h2>Getting started</h2>
<pre>$ berth run
  --verbose</pre>
<h2 id="faq">FAQ <a class="headerlink" href="#faq">¶</a></h2>
<table><tr><th>Q</th><th>A</th></tr></table>
<h1>Reference</h1>
<p>Last.</p>
<!-- a comment -->
<footer>Copyright</footer>
</body></html>
"""


def test_html_sections_by_headings_with_ids_as_anchors_and_chrome_dropped() -> None:
    chunks = chunk_html("site/manual.html", PAGE_HTML)
    assert _outline(chunks) == [
        ("top", "Getting started", 1, 9),
        ("intro", "Getting started", 10, 12),
        ("getting-started", "Getting started > Getting started", 13, 15),
        ("faq", "Getting started > FAQ", 16, 17),
        ("reference", "Reference", 18, 22),
    ]
    texts = [chunk.text for chunk in chunks]
    assert texts[0] == "An introduction spread over lines."
    assert texts[1] == "Getting started\nInstall it with pip.\none\ntwo"
    assert texts[2] == "Getting started\n$ berth run\n  --verbose"
    assert texts[3] == "FAQ\nQ A"
    assert texts[4] == "Reference\nLast."
    everything = "\n".join(texts)
    for dropped in ("not a heading", "color", "Site name", "Home", "Copyright", "Manual", "a comment"):
        assert dropped not in everything


def test_an_articles_own_header_is_content_and_an_empty_page_has_no_chunks() -> None:
    chunks = chunk_html("post.html", "<article><header><h1>Post</h1></header><p>Body</p></article>")
    assert _outline(chunks) == [("post", "Post", 1, 1)]
    assert chunks[0].text == "Post\nBody"
    assert chunk_html("empty.html", "") == []
    assert chunk_html("empty.html", "<!-- nothing -->\n<script>x()</script>") == []


def test_deeply_nested_html_is_read_and_html_past_the_parsers_limit_is_skipped() -> None:
    nested = "<p>start</p>" + "<div>" * 1_500 + "deep" + "</div>" * 1_500 + "<p>end</p>"
    assert [chunk.text for chunk in chunk_html("deep.html", nested)] == ["start\ndeep\nend"]
    with pytest.raises(SkipFile) as raised:
        chunk_html("deeper.html", "<div>" * 3_000)
    assert raised.value.reason.startswith("not readable HTML: Excessive depth in document")


# --- PDF --------------------------------------------------------------------------------------------------------


def test_pdf_pages_with_text_are_chunks_and_a_long_page_has_parts() -> None:
    chunks = chunk_pdf("manuals/box.pdf", pdf_bytes(["Invoice 42", "", "word " * 1000]))
    assert _outline(chunks) == [
        ("page-1", "box.pdf page 1", 1, 1),
        ("page-3", "box.pdf page 3", 3, 3),
        ("page-3~p2", "box.pdf page 3", 3, 3),
    ]
    assert {chunk.kind for chunk in chunks} == {"page"}
    assert chunks[0].text == "Invoice 42"
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in chunks)
    assert (chunks[1].text + chunks[2].text).split() == ["word"] * 1000


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (pdf_bytes(["Invoice 42"])[:150], "not a readable PDF: "),
        (b"%PDF-1.7\n" + bytes(range(256)) * 4, "not a readable PDF: "),
        (b"PK\x03\x04 a zip, not a PDF", "not a readable PDF: it does not start with %PDF-"),
        (encrypted_pdf(["the secret plan"]), "not a readable PDF: it is encrypted (it needs a password)"),
    ],
    ids=["truncated", "garbage", "not-a-pdf", "encrypted"],
)
def test_an_unreadable_pdf_is_skipped_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(SkipFile) as raised:
        chunk_pdf("bad.pdf", data)
    assert raised.value.reason.startswith(reason)


# --- files ------------------------------------------------------------------------------------------------------


def test_decode_text_drops_a_bom_and_normalizes_line_ends() -> None:
    assert decode_text(b"\xef\xbb\xbfh\xc3\xa9llo\r\nworld\r\n", "a.txt") == "héllo\nworld\n"
    assert decode_text(b"x" * 9_000 + b"\x00", "a.txt").endswith("x\x00")  # a NUL past the probe is text


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file (NUL bytes)"),
        (b"caf\xe9 au lait", "not valid UTF-8 at byte 3"),
        (b"\xef\xbb\xbfok \xc3(", "not valid UTF-8 at byte 6"),
        (b"abc" * 100 + b"\xff", "not valid UTF-8 at byte 300"),
    ],
    ids=["nul", "latin-1", "after-bom", "late"],
)
def test_decode_text_skips_binary_and_invalid_utf8_with_the_offset(data: bytes, reason: str) -> None:
    with pytest.raises(SkipFile) as raised:
        decode_text(data, "file.txt")
    assert raised.value.reason == reason


def test_chunk_document_dispatches_by_suffix() -> None:
    assert DOCUMENT_SUFFIXES[".mdx"] == "markdown" and DOCUMENT_SUFFIXES[".htm"] == "html"
    assert [chunk.anchor for chunk in chunk_document("docs/README.MD", b"# Hello\r\nworld\r\n")] == ["hello"]
    assert chunk_document("docs/README.MD", b"# Hello\r\nworld\r\n")[0].text == "# Hello\nworld"
    assert [chunk.anchor for chunk in chunk_document("notes.rst", b"Title\n=====\n\ntext\n")] == ["L1-4"]
    assert [chunk.anchor for chunk in chunk_document("p.htm", b"<h1>Hi</h1>")] == ["hi"]
    assert [chunk.anchor for chunk in chunk_document("m.PDF", pdf_bytes(["one"]))] == ["page-1"]
    for path, data, reason in [
        ("report.docx", b"PK", "unsupported document type .docx"),
        ("Makefile", b"all:", "unsupported document type (no suffix)"),
        ("notes.txt", b"\x00\x01", "binary file (NUL bytes)"),
    ]:
        with pytest.raises(SkipFile) as raised:
            chunk_document(path, data)
        assert raised.value.reason == reason


# --- properties -------------------------------------------------------------------------------------------------

_MARKDOWN_LINES = st.sampled_from(
    [
        "# Title", "## Usage", "### Usage", "#", "# Top", "Setext", "===", "---", "...", "```", "~~~", "",
        "   ", "\r", "x\r# y", "\f", "    # indented code", "> # quoted", "- # listed", "text", "<h1>x</h1>",
        "title: x",
    ]
)  # fmt: skip
_LONG_LINES = st.builds(
    lambda piece, count: piece * count,
    st.sampled_from(["x", "word ", "# ", "\n"]),
    st.integers(0, MAX_CHUNK_CHARS + 300),
)
_DOCUMENTS = st.one_of(
    st.text(),
    st.lists(st.one_of(_MARKDOWN_LINES, st.text(max_size=30), _LONG_LINES), max_size=30).map("\n".join),
    st.lists(_MARKDOWN_LINES, max_size=60).map("\n".join),
)


def _check_chunks(text: str, chunks: Sequence[Chunk]) -> None:
    lines = _file_lines(text)
    anchors = [chunk.anchor for chunk in chunks]
    assert len(set(anchors)) == len(anchors)
    for chunk in chunks:
        assert 0 < len(chunk.text) <= MAX_CHUNK_CHARS
        assert 1 <= chunk.first_line <= chunk.last_line <= len(lines)
        cut = chunk.first_line == chunk.last_line and len(lines[chunk.first_line - 1]) > MAX_CHUNK_CHARS
        if not cut:  # only a single over-long line is cut inside: everything else is whole lines, verbatim
            assert chunk.text == "\n".join(lines[chunk.first_line - 1 : chunk.last_line])
    for before, after in pairwise(chunks):
        same_cut_line = before.last_line == after.first_line == after.last_line == before.first_line
        assert after.first_line > before.last_line or same_cut_line
    for number, line in enumerate(lines, start=1):
        if line.strip():
            covering = "".join(chunk.text for chunk in chunks if chunk.first_line <= number <= chunk.last_line)
            assert line in covering


@pytest.mark.parametrize("chunker", [chunk_markdown, chunk_text], ids=["markdown", "text"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=_DOCUMENTS)
def test_chunkers_cover_any_text_in_order_with_unique_anchors(
    chunker: Callable[[str, str], list[Chunk]], text: str
) -> None:
    _check_chunks(text, chunker("dir/file.md", text))


@settings(max_examples=100, deadline=None)
@given(text=st.one_of(st.text(), _DOCUMENTS.map(lambda text: text.replace("#", "<h2>").replace("---", "<p>"))))
def test_html_chunking_of_any_text_gives_chunks_or_a_skip(text: str) -> None:
    try:
        chunks = chunk_html("page.html", text)
    except SkipFile as skip:  # markup nested past the parser's limit
        reason = skip.reason
    else:
        assert len({chunk.anchor for chunk in chunks}) == len(chunks)
        assert all(0 < len(chunk.text) <= MAX_CHUNK_CHARS for chunk in chunks)
        assert all(1 <= chunk.first_line <= chunk.last_line for chunk in chunks)
        return
    assert reason.startswith("not readable HTML: ")


@given(data=st.binary(max_size=200))
def test_decode_text_gives_text_or_a_skip(data: bytes) -> None:
    try:
        text = decode_text(data, "any.txt")
    except SkipFile as skip:
        reason = skip.reason
    else:
        assert "\r\n" not in text
        return
    assert reason == "binary file (NUL bytes)" or reason.startswith("not valid UTF-8 at byte ")
