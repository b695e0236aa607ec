"""Sniffing a file's type from its start, and reading ahead in a stream without losing a byte of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from berth.api.attachments import SNIFF_BYTES, sniff_mime
from berth.api.downloads import disposition, sniffed_stream
from berth.testing.documents import png_bytes


@given(st.text(min_size=1, max_size=300).filter(lambda t: "\x00" not in t), st.integers(min_value=1))
def test_the_start_of_utf8_text_is_text_wherever_it_is_cut(text: str, cut: int) -> None:
    data = text.encode() * (SNIFF_BYTES // len(text.encode()) + 2)  # longer than what is read
    head = data[: max(1, cut % (SNIFF_BYTES + 5))]
    assert sniff_mime(head, complete=False) == "text/plain"
    assert sniff_mime(data) == "text/plain"  # the whole file: its first SNIFF_BYTES, cut anywhere


def test_a_whole_file_that_ends_inside_a_character_is_not_text() -> None:
    assert sniff_mime("é".encode()[:1]) == "application/octet-stream"
    assert sniff_mime("é".encode()[:1], complete=False) == "text/plain"


@given(st.binary(max_size=3 * SNIFF_BYTES), st.lists(st.integers(min_value=1, max_value=SNIFF_BYTES), max_size=8))
def test_reading_ahead_keeps_every_byte_in_order(data: bytes, cuts: list[int]) -> None:
    pieces, rest = [], data
    for cut in cuts:
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)

    async def chunks() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def collect() -> tuple[str, bytes]:
        mime, stream = await sniffed_stream(chunks())
        return mime, b"".join([piece async for piece in stream])

    mime, replayed = asyncio.run(collect())
    assert replayed == data
    assert mime == sniff_mime(data[:SNIFF_BYTES], complete=len(data) < SNIFF_BYTES)


def test_only_raster_images_and_pdfs_are_inline_and_names_cannot_break_the_header() -> None:
    assert disposition("image/png", "a.png").startswith('inline; filename="a.png"')
    assert disposition("application/pdf", "a.pdf").startswith("inline;")
    for mime in ("text/plain", "text/html", "image/svg+xml", "application/octet-stream"):
        assert disposition(mime, "x").startswith("attachment;")
    header = disposition("text/plain", 'na"me\r\nX-Evil: 1;é.txt')
    assert "\r" not in header and "\n" not in header
    assert header.startswith("attachment; filename=\"na_me__X-Evil: 1;_.txt\"; filename*=UTF-8''na%22me%0D%0AX-Evil")
    assert sniff_mime(png_bytes()) == "image/png"
