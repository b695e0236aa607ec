"""The passage of a chunk that best matches a query: what a search hit shows instead of the chunk's start.

A chunk is cut into units — its lines, cut after their sentences, a long sentence at spaces — and the
passage is the run of consecutive units, at most ``cap`` characters long, that holds the most of the query's
words (a word found in few units of the chunk counts more than one found in most; the shortest such run),
widened a unit at a time on both sides up to the cap. The passage is the chunk's own text (lines and
indentation kept), cut only at unit boundaries, with ``…`` where the chunk goes on; a chunk that fits the cap
is returned whole.
"""

from __future__ import annotations

import itertools
import math
import re

from berth.knowledge.store import query_words

__all__ = ["PASSAGES_TOTAL_CHARS", "PASSAGE_CHARS", "passage", "passage_cap", "passage_terms"]

PASSAGE_CHARS = 800
"""The default cap of a passage, its ``…`` marks included."""

PASSAGES_TOTAL_CHARS = 4_500
"""What the passages of one search's hits may add up to (a search of many hits shows shorter passages), so that
a search's result, its paths and titles included, fits the 6,000 characters a prompt shows of a tool result
(``react.result_preview_chars``)."""

MIN_PASSAGE_CHARS = 200

_MARK = "…"
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_SPACE = re.compile(r"\s+")


def passage_terms(query: str) -> list[str]:
    """The query's words a passage is matched on: :func:`~berth.knowledge.store.query_words` of at least two
    characters (a one-letter word would match nearly every line)."""
    return [word for word in query_words(query) if len(word) > 1]


def passage_cap(hits: int) -> int:
    """The cap of each passage when a search returns ``hits`` hits: :data:`PASSAGE_CHARS`, lowered so that
    all of them fit :data:`PASSAGES_TOTAL_CHARS` (never below 200 characters)."""
    return max(MIN_PASSAGE_CHARS, min(PASSAGE_CHARS, PASSAGES_TOTAL_CHARS // max(hits, 1)))


def passage(text: str, query: str, cap: int = PASSAGE_CHARS) -> str:
    """The part of ``text`` (at most ``cap`` characters, ``…`` marks included) that best matches ``query``:
    the whole text, stripped, when it fits; otherwise the densest run of its lines/sentences (the start of
    the text when no query word occurs in it), with ``…`` before and after where the text was cut."""
    whole = text.strip()
    if len(whole) <= cap:
        return whole
    room = max(cap - 2 * len(_MARK), 1)
    units = _units(text, room)
    if not units:
        return whole[: cap - len(_MARK)] + _MARK
    patterns = [re.compile(r"(?<![^\W_])" + re.escape(term), re.IGNORECASE) for term in passage_terms(query)]
    found = [[bool(pattern.search(text, start, end)) for pattern in patterns] for start, end in units]
    weights = [math.log(1 + len(units) / max(1, sum(row[t] for row in found))) for t in range(len(patterns))]
    first, last = _densest(units, found, weights, room)
    first, last = _widen(units, first, last, room)
    start, end = units[first][0], units[last][1]
    body = text[start:end].strip()
    before = _MARK if text[:start].strip() else ""
    after = _MARK if text[end:].strip() else ""
    return before + body + after


def _units(text: str, room: int) -> list[tuple[int, int]]:
    """``text`` as (start, end) spans of at most ``room`` characters without their surrounding white space:
    its lines split after their sentences, a longer sentence at spaces, a longer word anywhere."""
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        _split(text, offset, offset + len(line), room, spans, 0)
        offset += len(line)
    return spans


def _split(text: str, start: int, end: int, room: int, spans: list[tuple[int, int]], level: int) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start >= end:
        return
    if end - start <= room and level > 0:  # a line is always cut into its sentences
        spans.append((start, end))
        return
    if level == 2:  # one word longer than the room: hard cuts
        spans.extend((cut, min(cut + room, end)) for cut in range(start, end, room))
        return
    boundary = _SENTENCE_END if level == 0 else _SPACE
    cuts = [start, *[m.end() for m in boundary.finditer(text, start, end) if m.end() < end], end]
    for piece_start, piece_end in itertools.pairwise(cuts):
        _split(text, piece_start, piece_end, room, spans, level + 1)


def _densest(units: list[tuple[int, int]], found: list[list[bool]], weights: list[float], room: int) -> tuple[int, int]:
    """The shortest run of units (first, last) that fits ``room`` and scores best: the summed weight of the
    query words it holds (then: shorter is better); the first unit when none does."""
    best: tuple[float, int] = (0.0, 0)
    span = (0, 0)
    for first in range(len(units)):
        if not any(found[first]):
            continue
        held = [False] * len(weights)
        for last in range(first, len(units)):
            if units[last][1] - units[first][0] > room:
                break
            if not any(found[last]):
                continue
            held = [a or b for a, b in zip(held, found[last], strict=True)]
            score = sum(w for w, h in zip(weights, held, strict=True) if h)
            key = (score, -(units[last][1] - units[first][0]))
            if key > best:
                best, span = key, (first, last)
    return span


def _widen(units: list[tuple[int, int]], first: int, last: int, room: int) -> tuple[int, int]:
    """The run ``first..last`` grown a unit at a time on alternate sides (before first) while it fits ``room``."""
    grew = True
    while grew:
        grew = False
        for side in (-1, 1):
            if side < 0 and first > 0 and units[last][1] - units[first - 1][0] <= room:
                first -= 1
                grew = True
            elif side > 0 and last + 1 < len(units) and units[last + 1][1] - units[first][0] <= room:
                last += 1
                grew = True
    return first, last
