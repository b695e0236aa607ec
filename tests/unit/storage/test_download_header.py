"""``Content-Disposition`` for any file name: ASCII on the wire, the name itself back from ``filename*``."""

from __future__ import annotations

import re
from urllib.parse import unquote

from hypothesis import given
from hypothesis import strategies as st

from berth.storage.downloads import content_disposition

QUOTED = re.compile(r'^(inline|attachment); filename="([ !#-\[\]-~]*)"(; filename\*=UTF-8\'\'([A-Za-z0-9%._~-]+))?$')
"""The header's whole grammar here: a quoted ``filename`` of printable ASCII without ``"`` or ``\\``, then
``filename*`` of RFC 5987 attr-chars and percent escapes."""


def read_back(header: str) -> str:
    """The name a client reads: ``filename*`` when present (RFC 6266 §4.3), else ``filename``."""
    match = QUOTED.match(header)
    assert match, header
    return unquote(match.group(4), errors="strict") if match.group(4) else match.group(2)


def test_a_plain_ascii_name_is_just_quoted() -> None:
    assert content_disposition("report.pdf") == 'attachment; filename="report.pdf"'
    assert content_disposition("a b.txt", "inline") == 'inline; filename="a b.txt"'


def test_names_outside_latin_1_get_an_ascii_stand_in_and_their_utf_8_form() -> None:
    assert content_disposition("Отчёт.txt") == (
        "attachment; filename=\"_____.txt\"; filename*=UTF-8''%D0%9E%D1%82%D1%87%D1%91%D1%82.txt"
    )
    assert read_back(content_disposition("報告.pdf")) == "報告.pdf"
    assert read_back(content_disposition("invoice\u202etxt.exe")) == "invoice\u202etxt.exe"


def test_quotes_backslashes_and_control_characters_cannot_break_the_header() -> None:
    header = content_disposition('say "hi"\\\r\nSet-Cookie: x=1.txt')
    assert "\r" not in header and "\n" not in header
    assert header.startswith('attachment; filename="say _hi____Set-Cookie: x=1.txt"; filename*=')
    assert read_back(header) == 'say "hi"\\\r\nSet-Cookie: x=1.txt'


@given(name=st.text(min_size=1, max_size=60), inline=st.booleans())
def test_any_name_makes_an_ascii_header_that_gives_the_name_back(name: str, inline: bool) -> None:
    header = content_disposition(name, "inline" if inline else "attachment")
    assert header.isascii()
    header.encode("latin-1")  # what Starlette does with a header value
    assert read_back(header) == name


def test_a_lone_surrogate_becomes_a_question_mark() -> None:
    assert read_back(content_disposition("a\udcffb.txt")) == "a?b.txt"
