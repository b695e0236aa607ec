"""The sources pool: a per-conversation registry of sources with stable integer ids (SIDs).

A source is deduplicated by its normalized URL (see :func:`normalize_url`) or, for local files, by its
physical path. The first time a source is seen it gets the next SID; that SID never changes for the
rest of the conversation, so ``[[S:3]]`` in turn 2 and in turn 12 name the same source. Merging a
source seen again keeps its SID and enriches its row (a missing title, a longer text, a newer fetch).
Only http(s) rows are citable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, Self, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from berth.runtime.blocks import UtcTimestamp
from berth.runtime.paths import SourcesPath
from berth.streaming.citations import CitationSource

__all__ = [
    "TRACKING_PARAMETERS",
    "PoolMerge",
    "Source",
    "SourceRow",
    "SourceType",
    "SourcesPool",
    "normalize_url",
    "render_sources_pool",
]

SourceType: TypeAlias = Literal["web", "file", "attachment", "manual", "kb"]

TRACKING_PARAMETERS: Final[frozenset[str]] = frozenset(
    {"gclid", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "mc_cid", "mc_eid"}
)
"""Query parameters dropped by :func:`normalize_url`, besides every ``utm_*`` parameter."""

_DEFAULT_PORTS: Final[dict[str, int]] = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_CITABLE_SCHEMES: Final[frozenset[str]] = frozenset({"http", "https"})


def _is_tracking(parameter: str) -> bool:
    name = parameter.partition("=")[0].lower()
    return name.startswith("utm_") or name in TRACKING_PARAMETERS


def normalize_url(url: str) -> str:
    """Return the dedup form of ``url``.

    The URL is parsed, not string-edited: scheme and host are lower-cased, the scheme's default
    port is removed (``http://10.0.0.80:80/a`` → ``http://10.0.0.80/a``, while ``:8080`` stays),
    the fragment and tracking parameters (``utm_*``, ``gclid``, ``fbclid``, …) are dropped, the
    remaining query keeps its order and encoding, and the path loses trailing slashes (an empty
    path becomes ``/``). A port that does not parse leaves the network location as written, lower-cased.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    if netloc:
        try:
            port = parts.port
        except ValueError:
            netloc = netloc.lower()
        else:
            host = parts.hostname or ""
            if ":" in host:  # an IPv6 literal keeps its brackets
                host = f"[{host}]"
            userinfo, at, _ = netloc.rpartition("@")
            keep_port = port is not None and port != _DEFAULT_PORTS.get(scheme)
            netloc = f"{userinfo}{at}{host}" + (f":{port}" if keep_port else "")
    path = parts.path
    if netloc or scheme in _DEFAULT_PORTS or len(path) > 1:
        path = path.rstrip("/") or "/"
    query = "&".join(p for p in parts.query.split("&") if p and not _is_tracking(p))
    return urlunsplit((scheme, netloc, path, query, ""))


class Source(BaseModel):
    """A source as a tool reports it, before the pool gives it a SID."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = ""
    title: str = ""
    text: str = ""
    mime: str | None = None
    source_type: SourceType = "web"
    fetched_at: UtcTimestamp | None = None
    published_at: UtcTimestamp | None = None
    relevance: float | None = Field(default=None, ge=0.0, le=1.0)
    physical_path: str | None = None

    @model_validator(mode="after")
    def _has_identity(self) -> Self:
        if not self.url.strip() and not self.physical_path:
            raise ValueError("a source needs a url or a physical_path to be told apart from others")
        return self

    @property
    def dedup_key(self) -> str:
        """The key two rows share exactly when they are the same source."""
        if self.url.strip():
            return "url:" + normalize_url(self.url)
        return f"path:{self.physical_path}"

    @property
    def citable(self) -> bool:
        """Whether the model may cite this source as evidence (http and https URLs only)."""
        return urlsplit(self.url.strip()).scheme.lower() in _CITABLE_SCHEMES


class SourceRow(Source):
    """A row of the pool: a :class:`Source` with its conversation-stable ``sid``."""

    sid: int = Field(ge=1)

    def enriched_with(self, newer: Source) -> SourceRow:
        """Return this row completed by what ``newer`` knows; the SID, URL and type never change.

        Empty fields are filled, the longer text wins, relevance and fetch time keep their maximum.
        The same object is returned when nothing is learned.
        """
        update: dict[str, object] = {}
        for name in ("title", "mime", "published_at", "physical_path"):
            if not getattr(self, name) and getattr(newer, name):
                update[name] = getattr(newer, name)
        if len(newer.text) > len(self.text):
            update["text"] = newer.text
        if newer.relevance is not None and (self.relevance is None or newer.relevance > self.relevance):
            update["relevance"] = newer.relevance
        if newer.fetched_at is not None and (self.fetched_at is None or newer.fetched_at > self.fetched_at):
            update["fetched_at"] = newer.fetched_at
        return self.model_copy(update=update) if update else self


@dataclass(frozen=True, slots=True)
class PoolMerge:
    """The outcome of :meth:`SourcesPool.merge`: the new pool and the SID of each merged source."""

    pool: SourcesPool
    sids: tuple[int, ...]
    added: tuple[int, ...]


class SourcesPool(BaseModel):
    """An immutable snapshot of a conversation's sources pool, rows ordered by SID."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[SourceRow, ...] = ()
    _by_key: dict[str, SourceRow] = PrivateAttr(default_factory=dict)
    _by_sid: dict[int, SourceRow] = PrivateAttr(default_factory=dict)
    _citations: Mapping[int, CitationSource] | None = PrivateAttr(default=None)
    _rendered: tuple[int, str] | None = PrivateAttr(default=None)
    _rendered_without: tuple[int, frozenset[int], str] | None = PrivateAttr(default=None)
    _lines: dict[int, str] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _index(self) -> Self:
        by_key: dict[str, SourceRow] = {}
        by_sid: dict[int, SourceRow] = {}
        for row in self.rows:
            if row.sid in by_sid:
                raise ValueError(f"SID {row.sid} appears twice in the sources pool")
            if row.dedup_key in by_key:
                raise ValueError(f"sources {by_key[row.dedup_key].sid} and {row.sid} are the same source")
            by_sid[row.sid] = row
            by_key[row.dedup_key] = row
        if [row.sid for row in self.rows] != sorted(by_sid):
            raise ValueError("sources pool rows must be ordered by SID")
        self._by_key = by_key
        self._by_sid = by_sid
        return self

    def _private(self) -> dict[str, Any]:
        """The private attributes, read directly.

        Reading one as ``self._by_sid`` goes through pydantic's ``__getattr__`` fallback, which costs
        an ``AttributeError`` raised and caught per read (≈2 µs); ``get`` runs per cited source.
        """
        private = self.__pydantic_private__
        assert private is not None
        return private

    @property
    def next_sid(self) -> int:
        """The SID the next new source will get."""
        return self.rows[-1].sid + 1 if self.rows else 1

    def get(self, sid: int) -> SourceRow | None:
        """Return the row with this SID, or ``None``."""
        by_sid: dict[int, SourceRow] = self._private()["_by_sid"]
        return by_sid.get(sid)

    def find(self, source: Source) -> SourceRow | None:
        """Return the row that is the same source as ``source`` (same normalized URL or path), if any."""
        by_key: dict[str, SourceRow] = self._private()["_by_key"]
        return by_key.get(source.dedup_key)

    def select(self, selector: SourcesPath) -> tuple[SourceRow, ...]:
        """Return the rows a ``so:sources_pool[...]`` path names (all rows for a bare ``so:sources_pool``)."""
        if not selector.ranges:
            return self.rows
        return tuple(row for sid in selector.sids() if (row := self._private()["_by_sid"].get(sid)) is not None)

    def citable_rows(self) -> tuple[SourceRow, ...]:
        """Return the rows the model may cite (http and https)."""
        return tuple(row for row in self.rows if row.citable)

    def citation_sources(self) -> Mapping[int, CitationSource]:
        """Return the citable rows as the citation renderer needs them (title falls back to the URL).

        A pool is immutable, so this is built once per pool (every round of a turn asks for it).
        """
        private = self._private()
        lookup: Mapping[int, CitationSource] | None = private["_citations"]
        if lookup is None:
            rows = self.citable_rows()
            lookup = private["_citations"] = MappingProxyType(
                {row.sid: CitationSource(sid=row.sid, url=row.url, title=row.title or row.url) for row in rows}
            )
        return lookup

    def rendered(self, *, snippet_chars: int = 160, listed_above: frozenset[str] = frozenset()) -> str:
        """Return :func:`render_sources_pool` of the rows, rendered once per pool and snippet size.

        ``listed_above``: row lines (:func:`listed_rows`) the prompt already has before the last cache checkpoint
        (earlier turns' tool results, a compaction summary); rows whose own line is among them are left out, so
        the section rebuilt every round holds only the rest.
        """
        private = self._private()
        if listed_above:
            lines: dict[int, str] | None = private["_lines"]
            if lines is None:
                lines = private["_lines"] = {row.sid: source_line(row) for row in self.rows}
            known = frozenset(sid for sid, line in lines.items() if line in listed_above)
            if known:
                without: tuple[int, frozenset[int], str] | None = private["_rendered_without"]
                if without is None or without[0] != snippet_chars or without[1] != known:
                    rows = tuple(row for row in self.rows if row.sid not in known)
                    text = render_sources_pool(rows, snippet_chars=snippet_chars, listed_above=len(known))
                    without = private["_rendered_without"] = (snippet_chars, known, text)
                return without[2]
        rendered: tuple[int, str] | None = private["_rendered"]
        if rendered is None or rendered[0] != snippet_chars:
            rendered = private["_rendered"] = (
                snippet_chars,
                render_sources_pool(self.rows, snippet_chars=snippet_chars),
            )
        return rendered[1]

    def merge(self, sources: Iterable[Source]) -> PoolMerge:
        """Merge ``sources`` into a new pool; known sources keep their SID and are enriched.

        A source repeated within ``sources`` gets one SID. ``PoolMerge.sids`` follows the input order.
        """
        by_key = dict(self._private()["_by_key"])
        order: list[str] = [row.dedup_key for row in self.rows]
        next_sid = self.next_sid
        sids: list[int] = []
        added: list[int] = []
        for source in sources:
            key = source.dedup_key
            existing = by_key.get(key)
            if existing is None:
                row = SourceRow(sid=next_sid, **source.model_dump(exclude={"sid"}))
                next_sid += 1
                added.append(row.sid)
                order.append(key)
            else:
                row = existing.enriched_with(source)
            by_key[key] = row
            sids.append(row.sid)
        if not added and all(by_key[key] is self._private()["_by_key"][key] for key in order):
            return PoolMerge(pool=self, sids=tuple(sids), added=())
        pool = SourcesPool(rows=tuple(by_key[key] for key in order))
        return PoolMerge(pool=pool, sids=tuple(sids), added=tuple(added))


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def source_line(row: SourceRow) -> str:
    """One row as every listing shows it: ``[S:n] title — url``, marked when it is not citable."""
    title = _one_line(row.title, 120) or "(untitled)"
    where = row.url or row.physical_path or ""
    mark = "" if row.citable else f" (not citable: {row.source_type})"
    return f"[S:{row.sid}]{mark} {title} — {where}"


SOURCE_LINE = re.compile(r"^\[S:(\d+)\].*$", re.MULTILINE)
"""Finds the lines a rendered text lists rows with (:func:`source_line`; a tool result lists what it brought)."""


SOURCES_MARKER = "\nsources: [[S:"
"""How a tool result's own listing of the sources it brought begins (after the result's text)."""


def trailing_listing(text: str) -> list[str]:
    """The row lines of the listing a tool result ends with (after its last ``sources: [[S:…]]`` line): the
    runtime writes it after the result's text, so lines a fetched page merely contains are not taken."""
    at = text.rfind(SOURCES_MARKER)
    if at < 0:
        return []
    return [line for line in text[at + 1 :].splitlines()[1:] if SOURCE_LINE.fullmatch(line)]


def listed_rows(text: str) -> frozenset[str]:
    """The lines of ``text`` that look like :func:`source_line` rows. Only a line equal to a pool row's own line
    counts as listing it (:meth:`SourcesPool.rendered`), so a fetched page's text cannot hide a row."""
    return frozenset(found.group(0) for found in SOURCE_LINE.finditer(text)) if "[S:" in text else frozenset()


def render_sources_pool(rows: Sequence[SourceRow], *, snippet_chars: int = 160, listed_above: int = 0) -> str:
    """Render the compact SOURCES POOL section: one line per row plus a short snippet.

    Non-citable rows are marked so the model uses them for reading and rendering, never as evidence.
    ``listed_above``: how many more rows the earlier turns' tool results list where they arrived.
    """
    lines = [
        "[SOURCES POOL]",
        'Cite web sources as [[S:n]]; read a row in full with react.read(["so:sources_pool[n]"]).',
    ]
    if listed_above:
        more = "1 more source is" if listed_above == 1 else f"{listed_above} more sources are"
        lines.append(f"({more} listed in the earlier turns' tool results above.)")
    if not rows and not listed_above:
        lines.append("(no sources yet)")
    for row in rows:
        lines.append(source_line(row))
        if row.text and snippet_chars > 0:
            lines.append(f"    {_one_line(row.text, snippet_chars)}")
    return "\n".join(lines)


def citation_lookup(pool: SourcesPool) -> Mapping[int, CitationSource]:
    """The pool's citable rows as the citation renderer needs them (see :meth:`SourcesPool.citation_sources`)."""
    return pool.citation_sources()
