"""Several knowledge spaces searched as one: their candidates re-scored on one scale, then fused.

Each space's own ranking (FTS5 BM25, PostgreSQL ``ts_rank``) uses that space's statistics, so its scores —
and its ranks — say nothing about another space's: merging spaces by per-space rank put every space's first
hit ahead of any space's second, ties in the order of the space names. Here every space proposes its best
chunks (:meth:`~berth.knowledge.space.SpaceIndex.candidates`); the union is ranked lexically by ONE BM25
scorer (statistics of the union, title and path weighted as the stores weigh them) and by cosine similarity
(comparable across spaces: one embedder embeds them all), the two rankings fused by reciprocal rank. Ties go
to the higher lexical score, then the higher similarity, then the shorter chunk — never to a space's name.
"""

from __future__ import annotations

import asyncio
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from typing import Final

from berth.knowledge.filters import ChunkFilter
from berth.knowledge.passage import passage
from berth.knowledge.space import CANDIDATES, Candidate, KnowledgeHit, SearchMode, SpaceIndex
from berth.knowledge.store import camel_parts, path_words, query_words
from berth.knowledge.symbols import CodeQuery
from berth.runtime.memory import DEFAULT_RRF_K, fuse_rankings

__all__ = ["bm25_scores", "merge_candidates", "search_spaces_merged", "terms"]

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
_SUFFIXES: Final = ("ing", "ed", "es", "s")
_MARKS: Final = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
"""Combining marks (after NFKD: ``café`` → ``cafe``)."""
FIELD_WEIGHTS: Final = (3.0, 2.0, 1.0)
"""Title, path and text, weighted as the SQLite store's ``bm25(chunks_fts, 3.0, 2.0, 1.0)``."""
K1: Final = 1.2
B: Final = 0.25
"""Length normalization: lighter than the usual 0.75 — long prose sections lost to short code definitions
with 0.75 (on the labelled questions of ``bench/knowledge.py``: MRR 0.345 with 0.75, 0.374 with 0.25)."""


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """``text`` as the shared scorer's terms: Unicode words, lower-cased, diacritics removed, a plural or
    ``-ing``/``-ed`` ending dropped (a light stand-in for the stores' stemming, the same on both sides)."""
    return [_stem(word) for word in _words(text)]


def _words(text: str) -> list[str]:
    flat = text.lower()
    if not flat.isascii():
        flat = _MARKS.sub("", unicodedata.normalize("NFKD", flat))
    return _WORD.findall(flat)


def _fields(candidate: Candidate) -> tuple[list[str], list[str], list[str]]:
    """The candidate's title, path and text as unstemmed words (what the stores index of it)."""
    chunk = candidate.chunk
    return (
        _words(chunk.title + " " + _identifier_words(chunk.title)),
        _words(path_words(chunk.path)),
        _words(chunk.text + "\n" + _identifier_words(chunk.title + " " + chunk.text)),
    )


def _identifier_words(text: str) -> str:
    """:func:`~berth.knowledge.store.identifier_words`, asking only mixed-case words for their parts (the
    others have none)."""
    mixed = {word for word in _WORD.findall(text) if not word.islower() and not word.isupper()}
    return " ".join(part for word in mixed for part in camel_parts(word))


def _forms(wanted: Sequence[str]) -> dict[str, str]:
    """Each surface form that stems to one of the ``wanted`` terms, mapped to it (so a chunk's words are looked
    up, not each stemmed)."""
    forms: dict[str, str] = {}
    for term in wanted:
        for suffix in ("", *_SUFFIXES):
            if _stem(term + suffix) == term:
                forms.setdefault(term + suffix, term)
    return forms


def bm25_scores(query: str, candidates: Sequence[Candidate]) -> list[float]:
    """Each candidate's BM25F score for ``query`` with the statistics of ``candidates`` together (document
    frequencies and average length over all of them), whichever space each comes from."""
    wanted = list(dict.fromkeys(t for word in query_words(query) for t in terms(word)))
    if not wanted or not candidates:
        return [0.0] * len(candidates)
    forms = _forms(wanted)
    weighted: list[dict[str, float]] = []
    lengths: list[float] = []
    for candidate in candidates:
        counts: dict[str, float] = defaultdict(float)
        length = 0.0
        for weight, words in zip(FIELD_WEIGHTS, _fields(candidate), strict=True):
            for word in words:
                term = forms.get(word)
                if term is not None:
                    counts[term] += weight
            length += weight * len(words)
        weighted.append(counts)
        lengths.append(length)
    total = len(candidates)
    average = sum(lengths) / total or 1.0
    idf = {}
    for term in wanted:
        df = sum(1 for counts in weighted if term in counts)
        idf[term] = math.log(1.0 + (total - df + 0.5) / (df + 0.5))
    scores = []
    for counts, length in zip(weighted, lengths, strict=True):
        norm = K1 * (1 - B + B * length / average)
        tf = {t: counts.get(t, 0.0) for t in wanted}
        scores.append(sum(idf[t] * tf[t] * (K1 + 1) / (tf[t] + norm) for t in wanted if tf[t]))
    return scores


def merge_candidates(
    query: str, candidates: Sequence[Candidate], *, limit: int, lexical: bool, vector: bool
) -> list[KnowledgeHit]:
    """The ``limit`` best of ``candidates`` (from any spaces): the shared BM25 ranking (``lexical``) and the
    cosine ranking (``vector``) fused by reciprocal rank, then ranked for code (:mod:`berth.knowledge.symbols`: the
    definitions the query names first, tests weighed down); ties by lexical score, similarity, then length."""
    unique = list({(c.space, c.chunk.id): c for c in candidates}.values())
    lexical_scores = bm25_scores(query, unique) if lexical else [0.0] * len(unique)
    cosines = [c.cosine if c.cosine is not None else -1.0 for c in unique]
    rankings: list[list[str]] = []
    if lexical:
        order = sorted(range(len(unique)), key=lambda i: -lexical_scores[i])
        rankings.append([str(i) for i in order if lexical_scores[i] > 0])
    if vector:
        order = sorted(range(len(unique)), key=lambda i: -cosines[i])
        rankings.append([str(i) for i in order if unique[i].cosine is not None])
    fused = fuse_rankings(rankings, k=DEFAULT_RRF_K)
    code = CodeQuery.parse(query)
    top = max(fused.values(), default=0.0)
    named = {i for i, c in enumerate(unique) if code.definition_rank(c.chunk)[0] == 0}
    scores = {
        i: top if i in named else fused.get(str(i), 0.0) * code.weight(unique[i].chunk)
        for i in {*(int(key) for key in fused), *named}
    }
    best = sorted(
        scores,
        key=lambda i: (
            code.definition_rank(unique[i].chunk),
            -scores[i],
            -lexical_scores[i],
            -cosines[i],
            len(unique[i].chunk.text),
        ),
    )[:limit]
    return [
        KnowledgeHit(unique[i].space, unique[i].chunk, round(scores[i], 5), passage(unique[i].chunk.text, query))
        for i in best
    ]


async def search_spaces_merged(
    spaces: Sequence[SpaceIndex],
    query: str,
    *,
    limit: int,
    mode: SearchMode = "hybrid",
    within: ChunkFilter | None = None,
) -> list[KnowledgeHit]:
    """The ``limit`` best chunks of ``spaces`` for ``query`` on one scale (one space: its own ranking); only
    chunks ``within`` lets through, when given."""
    if len(spaces) == 1:
        return await spaces[0].search(query, limit=limit, mode=mode, within=within)
    pools = await asyncio.gather(
        *(space.candidates(query, mode=mode, count=CANDIDATES, within=within) for space in spaces)
    )
    modes = {space.effective_mode(mode) for space in spaces}  # a space without vectors answers `vector` by words
    vector = mode != "lexical" and any(space.fuses_vectors for space in spaces)
    lexical = bool(modes - {"vector"})
    return merge_candidates(query, [c for pool in pools for c in pool], limit=limit, lexical=lexical, vector=vector)
