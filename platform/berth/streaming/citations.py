"""Citation tokens: scanning them in streamed text and rendering them for clients.

The model cites sources of the conversation's sources pool by SID: ``[[S:1]]``, ``[[S:1,3]]``,
``[[S:2-4]]`` (spaces and tabs allowed anywhere inside, ``s`` as well as ``S``). Rendering happens
only in what is sent to clients — the raw text the model wrote is stored as it was:

* ``markdown`` and ``text``: each cited source becomes ``[title](url)``, joined by ``", "``;
* ``html``: ``<sup class="cite" data-sids="1,3"><a href="…" title="…">[1]</a>…</sup>``.

A SID the lookup does not know, or whose URL is not http(s), is left out (collected in
``unknown_sids``): a token citing none that can be linked disappears, with the spaces before it, so a reader
never sees a raw ``[[S:9]]`` nor a stray space where it was (``text [[S:9]].`` reads ``text.``). A token
naming more than :data:`MAX_SIDS_PER_TOKEN` sources stands for the first that many (a range is never expanded
further). Only text longer than :data:`TOKEN_MAX_LEN` characters, which no
list of sources needs, is not a citation and is left as written. :class:`CitationScanner` holds back
only a tail that could still become a token (and the spaces before it, which a dropped token takes along), so a
token split across chunks is never partly emitted.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Literal, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

#: How a citation is rendered: markdown links, or an html ``<sup class="cite">``.
CitationStyle = Literal["markdown", "html"]

#: The longest citation token; a longer ``[[S:…]]`` is ordinary text. Generous on purpose: a model listing
#: sources one by one (``[[S:101, 102, …]]``) writes a long token, and one left as written would show raw.
#: (Keep it under 4300: ``int()`` refuses longer digit strings.)
TOKEN_MAX_LEN = 1024
#: The most sources one token stands for (after expanding ranges): the first that many it names.
MAX_SIDS_PER_TOKEN = 64

_TOKEN = re.compile(
    r"\[\[[ \t]*[Ss][ \t]*:[ \t]*"
    r"(\d+(?:[ \t]*-[ \t]*\d+)?(?:[ \t]*,[ \t]*\d+(?:[ \t]*-[ \t]*\d+)?)*)"
    r"[ \t]*\]\]"
)
# Anything that reaches the end of the buffer and may still become a token (a deliberate
# over-approximation: it is released as text as soon as a character rules it out).
_TOKEN_PREFIX = re.compile(r"\[(?:\[[ \tSs:\d,\-]*\]?)?\Z")
_MAX_CACHED_TOKENS = 1024
# how one token body renders: the text (empty: the token is dropped), known sources, unknown SIDs
_Rendering = tuple[str, tuple["CitationSource", ...], tuple[int, ...]]
_SID_ITEM = re.compile(r"(\d+)(?:[ \t]*-[ \t]*(\d+))?")
_CITABLE_SCHEMES = frozenset({"http", "https"})


class CitationSource(BaseModel):
    """The part of a sources-pool row that citation rendering needs."""

    model_config = ConfigDict(frozen=True)

    sid: int = Field(ge=0)
    url: str
    title: str = ""

    @property
    def citable(self) -> bool:
        """Whether the source may be linked: only http(s) URLs are (SPEC §4.9)."""
        return urlsplit(self.url).scheme.lower() in _CITABLE_SCHEMES


class SourceLookup(Protocol):
    """Finds a citable source by SID; a plain ``dict[int, CitationSource]`` is one."""

    def get(self, sid: int, /) -> CitationSource | None:
        """Return the source with this SID, or ``None`` when there is none."""
        ...


def parse_sids(body: str) -> tuple[int, ...]:
    """Return the SIDs a token body (``"1, 3"``, ``"2-4"``) names, in order, without repeats.

    A reversed range (``4-2``) means the same as ``2-4``. Only the first :data:`MAX_SIDS_PER_TOKEN` SIDs
    are returned: ``1-1000000`` is never expanded further.
    """
    sids: dict[int, None] = {}
    for match in _SID_ITEM.finditer(body):
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        low, high = min(first, last), max(first, last)
        for sid in range(low, min(high, low + MAX_SIDS_PER_TOKEN - 1) + 1):
            sids[sid] = None
            if len(sids) == MAX_SIDS_PER_TOKEN:
                return tuple(sids)
    return tuple(sids)


def cited_sids(text: str) -> tuple[int, ...]:
    """Return every SID cited in ``text`` (raw model output), in order of first citation."""
    sids: dict[int, None] = {}
    for match in _TOKEN.finditer(text):
        if len(match.group(0)) <= TOKEN_MAX_LEN:
            for sid in parse_sids(match.group(1)):
                sids[sid] = None
    return tuple(sids)


def render_sources(sources: Iterable[CitationSource], style: CitationStyle) -> str:
    """Render sources that replace one citation token, in ``style``."""
    if style == "html":
        listed = list(sources)
        data_sids = ",".join(str(source.sid) for source in listed)
        links = "".join(
            f'<a href="{html.escape(source.url)}" title="{html.escape(source.title or source.url)}">[{source.sid}]</a>'
            for source in listed
        )
        return f'<sup class="cite" data-sids="{data_sids}">{links}</sup>'
    return ", ".join(f"[{_markdown_label(source)}]({_markdown_url(source.url)})" for source in sources)


def render_citations(text: str, sources: SourceLookup, style: CitationStyle = "markdown") -> str:
    """Return ``text`` with every citation token rendered (the one-shot form of the scanner)."""
    scanner = CitationScanner(sources, style)
    rendered, _ = scanner.feed(text)
    tail, _ = scanner.flush()
    return rendered + tail


class CitationScanner:
    """Renders citation tokens in text that arrives in pieces.

    :meth:`feed` returns ``(rendered, raw)``: the text ready for clients and the raw input it was
    rendered from. Both stop before a tail that could still become a token; that tail is returned
    by a later call (or by :meth:`flush` at the end). ``used`` and ``unknown_sids`` collect what the
    rendered tokens cited. The lookup is asked once per distinct token: the sources are taken to
    stay the same while one scanner runs (one channel instance).
    """

    __slots__ = ("_renderings", "_sources", "_style", "_tail", "unknown_sids", "used")

    def __init__(self, sources: SourceLookup, style: CitationStyle = "markdown") -> None:
        self._sources = sources
        self._style: CitationStyle = style
        self._tail = ""
        # a model cites the same few sources again and again: render each distinct token once
        self._renderings: dict[str, _Rendering] = {}
        #: Sources rendered so far, by SID, in order of first citation.
        self.used: dict[int, CitationSource] = {}
        #: SIDs cited but not known (or not citable), in order of first citation.
        self.unknown_sids: dict[int, None] = {}

    def feed(self, text: str) -> tuple[str, str]:
        """Scan the next piece of text; return ``(rendered, raw)`` for what is now decided."""
        buf = self._tail + text if self._tail else text
        self._tail = ""
        parts: list[str] = []
        pos = 0  # start of the raw text not yet copied to ``parts``
        search = 0
        while (start := buf.find("[", search)) >= 0:
            match = _TOKEN.match(buf, start)
            if match is not None and match.end() - start <= TOKEN_MAX_LEN:
                rendered = self._render(match.group(1))
                # a dropped token takes the spaces before it along: "text [[S:9]]." reads "text.", not "text ."
                parts.append(buf[pos:start] if rendered else buf[pos:start].rstrip(" \t"))
                parts.append(rendered)
                pos = search = match.end()
                continue
            if len(buf) - start < TOKEN_MAX_LEN and _TOKEN_PREFIX.match(buf, start):
                held = _spaces_before(buf, start, pos)
                self._tail = buf[held:]
                parts.append(buf[pos:held])
                return "".join(parts), buf[:held]
            search = start + 1
        # spaces at the end may come before a token the next piece brings (and go with it): held until then
        held = _spaces_before(buf, len(buf), pos)
        if held < len(buf):
            self._tail = buf[held:]
            parts.append(buf[pos:held])
            return "".join(parts), buf[:held]
        if not parts:
            return buf, buf
        parts.append(buf[pos:])
        return "".join(parts), buf

    def flush(self) -> tuple[str, str]:
        """End of the text: release the held tail as it was (it never became a token)."""
        tail, self._tail = self._tail, ""
        return tail, tail

    def _render(self, body: str) -> str:
        rendering = self._renderings.get(body)
        if rendering is None:
            if len(self._renderings) >= _MAX_CACHED_TOKENS:
                self._renderings.clear()
            rendering = self._renderings[body] = self._render_body(body)
        rendered, known, unknown = rendering
        for source in known:
            self.used.setdefault(source.sid, source)
        for sid in unknown:
            self.unknown_sids[sid] = None
        return rendered

    def _render_body(self, body: str) -> _Rendering:
        known: list[CitationSource] = []
        unknown: list[int] = []
        for sid in parse_sids(body):
            source = self._sources.get(sid)
            if source is not None and source.citable:
                known.append(source)
            else:
                unknown.append(sid)
        if not known:
            return "", (), tuple(unknown)  # nothing to link: the token is dropped, never shown raw
        return render_sources(known, self._style), tuple(known), tuple(unknown)


def _spaces_before(text: str, end: int, start: int) -> int:
    """Where the run of spaces and tabs that ends at ``end`` begins (not before ``start``)."""
    at = end
    while at > start and text[at - 1] in " \t":
        at -= 1
    return at


def _markdown_label(source: CitationSource) -> str:
    label = " ".join((source.title or source.url).split())
    return label.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _markdown_url(url: str) -> str:
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C").replace(">", "%3E")
