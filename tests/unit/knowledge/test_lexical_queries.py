"""Turning free text into lexical queries (berth.knowledge.store, berth.knowledge.sqlite_store): any text gives an
expression FTS5 accepts, stopwords only go when something else is left, camel case is split, digits are not."""

from __future__ import annotations

import sqlite3

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


# SQLite's unicode61 tables predate recent Unicode versions: a character added since (or unassigned) may be a
# token character to it and a separator to Python, which only costs a match on such text, never an error.
COMMON_SCRIPTS = st.characters(max_codepoint=0x4FF, exclude_categories=("Cs", "Co", "Cn"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=COMMON_SCRIPTS, max_size=200))
def test_a_text_is_found_by_its_own_words(text: str) -> None:
    expression = fts_query(text)
    assert expression is None or matches(text, expression)
