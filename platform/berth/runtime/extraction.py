"""Text from attached documents, for every model and for memory search: PDF text per page (``pypdf``), DOCX
paragraphs and tables in document order (``python-docx``), XLSX sheets as bounded CSV-like previews
(``openpyxl``), PPTX slide text (``python-pptx``).

A document whose text cannot be had (an encrypted PDF, a corrupt file) gives a :class:`DocumentText` with a
``notice`` saying why, never an exception: an attachment is never the reason a turn fails.
"""

from __future__ import annotations

import csv
import io
import logging
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["DocumentKind", "DocumentText", "detect_document", "extract_text", "open_pdf"]

log = logging.getLogger(__name__)

DocumentKind = Literal["pdf", "docx", "xlsx", "pptx"]
MAX_PAGES: Final = 500
"""Pages (slides) whose text is extracted; the rest are named in the notice."""
SHEET_ROWS: Final = 50
SHEET_COLUMNS: Final = 20
CELL_CHARS: Final = 200
MAX_TEXT_CHARS: Final = 2_000_000
"""A bound on the extracted text of one document (a page of text is about 3,000 characters)."""

ENCRYPTED: Final = "its text could not be extracted: the PDF is encrypted (it needs a password)"
_ZIP_KINDS: Final[dict[str, DocumentKind]] = {"word/": "docx", "xl/": "xlsx", "ppt/": "pptx"}
_UNITS: Final[dict[DocumentKind, str]] = {"pdf": "page", "docx": "part", "xlsx": "sheet", "pptx": "slide"}


@dataclass(frozen=True, slots=True)
class DocumentText:
    """The text of one document: ``units`` pages, slides or sheets (``unit``), and what was left out and why."""

    kind: DocumentKind
    text: str
    units: int
    notice: str | None = None

    @property
    def unit(self) -> str:
        """What ``units`` counts: page, slide, sheet (or part, for a DOCX)."""
        return _UNITS[self.kind]


def detect_document(data: bytes) -> DocumentKind | None:
    """The document kind the bytes themselves show (a PDF header, or the parts of an Office Open XML zip)."""
    if data[:5] == b"%PDF-":
        return "pdf"
    if data[:4] != b"PK\x03\x04":
        return None
    try:
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    except (zipfile.BadZipFile, ValueError):
        return None
    if "[Content_Types].xml" not in names:
        return None
    for prefix, kind in _ZIP_KINDS.items():
        if any(name.startswith(prefix) for name in names):
            return kind
    return None


def extract_text(data: bytes, kind: DocumentKind | None = None, *, max_pages: int = MAX_PAGES) -> DocumentText | None:
    """The text of a document (None: the bytes are no document this module reads)."""
    kind = kind or detect_document(data)
    if kind is None:
        return None
    extractor: Callable[[bytes, int], DocumentText] = _EXTRACTORS[kind]
    try:
        found = extractor(data, max_pages)
    except Exception as error:  # a parser's own error types: a corrupt file is a notice, never a failed turn
        log.info("no text from a %s attachment: %s: %s", kind, type(error).__name__, error)
        return DocumentText(kind, "", 0, f"its text could not be extracted: the file is not a readable {kind.upper()}")
    if len(found.text) > MAX_TEXT_CHARS:
        cut = f"text cut at {MAX_TEXT_CHARS} characters"
        notice = f"{found.notice}; {cut}" if found.notice else cut
        return DocumentText(kind, found.text[:MAX_TEXT_CHARS], found.units, notice)
    return found


def open_pdf(data: bytes) -> PdfReader | None:
    """A pypdf reader of ``data``, or None when it is encrypted with a password (an empty one is tried: such a
    PDF opens for reading). A corrupt file raises what pypdf's parser raises."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = bool(reader.decrypt(""))
        except (DependencyError, NotImplementedError):
            opened = False
        if not opened:
            return None
    return reader


def _pdf(data: bytes, max_pages: int) -> DocumentText:
    from pypdf.errors import FileNotDecryptedError

    reader = open_pdf(data)
    if reader is None:
        return DocumentText("pdf", "", 0, ENCRYPTED)
    try:
        total = len(reader.pages)
    except FileNotDecryptedError:
        return DocumentText("pdf", "", 0, ENCRYPTED)
    parts = []
    for number, page in enumerate(reader.pages[:max_pages], start=1):
        parts.append(f"--- page {number} ---\n{(page.extract_text() or '').strip()}")
    notice = f"pages {max_pages + 1}-{total} not extracted (the first {max_pages} are)" if total > max_pages else None
    return DocumentText("pdf", "\n".join(parts), total, notice)


def _docx(data: bytes, max_pages: int) -> DocumentText:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    lines: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            lines.append("")
            for row in item.rows:
                lines.append(" | ".join(" ".join(cell.text.split()) for cell in row.cells))
            lines.append("")
        elif item.text.strip():
            lines.append(item.text)
    return DocumentText("docx", "\n".join(lines).strip(), 1)


def _rows_as_csv(rows: Iterator[tuple[object, ...]], sheet_rows: int) -> tuple[str, int]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    seen = 0
    for row in rows:
        seen += 1
        if seen <= sheet_rows:
            cells = ["" if value is None else str(value)[:CELL_CHARS] for value in row[:SHEET_COLUMNS]]
            writer.writerow(cells)
    return buffer.getvalue(), seen


def _xlsx(data: bytes, max_pages: int) -> DocumentText:
    import openpyxl  # type: ignore[import-untyped]

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        parts = []
        for sheet in workbook.worksheets:
            text, rows = _rows_as_csv(sheet.iter_rows(values_only=True), SHEET_ROWS)
            columns = sheet.max_column or 0
            more = f"\n(… {rows - SHEET_ROWS} more rows)" if rows > SHEET_ROWS else ""
            wide = f" (first {SHEET_COLUMNS} columns)" if columns > SHEET_COLUMNS else ""
            parts.append(f"--- sheet {sheet.title}: {rows} rows x {columns} columns{wide} ---\n{text.rstrip()}{more}")
        return DocumentText("xlsx", "\n".join(parts), len(workbook.worksheets))
    finally:
        workbook.close()


def _pptx(data: bytes, max_pages: int) -> DocumentText:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(data))
    slides = list(presentation.slides)
    parts = []
    for number, slide in enumerate(slides[:max_pages], start=1):
        texts = []
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                texts.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                for row in shape.table.rows:
                    texts.append(" | ".join(cell.text.strip() for cell in row.cells))
        parts.append(f"--- slide {number} ---\n" + "\n".join(texts))
    total = len(slides)
    notice = f"slides {max_pages + 1}-{total} not extracted" if total > max_pages else None
    return DocumentText("pptx", "\n".join(parts), total, notice)


_EXTRACTORS: Final[dict[DocumentKind, Callable[[bytes, int], DocumentText]]] = {
    "pdf": _pdf,
    "docx": _docx,
    "xlsx": _xlsx,
    "pptx": _pptx,
}
