"""Each common term's rows with the score the term adds to each (its own BM25 contribution), kept per version.

FTS5's ``bm25()`` of a row for an OR of one-token phrases is a sum, phrase by phrase in the query's order, of
``idf * f*(k1+1) / (f + k1*(1-b+b*D/avgdl))`` (``fts5Bm25Function``); each term depends only on that phrase's
rows and the table's statistics, and it is what a query of that phrase alone returns for the row, to the bit.
So a query's ranking is the sum, phrase by phrase, of each phrase's own scores: the same additions of the same
doubles in the same order, hence the same bits and the same order as ``ORDER BY bm25(...) LIMIT`` (ties by rowid,
as FTS5 visits rows). A common word (``self``, ``return``: a quarter of a million rows of a 200k-chunk space hold
one of three) costs FTS5 a position list decoded and a row size looked up per row; here it is two arrays read
from one row (:func:`build_postings` keeps them, in ``<table>_postings``, for the words in more than ``common``
rows; the caller stamps them with the index version they were built for: a stale one is never read), added with
numpy. A rarer word's own scores are asked from FTS5 (few rows).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["TermScores", "build_postings", "phrase_scores", "rank", "stored_scores"]

TermScores = tuple["npt.NDArray[np.integer[Any]]", "npt.NDArray[np.float64]"]
"""A phrase's rows (ascending rowids, int32 or int64) and the score it adds to each."""


def postings_table(table: str) -> str:
    """The name of the stored scores of the FTS5 table ``table``."""
    return f"{table}_postings"


def build_postings(
    connection: sqlite3.Connection,
    table: str,
    weights: str,
    phrase_for: Callable[[str], str | None],
    *,
    common: int,
) -> tuple[int, int]:
    """(Re)write the stored scores of ``table`` in ``connection``'s open transaction: for each term in more than
    ``common`` rows that has a phrase (``phrase_for``: a word the tokenizer makes into that term alone — not
    always the term itself, a stem stemmed again may be another), its rows (4-byte rowids when they fit) and
    ``-bm25(table, weights)`` of a query of that phrase alone. Returns (terms, rows) stored."""
    import numpy as np

    stored = postings_table(table)
    connection.execute(f"DROP TABLE IF EXISTS {stored}")  # made again: its layout is the one of this code
    connection.execute(
        f"CREATE TABLE {stored} "
        "(term TEXT PRIMARY KEY, ids BLOB NOT NULL, id_bytes INTEGER NOT NULL, scores BLOB NOT NULL)"
    )
    vocabulary = f"temp.{table}_rows"
    connection.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocabulary} USING fts5vocab(main, '{table}', 'row')")
    terms = [str(row[0]) for row in connection.execute(f"SELECT term FROM {vocabulary} WHERE doc > ?", (common,))]  # noqa: S608
    listed = rows = 0
    for term in terms:
        phrase = phrase_for(term)
        if phrase is None:
            continue
        ids, scores = phrase_scores(connection, table, weights, phrase)
        narrow = ids.astype(np.int32) if len(ids) and int(ids.max()) < 2**31 and int(ids.min()) >= 0 else ids
        connection.execute(
            f"INSERT INTO {stored} (term, ids, id_bytes, scores) VALUES (?, ?, ?, ?)",  # noqa: S608
            (term, narrow.tobytes(), narrow.dtype.itemsize, scores.tobytes()),
        )
        listed += 1
        rows += len(ids)
    return listed, rows


def stored_scores(connection: sqlite3.Connection, table: str, term: str) -> TermScores | None:
    """``term``'s stored rows and scores; None when it has none (a rare term, or an index written before them)."""
    import numpy as np

    try:
        found = connection.execute(
            f"SELECT ids, id_bytes, scores FROM {postings_table(table)} WHERE term = ?",  # noqa: S608
            (term,),
        ).fetchall()
    except sqlite3.OperationalError:  # no such table: an index written before them
        return None
    if not found:
        return None
    ids, width, scores = found[0]
    return np.frombuffer(ids, dtype=np.int32 if width == 4 else np.int64), np.frombuffer(scores, dtype=np.float64)


def phrase_scores(connection: sqlite3.Connection, table: str, weights: str, phrase: str) -> TermScores:
    """A phrase's rows and scores, asked from FTS5 (a query of it alone, quoted; rows in rowid order)."""
    import numpy as np

    rows = connection.execute(
        f"SELECT rowid, -bm25({table}, {weights}) FROM {table} WHERE {table} MATCH ?",  # noqa: S608
        ('"' + phrase.replace('"', '""') + '"',),
    ).fetchall()
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    scores = np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows))
    return ids, scores


def rank(phrases: Sequence[TermScores], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best rows of the OR of ``phrases`` (each phrase's rows and scores, in the query's order):
    (rowid, score), best first, ties by rowid; each row's score summed phrase by phrase, as FTS5 sums it."""
    import numpy as np

    present = [ids for ids, _ in phrases if len(ids)]
    if not present or limit <= 0:
        return []
    size = max(int(ids[-1]) for ids in present) + 1  # ascending
    total = np.zeros(size, dtype=np.float64)
    seen = np.zeros(size, dtype=bool)
    for ids, scores in phrases:
        total[ids] += scores  # a phrase's rowids are distinct: one addition per row, in the phrase's order
        seen[ids] = True
    rows = np.flatnonzero(seen)
    values = total[rows]
    if len(rows) > limit:
        kth = np.partition(values, len(values) - limit)[len(values) - limit]
        keep = values >= kth  # every row tied with the limit-th too: ties are broken by rowid below
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))[:limit]
    return [(int(rows[i]), float(values[i])) for i in order]
