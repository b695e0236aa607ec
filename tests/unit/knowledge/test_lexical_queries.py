"""Turning free text into lexical queries (berth.knowledge.store, berth.knowledge.sqlite_store): any text gives an
expression FTS5 accepts, stopwords only go when something else is left, camel case is split, digits are not."""

from __future__ import annotations

import re
import sqlite3
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.knowledge.sqlite_store import TOKENIZER, fts_query
from berth.knowledge.store import camel_parts, identifier_words, query_words


def test_stopwords_go_unless_nothing_else_is_left() -> None:
    assert query_words("How do I restart the worker?") == ["restart", "worker"]
    assert query_words("what is this") == ["what", "is", "this"]


def test_camel_case_is_split_and_digits_are_not() -> None:
    assert query_words("SpaceIndex refresh") == ["spaceindex", "refresh", "space", "index"]
    assert camel_parts("HTTPServerError") == ["HTTP", "Server", "Error"]
    assert camel_parts("w02870") == [] and camel_parts("utf8") == []
    assert set(identifier_words("class KnowledgeIndex(Base): pass").split()) == {"Knowledge", "Index"}


def matches(text: str, expression: str) -> bool:
    """Whether an FTS5 table holding ``text`` matches ``expression``."""
    connection = sqlite3.connect(":memory:")
    connection.execute(f"CREATE VIRTUAL TABLE f USING fts5(title, path, body, tokenize = '{TOKENIZER}')")
    connection.execute("INSERT INTO f VALUES ('a title', 'a/path.py', ?)", (text,))
    return connection.execute("SELECT rowid FROM f WHERE f MATCH ?", (expression,)).fetchall() == [(1,)]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_query_fts5_accepts(text: str) -> None:
    expression = fts_query(text)
    if expression is None:
        assert query_words(text) == []
    else:
        matches(text, expression)  # raises on an expression FTS5 refuses


def characters_both_tokenize_alike(last: int = 0x4FF) -> list[str]:
    """The characters up to ``last`` that SQLite's tokenizer and Python read alike: both a word character or both
    a separator, and SQLite folds the character to what it folds Python's lower case of it to.

    SQLite's unicode61 tables predate recent Unicode versions: a character added since may be a word character to
    one and a separator to the other, or have a lower case only Python knows (U+037F). That only costs a match on
    such text, never an error (the test above), so this one leaves such characters out.
    """
    candidates = [
        chr(code) for code in range(0x20, last + 1) if unicodedata.category(chr(code)) not in ("Cs", "Co", "Cn")
    ]
    connection = sqlite3.connect(":memory:")
    connection.execute(f"CREATE VIRTUAL TABLE f USING fts5(body, tokenize = '{TOKENIZER}')")
    connection.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    rows = [(2 * ord(char) + lowered, char.lower() if lowered else char) for char in candidates for lowered in (0, 1)]
    connection.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)", rows)
    tokens: dict[int, set[str]] = {}
    for term, doc in connection.execute("SELECT term, doc FROM v"):
        tokens.setdefault(doc, set()).add(term)
    return [
        char
        for char in candidates
        if (2 * ord(char) in tokens) == bool(re.fullmatch(r"\w", char))
        and tokens.get(2 * ord(char)) == tokens.get(2 * ord(char) + 1)
    ]


COMMON_SCRIPTS = st.sampled_from(characters_both_tokenize_alike())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=COMMON_SCRIPTS, max_size=200))
def test_a_text_is_found_by_its_own_words(text: str) -> None:
    expression = fts_query(text)
    assert expression is None or matches(text, expression)
