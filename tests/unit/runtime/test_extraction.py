"""Text from attached documents: each kind read in order, bounds kept, and every failure a notice (never an
exception), including for arbitrary bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.config.models.assembly import ModelRef
from berth.runtime.attachments import PREVIEW_CHARS, MediaChoice, attachment_text, choose_media
from berth.runtime.extraction import ENCRYPTED, SHEET_COLUMNS, SHEET_ROWS, detect_document, extract_text
from berth.testing.documents import (
    corrupt_docx,
    docx_bytes,
    encrypted_pdf,
    pdf_bytes,
    png_bytes,
    pptx_bytes,
    xlsx_bytes,
)


def test_pdf_text_comes_page_by_page() -> None:
    document = extract_text(pdf_bytes(["Invoice 42", "Total: 100 EUR (net)", "Thank you"]))
    assert document is not None
    assert (document.kind, document.units, document.notice) == ("pdf", 3, None)
    assert document.text == (
        "--- page 1 ---\nInvoice 42\n--- page 2 ---\nTotal: 100 EUR (net)\n--- page 3 ---\nThank you"
    )


def test_pages_past_the_limit_are_named_not_read() -> None:
    document = extract_text(pdf_bytes([f"page {n}" for n in range(1, 601)]))
    assert document is not None
    assert document.units == 600
    assert document.notice == "pages 501-600 not extracted (the first 500 are)"
    assert "page 500" in document.text and "page 501" not in document.text


def test_an_encrypted_pdf_gives_a_notice_not_an_error() -> None:
    document = extract_text(encrypted_pdf(["the secret plan"]))
    assert document is not None
    assert document.text == ""
    assert document.notice == ENCRYPTED


def test_docx_paragraphs_and_tables_keep_their_order() -> None:
    data = docx_bytes(["Quarterly report", "Sales grew."], [["region", "sales"], ["north", "10"]])
    document = extract_text(data)
    assert document is not None
    assert document.text == "Quarterly report\nSales grew.\n\nregion | sales\nnorth | 10"


def test_xlsx_sheets_are_bounded_csv_previews() -> None:
    wide = [[f"c{n}" for n in range(SHEET_COLUMNS + 5)]]
    long = [["row", n] for n in range(SHEET_ROWS + 10)]
    document = extract_text(xlsx_bytes({"Wide": wide, "Long": long}))
    assert document is not None
    assert document.units == 2
    wide_part, long_part = document.text.split("--- sheet Long")
    assert wide_part.startswith(f"--- sheet Wide: 1 rows x {SHEET_COLUMNS + 5} columns (first {SHEET_COLUMNS} columns)")
    assert wide_part.strip().endswith(f"c{SHEET_COLUMNS - 1}")
    assert long_part.startswith(f": {SHEET_ROWS + 10} rows x 2 columns ---\nrow,0\n")
    assert long_part.endswith("(… 10 more rows)")
    assert f"row,{SHEET_ROWS - 1}" in long_part and f"row,{SHEET_ROWS}\n" not in long_part


def test_pptx_slides_in_order() -> None:
    document = extract_text(pptx_bytes([("Plan", "Ship it"), ("Risks", "None known")]))
    assert document is not None
    assert document.text == "--- slide 1 ---\nPlan\nShip it\n--- slide 2 ---\nRisks\nNone known"


def test_a_corrupt_docx_gives_a_notice() -> None:
    assert detect_document(corrupt_docx()) == "docx"
    document = extract_text(corrupt_docx())
    assert document is not None
    assert document.notice == "its text could not be extracted: the file is not a readable DOCX"


@settings(max_examples=200)
@given(st.binary(max_size=2048), st.sampled_from([b"", b"%PDF-", b"PK\x03\x04"]))
def test_arbitrary_bytes_never_raise(tail: bytes, head: bytes) -> None:
    document = extract_text(head + tail)
    assert document is None or document.text or document.notice


def test_the_block_shows_a_bounded_preview_and_how_to_read_on() -> None:
    data = pdf_bytes([f"line of page {n} " * 8 for n in range(1, 80)])
    text = attachment_text("fi:turn_1.attachments/report.pdf", "application/pdf", data)
    header, *body = text.split("\n")
    assert header == f"(application/pdf, {len(data)} bytes, 79 pages)"
    assert len(text) < PREVIEW_CHARS + 400
    assert body[-1].startswith("[preview: lines 1-")
    assert 'react.read(["fi:turn_1.attachments/report.pdf"], lines="' in body[-1]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (encrypted_pdf(["x"]), f": {ENCRYPTED}"),
        (corrupt_docx(), ": its text could not be extracted: the file is not a readable DOCX"),
    ],
)
def test_a_document_without_text_says_why(data: bytes, expected: str) -> None:
    assert attachment_text("fi:turn_1.attachments/f", "application/pdf", data).endswith(expected)


def test_other_binary_files_are_shown_by_type_and_size() -> None:
    text = attachment_text("fi:turn_1.attachments/a.bin", "application/octet-stream", b"\x00\x01")
    assert text == "(application/octet-stream, 2 bytes)"


ANTHROPIC = ModelRef(provider="anthropic", model="claude-sonnet-5-5")
TEXT_ONLY = ModelRef(provider="scripted", model="script.yaml")
PNG = png_bytes(64, 48)
NOT_AN_IMAGE = b"\x89PNG\r\n\x1a\n" + bytes(100)


def test_a_model_that_reads_images_sees_the_image_itself() -> None:
    choice = choose_media("image/png", PNG, ANTHROPIC)
    assert choice == MediaChoice("image")
    assert attachment_text("fi:t.attachments/a.png", "image/png", PNG, choice) == (
        f"(image/png, {len(PNG)} bytes: shown to you as an image)"
    )


@pytest.mark.parametrize(
    ("model", "data", "reason"),
    [
        (TEXT_ONLY, PNG, "this model does not read images"),
        (
            ANTHROPIC.model_copy(update={"image_max_mb": 0.00001}),
            PNG,
            "it cannot be made smaller than the 1e-05 MB an image may be",
        ),
        (ANTHROPIC, NOT_AN_IMAGE, "it cannot be decoded as an image"),
    ],
)
def test_an_image_the_model_cannot_see_is_a_described_placeholder(model: ModelRef, data: bytes, reason: str) -> None:
    choice = choose_media("image/png", data, model)
    assert choice == MediaChoice(None, reason)
    text = attachment_text("fi:t.attachments/a.png", "image/png", data, choice)
    assert text == f"(image/png, {len(data)} bytes: an image you cannot see here: {reason})"


def test_a_pdf_is_a_document_for_a_model_that_reads_pdfs_and_text_otherwise() -> None:
    data = pdf_bytes(["Invoice 42", "Total", "Thanks"])
    shown = choose_media("application/pdf", data, ANTHROPIC)
    assert shown == MediaChoice("pdf")
    assert attachment_text("fi:t.attachments/i.pdf", "application/pdf", data, shown).endswith(
        "3 pages: shown to you as a document)"
    )
    openai = ModelRef(provider="openai-compatible", model="gpt", base_url="http://x")
    as_text = choose_media("application/pdf", data, openai)
    assert as_text == MediaChoice(None, "this model does not read PDFs")
    text = attachment_text("fi:t.attachments/i.pdf", "application/pdf", data, as_text)
    assert "[not shown as a document: this model does not read PDFs; its text follows]" in text
    assert "--- page 1 ---\nInvoice 42" in text


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (pdf_bytes(["p"] * 600), "its 600 pages are more than the 500 a PDF may have"),
        (encrypted_pdf(["x"]), "it cannot be opened"),
    ],
)
def test_a_pdf_over_the_limits_goes_as_text_with_the_reason(data: bytes, reason: str) -> None:
    assert choose_media("application/pdf", data, ANTHROPIC) == MediaChoice(None, reason)
