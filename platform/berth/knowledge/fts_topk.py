"""The best rows of an FTS5 BM25 query without scoring every row that matches (exact: FTS5's own scores).

``ORDER BY bm25(...) LIMIT 50`` scores every row holding any query word: at 200k chunks of code a query with
``self`` or ``return`` scores 100k rows (seconds). BM25 bounds what a word can add to a row's score: FTS5 adds,
per query phrase, ``idf * f*(k1+1) / (f + k1*(1-b+b*D/avgdl))`` — below ``idf * (k1+1)`` whatever the row
(``idf`` from the whole table, at least 1e-6; ``k1`` = 1.2). So, with the phrases sorted by how many rows hold
them (FTS5's own counts, ``fts5vocab``), the rarest few (R) select the candidates: a row holding none of them
scores at most ``T`` = the sum of the other phrases' bounds. The candidates are scored by FTS5 over ALL the
phrases — the expression ``(R) AND (all)`` names R's phrases twice, so its score is the full score plus R's
own, which a query of ``R`` alone gives for the same rows, and is subtracted. When the ``limit``-th best full
score beats ``T``, no other row can enter: these are the rows, and the scores, of the full query (to the last
bit or two of a double: the sums are added in another order). Otherwise R grows by the next rarest phrase,
while its rows stay under :data:`BUDGET`; past it, or for a phrase of several tokens, the full query runs.

A query of common words has no rare phrase to prune by. When the index keeps its common terms' own scores
(:mod:`berth.knowledge.term_postings`, current for its version: the caller checks), the query's ranking is added
up from them instead, phrase by phrase (a rarer phrase's own scores asked from FTS5): FTS5's own sum, to the bit,
with no bound to prove. That way is taken first whenever it can be (every phrase stored, or rarer ones with at most
:data:`BUDGET` rows in all), since it is exact where the rare-phrase pruning is exact to the last bit or two.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Sequence
from typing import Final

from berth.knowledge.term_postings import TermScores, build_postings, phrase_scores, rank, stored_scores

__all__ = ["BUDGET", "K1", "FtsTopK"]

K1: Final = 1.2
"""FTS5's ``bm25()`` constant k1 (b is 0.75): a phrase adds less than ``idf * (k1 + 1)`` to any row."""
BUDGET: Final = 4_000
"""At most this many candidate rows (the rarest phrases' rows, counted with repeats) are scored exactly."""
STORED: Final = 1_000
"""Terms in more rows than this have their own scores stored (:mod:`berth.knowledge.term_postings`): the phrases
of a query without them are asked from FTS5, at most :data:`BUDGET` rows in all."""
SUFFIXES: Final = (
    "", "e", "s", "es", "ed", "ing", "ion", "ation", "ate", "al", "er", "y", "ly", "ize", "ment",
    "ence", "ance", "ive", "ous", "ity", "ness", "ful", "ism", "ist", "ent", "ant", "ible", "able",
)  # fmt: skip
"""Endings tried after a stem to find a word that stems to it (:meth:`FtsTopK.phrase_for`)."""
_MARGIN: Final = 1e-9
"""Added to the bound (relative and absolute): a candidate must beat it clearly, not by rounding."""


class FtsTopK:
    """Pruned BM25 top-k over one contentless FTS5 table (``table``) of ``connection``'s main database."""

    def __init__(
        self, table: str, tokenizer: str, weights: Sequence[float], *, budget: int = BUDGET, stored: int = STORED
    ) -> None:
        self.table = table
        self.budget = budget
        self.stored = stored
        self.weights = ", ".join(str(weight) for weight in weights)
        self._tokenizer = tokenizer
        self._tokens: dict[str, tuple[str, ...]] = {}
        self._scratch: sqlite3.Connection | None = None
        self._scratch_lock = threading.Lock()

    def tokens(self, word: str) -> tuple[str, ...]:
        """The index terms FTS5's tokenizer makes of ``word`` (``tokenizer`` → ``token``), cached."""
        found = self._tokens.get(word)
        if found is not None:
            return found
        with self._scratch_lock:
            if self._scratch is None:
                self._scratch = sqlite3.connect(":memory:", check_same_thread=False)
                self._scratch.execute(f"CREATE VIRTUAL TABLE words USING fts5(w, tokenize = '{self._tokenizer}')")
                self._scratch.execute("CREATE VIRTUAL TABLE word_terms USING fts5vocab(words, 'instance')")
            self._scratch.execute("INSERT INTO words (rowid, w) VALUES (1, ?)", (word,))
            rows = self._scratch.execute("SELECT term FROM word_terms ORDER BY offset").fetchall()
            self._scratch.execute("DELETE FROM words")
        found = tuple(str(row[0]) for row in rows)
        if len(self._tokens) > 50_000:
            self._tokens.clear()
        self._tokens[word] = found
        return found

    def build(self, connection: sqlite3.Connection) -> tuple[int, int]:
        """(Re)write the stored scores of the table's terms in more rows than ``stored``, in ``connection``'s open
        transaction: (terms, rows) stored. The caller stamps them with the index version."""
        return build_postings(connection, self.table, self.weights, self.phrase_for, common=self.stored)

    def phrase_for(self, term: str) -> str | None:
        """A word the tokenizer makes into ``term`` alone: the term itself, or the term and one of
        :data:`SUFFIXES` (Porter's stem of ``raise`` is ``rais``, and ``rais`` stems to ``rai``); None if none."""
        for suffix in SUFFIXES:
            if self.tokens(term + suffix) == (term,):
                return term + suffix
        return None

    def search(
        self, connection: sqlite3.Connection, words: Sequence[str], limit: int, *, stored: bool = False
    ) -> list[tuple[int, float]] | None:
        """The ``limit`` best (rowid, -bm25) for the OR of ``words`` (each a quoted phrase), best first; None
        when pruning cannot answer (the caller runs the full query). ``stored``: the table's stored term scores
        are of its current version (the module's docstring)."""
        phrases = list(dict.fromkeys(words))
        terms = [self.tokens(word) for word in phrases]
        if not phrases or any(len(term) != 1 for term in terms):
            return None
        # a stored term's rows are counted by its stored scores: FTS5's count reads its whole posting list
        known = [stored_scores(connection, self.table, term) if stored else None for (term,) in terms]
        counts = [
            len(scores[0]) if scores is not None else self._count(connection, term)
            for (term,), scores in zip(terms, known, strict=True)
        ]
        if sum(counts) <= self.budget:
            return None  # the full query is cheap
        if stored:
            summed = self._summed(connection, phrases, known, counts, limit)
            if summed is not None:
                return summed
        if len(phrases) < 2:
            return None
        rows = _row_count(connection, self.table)
        bound = [max(math.log((rows - n + 0.5) / (n + 0.5)), 1e-6) * (K1 + 1.0) for n in counts]
        order = sorted(range(len(phrases)), key=lambda i: counts[i])
        everything = " OR ".join(_quoted(word) for word in phrases)
        for size in _attempts([counts[i] for i in order], limit, max(self.budget, sum(counts) // 3)):
            threshold = sum(bound[i] for i in order[size:]) * (1 + _MARGIN) + _MARGIN
            best = self._candidates(connection, [phrases[i] for i in order[:size]], everything, limit)
            if len(best) == limit and best[-1][1] > threshold:
                return best
        return None

    def _count(self, connection: sqlite3.Connection, term: str) -> int:
        """How many rows hold ``term`` (FTS5's own count, ``fts5vocab``)."""
        vocabulary = f"temp.{self.table}_rows"
        connection.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocabulary} USING fts5vocab(main, '{self.table}', 'row')"
        )
        found = connection.execute(f"SELECT doc FROM {vocabulary} WHERE term = ?", (term,)).fetchall()  # noqa: S608
        return int(found[0][0]) if found else 0

    def _summed(
        self,
        connection: sqlite3.Connection,
        phrases: Sequence[str],
        known: Sequence[TermScores | None],
        counts: Sequence[int],
        limit: int,
    ) -> list[tuple[int, float]] | None:
        """The ranking summed from each phrase's own scores: its term's stored ones (``known``), or FTS5's for
        the phrase itself (not its term: a stem stemmed again may be another) when the phrases without stored
        scores have at most the budget's rows in all; None otherwise."""
        if sum(count for count, scores in zip(counts, known, strict=True) if scores is None) > self.budget:
            return None
        scores: list[TermScores] = [
            phrase_scores(connection, self.table, self.weights, phrase) if found is None else found
            for phrase, found in zip(phrases, known, strict=True)
        ]
        return rank(scores, limit)

    def _candidates(
        self, connection: sqlite3.Connection, rare: Sequence[str], everything: str, limit: int
    ) -> list[tuple[int, float]]:
        """The rows holding a ``rare`` phrase with their full scores, the ``limit`` best."""
        selected = " OR ".join(_quoted(word) for word in rare)
        score = f"SELECT rowid, bm25({self.table}, {self.weights}) FROM {self.table} WHERE {self.table} MATCH ?"  # noqa: S608
        doubled = dict(connection.execute(score, (f"({selected}) AND ({everything})",)).fetchall())
        alone = dict(connection.execute(score, (selected,)).fetchall())
        full = [(alone[rowid] - twice, rowid) for rowid, twice in doubled.items()]
        # ties as FTS5 orders them, by rowid (scores equal to 12 digits are ties: the sums' order differs)
        full.sort(key=lambda scored: (-float(f"{scored[0]:.12g}"), scored[1]))
        return [(int(rowid), float(value)) for value, rowid in full[:limit]]


def _attempts(ascending: Sequence[int], limit: int, allowed: int) -> list[int]:
    """How many of the rarest phrases to try as candidates, fewest first: each try whose rows could fill
    ``limit``, while the rows of all the tries stay within ``allowed`` (a failed try costs its rows twice)."""
    sizes: list[int] = []
    spent = 0
    for size in range(1, len(ascending)):
        rows = sum(ascending[:size])
        if rows < limit:
            continue
        spent += rows
        if spent > allowed:
            break
        sizes.append(size)
    return sizes


def _row_count(connection: sqlite3.Connection, table: str) -> int:
    """FTS5's own count of the table's rows: the first varint of its ``averages`` record (``_data`` row 1)."""
    found = connection.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchall()  # noqa: S608
    value = 0
    for index, byte in enumerate(bytes(found[0][0]) if found else b""):
        if index == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'
