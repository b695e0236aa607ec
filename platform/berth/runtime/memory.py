"""Memory search for ``react.memsearch``: what gets indexed, and how a query is answered.

Indexed: every user prompt (and follow-up or steer), assistant completion, attachment text and
summary (:func:`memory_entries`). Each entry carries an embedding from an :class:`Embedder`; the
built-in :class:`HashedNgramEmbedder` needs no model and no download.

Modes (:class:`MemsearchRequest`):

* ``hybrid`` — BM25 ranking and embedding-similarity ranking fused by reciprocal-rank fusion
  (``1 / (k + rank)`` summed over both lists), plus a recency lift that halves every
  ``recency_half_life_days``;
* ``timeline`` — an overview: entries in time order (``asc`` or ``desc``);
* ``ordinal`` — the entries of the n-th turn of the bound conversation;
* ``temporal`` — entries in a ``[since, until)`` window, ranked like ``hybrid`` when a query is given.

Scope is ``conversation`` (the bound one) or ``user`` (all of the bound user's conversations in the
same tenant and project). The scope comes from the bound :class:`~berth.storage.scope.ConversationScope`,
never from the request, so a search cannot reach beyond it.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Final, Literal, Protocol, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.runtime.blocks import Block, BlockType, UtcTimestamp
from berth.storage.memory import MemoryEntry, MemoryFilter, MemoryIndex, MemoryKind
from berth.storage.scope import ConversationScope

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from berth.config.models.assembly import EmbedderConfig

__all__ = [
    "DEFAULT_RRF_K",
    "Embedder",
    "EmbedderFactory",
    "HashedNgramEmbedder",
    "MemoryHit",
    "MemorySearch",
    "MemsearchMode",
    "MemsearchRequest",
    "cosine",
    "fuse_rankings",
    "memorable_blocks",
    "memory_text",
]

DEFAULT_RRF_K: Final = 60
"""The reciprocal-rank-fusion constant (the value of the original RRF paper)."""

MemsearchMode: TypeAlias = Literal["hybrid", "timeline", "ordinal", "temporal"]

_KIND_OF: Final[dict[BlockType, MemoryKind]] = {
    BlockType.USER_PROMPT: "user",
    BlockType.USER_FOLLOWUP: "user",
    BlockType.USER_STEER: "user",
    BlockType.ASSISTANT_COMPLETION: "assistant",
    BlockType.USER_ATTACHMENT: "attachment",
    BlockType.CONV_RANGE_SUMMARY: "summary",
    BlockType.CONV_WORKING_SUMMARY: "summary",
}
_TOKEN_RE: Final = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    """Turns texts into unit-length vectors of a fixed dimension (the ``berth_embedders`` seam).

    ``embed`` makes the vectors of indexed texts, ``embed_query`` the vector of a search query; an
    asymmetric model (E5: ``passage:`` / ``query:``) embeds the two differently, a symmetric one
    the same way. Both may be slow: an implementation keeps heavy work off the event loop.
    """

    @property
    def dimensions(self) -> int:
        """The length of every vector this embedder returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit-length vector per indexed text (all zeros for a text without words)."""
        ...

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Return the unit-length vector of a search query (all zeros for a query without words)."""
        ...


class EmbedderFactory(Protocol):
    """What a plugin's ``berth_embedders()`` maps each embedder name to."""

    def __call__(self, config: EmbedderConfig) -> Embedder:
        """Build the embedder ``platform.embedder`` of ``assembly.yaml`` asks for (``provider``, ``model``)."""
        ...


_WORD_CACHE_LIMIT: Final = 50_000
"""Words whose buckets an embedder keeps; past it the cache starts over."""


class HashedNgramEmbedder:
    """A deterministic, dependency-free embedder: hashed words and character n-grams.

    Each word contributes itself and its character n-grams (with boundary marks, ``<data``, ``ase>``)
    to signed buckets chosen by BLAKE2b, so texts sharing words or word pieces ("database" and
    "databases") land near each other. It knows no synonyms; it is the lexical fallback, not a
    semantic model.
    """

    semantic = False
    """Its vectors restate the words a lexical index already ranks: knowledge search does not fuse them
    (measured in ``bench/knowledge.py``: fusing them lowered MRR), an embedder without this flag is fused."""

    def __init__(self, dimensions: int = 256, ngram_sizes: tuple[int, ...] = (3, 4)) -> None:
        if dimensions < 8:
            raise ValueError("an embedding needs at least 8 dimensions")
        self._dimensions = dimensions
        self._ngram_sizes = ngram_sizes
        # What each word adds to a vector (buckets, signed weights): words recur, so each is hashed once.
        self._words: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]] = {}

    @property
    def dimensions(self) -> int:
        """The length of every vector this embedder returns."""
        return self._dimensions

    def _word_features(self, word: str) -> Iterable[tuple[str, float]]:
        yield "w:" + word, 1.0
        marked = f"<{word}>"
        for size in self._ngram_sizes:
            for start in range(max(len(marked) - size + 1, 1)):
                yield "g:" + marked[start : start + size], 0.5

    def _word(self, word: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """The buckets one word adds to and the signed weight it adds to each (computed once per word)."""
        contribution = self._words.get(word)
        if contribution is None:
            import numpy as np  # with the first word embedded: importing this module does not load numpy

            if len(self._words) >= _WORD_CACHE_LIMIT:
                self._words.clear()
            buckets: list[int] = []
            weights: list[float] = []
            for feature, weight in self._word_features(word):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                buckets.append(int.from_bytes(digest[:4], "little") % self._dimensions)
                weights.append(weight if digest[4] & 1 else -weight)
            contribution = self._words[word] = (np.array(buckets, dtype=np.intp), np.array(weights))
        return contribution

    def embed_one(self, text: str) -> tuple[float, ...]:
        """Return the unit-length vector of one text (all zeros if it has no words).

        One ``bincount`` over the cached buckets of every word (a Python loop over them cost 1.7 times as much).
        """
        import numpy as np

        words = _TOKEN_RE.findall(text.lower())
        if not words:
            return (0.0,) * self._dimensions
        parts = [self._word(word) for word in words]
        buckets = np.concatenate([part[0] for part in parts])
        weights = np.concatenate([part[1] for part in parts])
        vector = np.bincount(buckets, weights, minlength=self._dimensions)
        norm = math.sqrt(float(vector @ vector))
        return tuple((vector / norm).tolist()) if norm else (0.0,) * self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Return one unit-length vector per text."""
        return [self.embed_one(text) for text in texts]

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Return the vector of a query: the same as any text's (the embedder is symmetric)."""
        return self.embed_one(query)


def cosine(left: Sequence[float], right: Sequence[float]) -> float:
    """Cosine similarity of two unit-length vectors (their dot product); 0 for mismatched lengths."""
    if len(left) != len(right):
        return 0.0
    return math.fsum(map(operator.mul, left, right))


def fuse_rankings(rankings: Sequence[Sequence[str]], *, k: int = DEFAULT_RRF_K) -> dict[str, float]:
    """Reciprocal-rank fusion: each key scores ``sum(1 / (k + rank))`` over the rankings it appears in."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return scores


def memory_text(block: Block) -> str:
    """What memory search indexes of a block: its text, or for an attachment shown to the model as itself (a PDF
    document block) the text extracted from it (``meta.index_text``), which the prompt does not repeat."""
    indexed = block.meta.get("index_text")
    return indexed if isinstance(indexed, str) and indexed.strip() else (block.text or "")


def memorable_blocks(blocks: Iterable[Block], *, turn_ordinals: dict[str, int]) -> list[tuple[Block, MemoryKind]]:
    """Return the blocks worth indexing, with their memory kind.

    Prompts, follow-ups, steers, completions, attachment texts and summaries with text; hidden blocks
    and blocks of turns missing from ``turn_ordinals`` are skipped.
    """
    chosen: list[tuple[Block, MemoryKind]] = []
    for block in blocks:
        kind = _KIND_OF.get(block.type)
        if kind is None or block.hidden or not memory_text(block).strip() or block.turn_id not in turn_ordinals:
            continue
        chosen.append((block, kind))
    return chosen


class MemsearchRequest(BaseModel):
    """The parameters of ``react.memsearch``, as the model sends them."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    mode: MemsearchMode = "hybrid"
    query: str = ""
    scope: Literal["conversation", "user"] = "conversation"
    targets: frozenset[MemoryKind] = frozenset({"user", "assistant", "attachment", "summary"})
    top_k: Annotated[int, Field(ge=1, le=50)] = 5
    ordinal: Annotated[int | None, Field(ge=1)] = None
    since: Annotated[UtcTimestamp | None, Field(alias="from")] = None
    until: Annotated[UtcTimestamp | None, Field(alias="to")] = None
    order: Literal["asc", "desc"] = "asc"

    @model_validator(mode="after")
    def _mode_has_its_arguments(self) -> Self:
        if self.mode == "hybrid" and not self.query.strip():
            raise ValueError("mode 'hybrid' needs a query; use mode 'timeline' for an overview")
        if self.mode == "ordinal" and self.ordinal is None:
            raise ValueError("mode 'ordinal' needs 'ordinal' (1 for the first turn)")
        if self.mode == "temporal" and self.since is None and self.until is None:
            raise ValueError("mode 'temporal' needs 'from' and/or 'to' (UTC ISO-8601)")
        if self.since and self.until and self.since >= self.until:
            raise ValueError("'from' must be before 'to'")
        return self


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """One search result: where to read it, when it was said, and why it ranked."""

    path: str
    conversation_id: str
    turn_id: str
    kind: MemoryKind
    ts: datetime
    score: float
    snippet: str


def _snippet(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _key(entry: MemoryEntry) -> str:
    return f"{entry.scope.conversation_id}\x00{entry.path}"


class MemorySearch:
    """Indexes a conversation's memorable blocks and answers ``react.memsearch`` within the bound scope.

    :param index: the memory index (FTS5 + vectors when embedded).
    :param embedder: makes the vectors of entries and queries.
    :param scope: the bound conversation; ``scope='user'`` widens to its user's conversations in the
        same tenant/project, and never further.
    :param candidates: how many entries each ranking contributes before fusion.
    :param recency_weight: the recency lift of an entry from right now, in units of a first-place RRF
        score; it halves every ``recency_half_life_days``.
    """

    def __init__(
        self,
        index: MemoryIndex,
        embedder: Embedder,
        *,
        scope: ConversationScope,
        candidates: int = 50,
        rrf_k: int = DEFAULT_RRF_K,
        recency_weight: float = 0.5,
        recency_half_life_days: float = 30.0,
        min_similarity: float = 0.05,
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._scope = scope
        self._candidates = candidates
        self._rrf_k = rrf_k
        self._recency_weight = recency_weight
        self._half_life_days = recency_half_life_days
        self._min_similarity = min_similarity

    async def entries(self, blocks: Sequence[Block], *, turn_ordinals: dict[str, int]) -> tuple[MemoryEntry, ...]:
        """The memory entries of the memorable blocks among ``blocks``, embedded, ready to be written (a turn's
        commit carries them: :attr:`~berth.storage.conversations.TurnCommit.memory`).

        :param turn_ordinals: each turn's position in the conversation (from 1); blocks of other
            turns are skipped.
        """
        chosen = memorable_blocks(blocks, turn_ordinals=turn_ordinals)
        if not chosen:
            return ()
        texts = [memory_text(block) for block, _ in chosen]
        vectors = await self._embedder.embed(texts)
        return tuple(
            MemoryEntry(
                scope=self._scope,
                path=block.path,
                turn_id=block.turn_id,
                turn_ordinal=turn_ordinals[block.turn_id],
                kind=kind,
                ts=block.ts,
                text=text,
                vector=vector,
            )
            for (block, kind), text, vector in zip(chosen, texts, vectors, strict=True)
        )

    async def index_blocks(self, blocks: Sequence[Block], *, turn_ordinals: dict[str, int]) -> int:
        """Index the memorable blocks among ``blocks`` in a transaction of their own; return how many entries
        were written (see :meth:`entries`)."""
        entries = await self.entries(blocks, turn_ordinals=turn_ordinals)
        if entries:
            await self._index.add(entries)
        return len(entries)

    def _filter(self, request: MemsearchRequest) -> MemoryFilter:
        conversation = self._scope.conversation_id if request.scope == "conversation" else None
        if request.mode == "ordinal":
            conversation = self._scope.conversation_id  # "the n-th turn" only means something in one conversation
        return MemoryFilter(
            owner=self._scope.owner,
            conversation_id=conversation,
            kinds=request.targets,
            since=request.since,
            until=request.until,
        )

    async def search(self, request: MemsearchRequest, *, now: datetime) -> tuple[MemoryHit, ...]:
        """Answer one ``react.memsearch`` call, best (or, for overviews, chronological) first."""
        where = self._filter(request)
        if request.mode == "hybrid" or (request.mode == "temporal" and request.query.strip()):
            return await self._ranked(where, request, now=now)
        entries = await self._index.list_entries(where)
        if request.mode == "ordinal":
            entries = tuple(e for e in entries if e.turn_ordinal == request.ordinal)
        if request.order == "desc":
            entries = tuple(reversed(entries))
        return tuple(self._hit(entry, 1.0) for entry in entries[: request.top_k])

    async def _ranked(self, where: MemoryFilter, request: MemsearchRequest, *, now: datetime) -> tuple[MemoryHit, ...]:
        lexical = await self._index.search_lexical(where, request.query, limit=self._candidates)
        entries = await self._index.list_entries(where)
        query_vector = await self._embedder.embed_query(request.query)
        similar = sorted(
            ((cosine(query_vector, entry.vector), entry) for entry in entries),
            key=lambda pair: pair[0],
            reverse=True,
        )
        semantic = [entry for score, entry in similar[: self._candidates] if score >= self._min_similarity]
        by_key = {_key(entry): entry for entry in entries}
        scores = fuse_rankings(
            [[_key(hit.entry) for hit in lexical], [_key(entry) for entry in semantic]], k=self._rrf_k
        )
        lift_unit = 1.0 / (self._rrf_k + 1)
        ranked: list[tuple[float, MemoryEntry]] = []
        for key, score in scores.items():
            entry = by_key.get(key)
            if entry is None:
                continue
            age_days = max((now - entry.ts).total_seconds(), 0.0) / 86_400
            lift = self._recency_weight * lift_unit * 0.5 ** (age_days / self._half_life_days)
            ranked.append((score + lift, entry))
        ranked.sort(key=lambda pair: (pair[0], pair[1].ts), reverse=True)
        return tuple(self._hit(entry, score) for score, entry in ranked[: request.top_k])

    @staticmethod
    def _hit(entry: MemoryEntry, score: float) -> MemoryHit:
        return MemoryHit(
            path=entry.path,
            conversation_id=entry.scope.conversation_id,
            turn_id=entry.turn_id,
            kind=entry.kind,
            ts=entry.ts,
            score=round(score, 6),
            snippet=_snippet(entry.text),
        )
