"""Chunkers for documents: markdown and HTML by headings, plain text by paragraph windows, PDF by pages.

Every chunker takes a file's path inside the space and its content and returns its :class:`Chunk` list in file
order, named as :mod:`berth.knowledge.chunks` says (section slugs, ``top``, ``page-<n>``, ``L<first>-<last>``,
``~p<n>`` parts). A file that cannot be indexed raises :class:`SkipFile` with the reason.

Lines are what ``str.split("\\n")`` gives (a final newline ends the last line, it does not start another), so
line numbers are those an editor shows for a file :func:`decode_text` returned. A markdown or plain-text chunk's
text is the exact text of its lines (``"\\n".join`` of lines ``first_line..last_line``); only a single line
longer than :data:`MAX_CHUNK_CHARS` is cut inside, into parts on the same line. An HTML chunk's text is the
visible text of its section (whitespace normalized) and a PDF chunk's the extracted text of its page, so their
parts share the section's (page's) line range.

The parsers (markdown-it, lxml) are imported by the first file of their kind, not with this module: every
``berth`` command that loads bundles imports it through :mod:`berth.bundle`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, ChunkKind, SkipFile, dedupe_anchor, part_anchor, slugify
from berth.runtime.extraction import detect_document, open_pdf

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

__all__ = [
    "DOCUMENT_SUFFIXES",
    "TEXT_WINDOW_CHARS",
    "DocumentType",
    "chunk_document",
    "chunk_html",
    "chunk_markdown",
    "chunk_pdf",
    "chunk_text",
    "decode_text",
]

log = logging.getLogger(__name__)

DocumentType: TypeAlias = Literal["markdown", "text", "html", "pdf"]

DOCUMENT_SUFFIXES: Final[Mapping[str, DocumentType]] = MappingProxyType(
    {
        ".md": "markdown",
        ".markdown": "markdown",
        ".mdx": "markdown",
        ".txt": "text",
        ".rst": "text",
        ".text": "text",
        ".html": "html",
        ".htm": "html",
        ".pdf": "pdf",
    }
)
"""The document chunker for each (lower-case) file suffix :func:`chunk_document` reads."""

TEXT_WINDOW_CHARS: Final = 1_500
"""Plain text: paragraphs are grouped into windows of about this many characters."""

TOP: Final = "top"
"""The anchor of the text before a document's first heading (reserved: a heading ``Top`` is ``top-1``)."""

BINARY_PROBE_BYTES: Final = 8_192
"""A text file with a NUL byte in its first this many bytes is taken for a binary file."""

_BOM: Final = b"\xef\xbb\xbf"
_FRONT_MATTER_ENDS: Final = frozenset({"---", "..."})


@functools.cache
def _markdown() -> MarkdownIt:
    """The CommonMark parser, built once on first use."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


@dataclass(frozen=True, slots=True)
class _Piece:
    """Lines ``first..last`` (0-based, inclusive) of a line list, or one cut of line ``first == last``."""

    first: int
    last: int
    text: str


@dataclass(frozen=True, slots=True)
class _Heading:
    """A heading: where it starts (0-based line), its level (1-6), its plain text and an explicit anchor."""

    line: int
    level: int
    text: str
    ident: str = ""


# --- shared ---------------------------------------------------------------------------------------------------


def _file_name(path: str) -> str:
    return PurePosixPath(path).name or path


def _lines(text: str) -> list[str]:
    """The lines of ``text``: split on ``\\n``, a final newline ending the last line rather than starting one."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _blank(line: str) -> bool:
    return not line.strip()


def _cut_line(line: str, index: int, limit: int) -> Iterator[_Piece]:
    """A line longer than ``limit`` in cuts of at most ``limit``, at a space in the second half when there is one."""
    start = 0
    while start < len(line):
        end = start + limit
        if end < len(line):
            space = line.rfind(" ", start + limit // 2, end)
            end = space + 1 if space > start else end
        yield _Piece(index, index, line[start:end])
        start = end


def _joined_size(lines: Sequence[str], first: int, last: int) -> int:
    """``len("\\n".join(lines[first:last + 1]))`` (-1 for no lines)."""
    return sum(len(line) for line in lines[first : last + 1]) + (last - first)


def _split_lines(lines: Sequence[str], limit: int = MAX_CHUNK_CHARS) -> list[_Piece]:
    """``lines`` in consecutive pieces of at most ``limit`` characters each, none of them blank.

    A piece ends after a blank line (a paragraph boundary) when its lines hold one, else at a line boundary; a
    single line longer than ``limit`` is cut (:func:`_cut_line`).
    """
    pieces: list[_Piece] = []
    start, size, boundary = 0, -1, -1  # the open piece: lines start..k-1, their joined size, its last blank line
    k = 0
    while k < len(lines):
        line = lines[k]
        if len(line) > limit:
            pieces.extend(_close(lines, start, k - 1))
            pieces.extend(_cut_line(line, k, limit))
            start, size, boundary, k = k + 1, -1, -1, k + 1
        elif size + 1 + len(line) <= limit:
            size += 1 + len(line)
            boundary = k if _blank(line) and k > start else boundary
            k += 1
        else:  # line k does not fit: close the open piece after its last paragraph, or before line k
            end = boundary if boundary >= 0 else k - 1
            pieces.extend(_close(lines, start, end))
            start, boundary = end + 1, -1
            size = _joined_size(lines, start, k - 1)
    pieces.extend(_close(lines, start, len(lines) - 1))
    return pieces


def _close(lines: Sequence[str], first: int, last: int) -> list[_Piece]:
    """The piece of lines ``first..last``; none when there are no lines or they are all blank."""
    if last < first or all(_blank(line) for line in lines[first : last + 1]):
        return []
    return [_Piece(first, last, "\n".join(lines[first : last + 1]))]


def _names(headings: Sequence[_Heading], path: str) -> list[tuple[str, str]]:
    """The (anchor, title) of each heading: its GitHub slug (or its own id) de-duplicated, and its heading path."""
    seen: dict[str, int] = {TOP: 1}
    enclosing: list[_Heading] = []
    names = []
    for heading in headings:
        while enclosing and enclosing[-1].level >= heading.level:
            enclosing.pop()
        enclosing.append(heading)
        title = " > ".join(h.text for h in enclosing if h.text) or _file_name(path)
        anchor = dedupe_anchor(heading.ident or slugify(heading.text), seen, style="github")
        names.append((anchor, title))
    return names


def _top_title(headings: Sequence[_Heading], path: str) -> str:
    return (headings[0].text if headings else "") or _file_name(path)


def _line_chunks(
    path: str, anchor: str, title: str, lines: Sequence[str], first: int, last: int, kind: ChunkKind
) -> list[Chunk]:
    """Chunks of file lines ``first..last`` (0-based): one, or parts when longer than :data:`MAX_CHUNK_CHARS`."""
    pieces = _split_lines(lines[first : last + 1])
    return [
        Chunk(path, part_anchor(anchor, n), title, piece.text, first + piece.first + 1, first + piece.last + 1, kind)
        for n, piece in enumerate(pieces, start=1)
    ]


def _text_chunks(
    path: str, anchor: str, title: str, lines: Sequence[str], first_line: int, last_line: int, kind: ChunkKind
) -> list[Chunk]:
    """Chunks of extracted text ``lines`` that all span the same file lines (an HTML section, a PDF page)."""
    pieces = _split_lines(lines)
    return [
        Chunk(path, part_anchor(anchor, n), title, piece.text, first_line, last_line, kind)
        for n, piece in enumerate(pieces, start=1)
    ]


# --- markdown ---------------------------------------------------------------------------------------------------


def chunk_markdown(path: str, text: str) -> list[Chunk]:
    """A markdown file's sections: each heading (ATX or setext) through the line before the next heading.

    Headings are found by a CommonMark parser (``markdown-it-py``), so a ``#`` line in a fenced code block is
    no heading. A section's title is its heading path (``"Deploy > The compose stack"``), its anchor the GitHub
    slug of its heading, de-duplicated within the file. Text before the first heading (YAML front matter
    included) is the ``top`` chunk, titled with the first heading's text or the file name. A section longer
    than :data:`MAX_CHUNK_CHARS` is split into parts at paragraphs, else lines; every part keeps the title.
    """
    lines = _lines(text)
    headings = _markdown_headings(lines)
    chunks: list[Chunk] = []
    first_heading = headings[0].line if headings else len(lines)
    if not all(_blank(line) for line in lines[:first_heading]):
        chunks += _line_chunks(path, TOP, _top_title(headings, path), lines, 0, first_heading - 1, "section")
    for index, (heading, (anchor, title)) in enumerate(zip(headings, _names(headings, path), strict=True)):
        last = headings[index + 1].line - 1 if index + 1 < len(headings) else len(lines) - 1
        chunks += _line_chunks(path, anchor, title, lines, heading.line, last, "section")
    return chunks


def _front_matter_end(lines: Sequence[str]) -> int:
    """The 0-based line that closes YAML front matter opened by a ``---`` first line; -1 when there is none."""
    if not lines or lines[0].rstrip() != "---":
        return -1
    for index in range(1, len(lines)):
        if lines[index].rstrip() in _FRONT_MATTER_ENDS:
            return index
    return -1


def _markdown_headings(lines: Sequence[str]) -> list[_Heading]:
    """The headings of a markdown file, by the line they start on (each on a later line than the one before)."""
    end = _front_matter_end(lines)
    # front matter is blanked out (it is no heading: its closing --- would underline a setext heading), and a
    # lone \r, which the parser takes for a line break, becomes a space so that its lines are the file's lines
    source = "\n".join(["" for _ in range(end + 1)] + [line.replace("\r", " ") for line in lines[end + 1 :]])
    tokens = _markdown().parse(source)
    headings: list[_Heading] = []
    for index, token in enumerate(tokens):
        if token.type != "heading_open" or not token.map:
            continue
        line = token.map[0]
        if (headings and line <= headings[-1].line) or line >= len(lines):
            continue
        inline = tokens[index + 1] if index + 1 < len(tokens) else None
        text = _inline_text(inline.children or []) if inline is not None else ""
        headings.append(_Heading(line, int(token.tag[1:]), " ".join(text.split())))
    return headings


def _inline_text(children: Sequence[Token]) -> str:
    """The plain text of a heading's inline tokens (markup, links and HTML tags dropped; code and alt text kept)."""
    parts = []
    for child in children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(_inline_text(child.children or []))
    return "".join(parts)


# --- plain text -------------------------------------------------------------------------------------------------


def chunk_text(path: str, text: str) -> list[Chunk]:
    """A plain-text file in windows of whole paragraphs of about :data:`TEXT_WINDOW_CHARS` characters.

    A window is anchored ``L<first>-<last>`` by its lines and titled with the file name. A paragraph longer
    than :data:`MAX_CHUNK_CHARS` is split at lines (a single over-long line is cut, its cuts ``~p2``, ``~p3``).
    """
    lines = _lines(text)
    name = _file_name(path)
    parts: dict[str, int] = {}
    chunks: list[Chunk] = []
    for first, last in _windows(lines):
        for piece in _split_lines(lines[first : last + 1]):
            first_line, last_line = first + piece.first + 1, first + piece.last + 1
            anchor = f"L{first_line}-{last_line}"
            parts[anchor] = parts.get(anchor, 0) + 1  # the cuts of one over-long line share its range
            chunks.append(
                Chunk(path, part_anchor(anchor, parts[anchor]), name, piece.text, first_line, last_line, "window")
            )
    return chunks


def _paragraphs(lines: Sequence[str]) -> Iterator[tuple[int, int]]:
    """The (first, last) 0-based lines of each run of non-blank lines."""
    start = -1
    for index, line in enumerate(lines):
        if _blank(line):
            if start >= 0:
                yield start, index - 1
            start = -1
        elif start < 0:
            start = index
    if start >= 0:
        yield start, len(lines) - 1


def _windows(lines: Sequence[str]) -> Iterator[tuple[int, int]]:
    """Runs of whole paragraphs (first, last line) of at most :data:`TEXT_WINDOW_CHARS` characters each.

    A paragraph longer than that is a window of its own (split further by :func:`_split_lines` when it is
    longer than :data:`MAX_CHUNK_CHARS`).
    """
    window: tuple[int, int] | None = None
    size = 0  # the window's joined size, grown paragraph by paragraph: every line is counted at most twice
    for first, last in _paragraphs(lines):
        if window is not None:
            grown = size + 1 + _joined_size(lines, window[1] + 1, last)
            if grown <= TEXT_WINDOW_CHARS:
                window, size = (window[0], last), grown
                continue
            yield window
        window, size = (first, last), _joined_size(lines, first, last)
    if window is not None:
        yield window


# --- HTML -------------------------------------------------------------------------------------------------------

_HEADING_LEVELS: Final = {f"h{level}": level for level in range(1, 7)}
_DROPPED_TAGS: Final = frozenset({"head", "script", "style", "nav", "noscript", "template", "aside", "dialog"})
_CHROME_ROLES: Final = frozenset({"navigation", "search", "dialog", "alertdialog", "banner", "contentinfo"})
"""ARIA roles of page chrome: an element with one is dropped with what it holds."""
_CHROME_NAMES: Final = re.compile(
    r"(?:^|[-_])(?:popup|modal|sidebar|menu-bar|menubar|navbar|search-wrapper|searchbox|skip-link|breadcrumbs?"
    r"|cookie-banner|cookie-consent)"
    r"(?:[-_](?:container|wrapper|outer|inner|box|scrollbox|banner|consent))?$"
)
"""An ``id`` or class naming a page-chrome container (mdBook's ``mdbook-help-popup`` "Keyboard shortcuts",
``theme-popup``, ``menu-bar``, ``sidebar``, ``search-wrapper``; Sphinx's and MkDocs' sidebars and breadcrumbs):
the chrome word ends the name, or is followed by one container word only (``sidebar-visible`` on ``<html>`` is a
state, not a container); ``html``, ``body``, ``main``, ``article`` and sections (``<section>``, Sphinx's
``<div class="section">``, whose ``id`` is their heading's slug: a section titled "Sidebar") never are by name."""
_NEVER_CHROME: Final = frozenset({"html", "body", "main", "article", "section"})
_PAGE_CHROME_TAGS: Final = frozenset({"header", "footer"})
_CONTENT_TAGS: Final = frozenset({"article", "main", "section"})
"""A ``header`` or ``footer`` inside one of these is the content's own (an article's title), not page chrome."""
_BLOCK_TAGS: Final = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "ol", "p", "section",
        "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
    }
)  # fmt: skip
_CELL_TAGS: Final = frozenset({"td", "th"})


@dataclass(slots=True)
class _HtmlSection:
    """The visible text lines of one section of an HTML page; ``heading`` None for the text before the first."""

    heading: _Heading | None
    lines: list[str] = field(default_factory=list)


class _HtmlText:
    """The sections of an HTML page, collected while walking its elements in document order."""

    def __init__(self, total_lines: int) -> None:
        self.sections = [_HtmlSection(None)]
        self._total_lines = total_lines
        self._pending: list[str] = []

    def add(self, text: str | None) -> None:
        """Inline text, part of the current line."""
        if text:
            self._pending.append(text)

    def end_line(self) -> None:
        """Ends the current line (a block's boundary): its whitespace is normalized, an empty one is dropped."""
        line = " ".join("".join(self._pending).split())
        self._pending.clear()
        if line:
            self.sections[-1].lines.append(line)

    def heading(self, element: Any, level: int) -> None:
        """Starts a section at a heading element; its text is the section's first line."""
        self.end_line()
        text = " ".join(element.text_content().split())
        previous = self.sections[-1].heading
        # libxml2 stops counting lines at 65535: keep headings in order and inside the file
        line = max(element.sourceline or 1, previous.line + 1 if previous else 1)
        line = min(line, self._total_lines) - 1
        ident = str(element.get("id") or "").strip()
        self.sections.append(_HtmlSection(_Heading(line, level, text, ident), [text] if text else []))

    def pre(self, element: Any) -> None:
        """Preformatted text: its lines as they are (indentation kept), on lines of their own."""
        self.end_line()
        lines = element.text_content().split("\n")
        self.sections[-1].lines.extend(line.rstrip() for line in lines if line.strip())


def chunk_html(path: str, text: str) -> list[Chunk]:
    """An HTML page's sections by its ``h1``-``h6`` headings, as visible text.

    Scripts, styles, ``nav``, ``aside``, ``dialog``, page-level ``header``/``footer`` and page chrome (hidden
    elements, navigation/search/dialog roles, popups, sidebars and menu bars by id or class) are dropped;
    paragraphs, list items and ``pre`` blocks are lines of their own, whitespace normalized (``pre`` keeps its
    lines). Titles and anchors follow :func:`chunk_markdown`, except that a heading's own ``id`` is its anchor.
    A section spans its heading's source line through the line before the next heading (the last: through the
    end of the file).
    """
    root = _parse_html(text)
    if root is None:
        return []
    total = max(1, len(_lines(text)))
    collected = _HtmlText(total)
    _walk(root, collected)
    collected.end_line()
    top, sections = collected.sections[0], collected.sections[1:]
    headings = [section.heading for section in sections if section.heading is not None]
    starts = [heading.line + 1 for heading in headings] + [total + 1]  # 1-based, and one past the end
    chunks: list[Chunk] = []
    if top.lines:
        chunks += _text_chunks(path, TOP, _top_title(headings, path), top.lines, 1, max(1, starts[0] - 1), "section")
    for index, (section, (anchor, title)) in enumerate(zip(sections, _names(headings, path), strict=True)):
        first = starts[index]
        chunks += _text_chunks(path, anchor, title, section.lines, first, max(first, starts[index + 1] - 1), "section")
    return chunks


def _parse_html(text: str) -> Any:
    """The page's root element (None for a page with no elements), with ``headerlink`` anchors (¶) removed.

    The text is given to the parser as UTF-8 bytes with that encoding named, so that a ``<meta charset>`` or
    an XML declaration does not make it decode the text again. ``huge_tree`` lifts libxml2's nesting limit from
    256 to 2048 elements (the walk has no recursion); a page past a parser limit, read only in part, is skipped.
    """
    import lxml.etree  # type: ignore[import-untyped]
    import lxml.html  # type: ignore[import-untyped]

    parser = lxml.html.HTMLParser(encoding="utf-8", huge_tree=True)
    try:
        root = lxml.html.document_fromstring(text.encode("utf-8", errors="replace"), parser=parser)
    except lxml.etree.ParserError:  # "Document is empty"
        return None
    except lxml.etree.LxmlError as error:
        raise SkipFile(f"not readable HTML: {error}") from error
    fatal = [error for error in parser.error_log if error.level >= lxml.etree.ErrorLevels.FATAL]
    if fatal:  # the HTML parser recovers from any markup: a fatal error is a limit that cut the page short
        raise SkipFile(f"not readable HTML: {fatal[0].message} (line {fatal[0].line})")
    for link in root.find_class("headerlink"):  # Sphinx's and MkDocs' permalink marks inside headings
        link.drop_tree()
    return root


def _walk(root: Any, out: _HtmlText) -> None:
    """Feeds the page's visible text to ``out`` in document order (without recursion: pages nest deeply)."""
    stack: list[tuple[Literal["open", "close", "text"], Any]] = [("open", root)]
    while stack:
        action, item = stack.pop()
        if action == "text":
            out.add(item)
        elif action == "close" and item.tag in _BLOCK_TAGS:
            out.end_line()
        elif action == "close":  # a table cell
            out.add(" ")
        else:
            _open(item, out, stack)


def _open(element: Any, out: _HtmlText, stack: list[tuple[Literal["open", "close", "text"], Any]]) -> None:
    stack.append(("text", element.tail))  # an element's tail is its parent's text after it, kept when it is dropped
    tag = element.tag if isinstance(element.tag, str) else ""  # comments and processing instructions: no text
    if not tag or _dropped(element, tag):
        return
    if tag in _HEADING_LEVELS:
        out.heading(element, _HEADING_LEVELS[tag])
    elif tag == "pre":
        out.pre(element)
    elif tag == "br":
        out.end_line()
    else:
        if tag in _BLOCK_TAGS:
            out.end_line()
        if tag in _BLOCK_TAGS or tag in _CELL_TAGS:
            stack.append(("close", element))
        stack.extend(("open", child) for child in reversed(element))
        stack.append(("text", element.text))


def _dropped(element: Any, tag: str) -> bool:
    if tag in _DROPPED_TAGS or _is_chrome(element):
        return True
    return tag in _PAGE_CHROME_TAGS and not any(parent.tag in _CONTENT_TAGS for parent in element.iterancestors())


def _is_chrome(element: Any) -> bool:
    """Whether ``element`` is page chrome by its attributes: hidden, a chrome ARIA role, or an ``id``/class
    naming a popup, sidebar, menu bar or the like (:data:`_CHROME_NAMES`)."""
    if element.get("hidden") is not None or element.get("aria-hidden") == "true":
        return True
    if (element.get("role") or "").strip().lower() in _CHROME_ROLES:
        return True
    if element.tag in _NEVER_CHROME:
        return False
    classes = (element.get("class") or "").split()
    if "section" in classes:
        return False
    names = [element.get("id") or "", *classes]
    return any(_CHROME_NAMES.search(name.lower()) for name in names if name)


# --- PDF --------------------------------------------------------------------------------------------------------


def chunk_pdf(path: str, data: bytes) -> list[Chunk]:
    """A PDF's pages with text, one chunk each (``page-<n>``, titled ``"<file name> page <n>"``).

    A page longer than :data:`MAX_CHUNK_CHARS` is split into parts; pages without text are left out. An
    encrypted (with a password) or corrupt PDF raises :class:`SkipFile` (``"not a readable PDF: …"``).
    """
    name = _file_name(path)
    chunks: list[Chunk] = []
    for number, page_text in enumerate(_pdf_pages(data), start=1):
        lines = _lines(page_text.strip())
        chunks += _text_chunks(path, f"page-{number}", f"{name} page {number}", lines, number, number, "page")
    return chunks


def _pdf_pages(data: bytes) -> list[str]:
    """The text of each page (empty for a page without text, or one whose text could not be extracted)."""
    if detect_document(data) != "pdf":
        raise SkipFile("not a readable PDF: it does not start with %PDF-")
    try:
        reader = open_pdf(data)
        if reader is None:
            raise SkipFile("not a readable PDF: it is encrypted (it needs a password)")
        pages = list(reader.pages)
    except SkipFile:
        raise
    except Exception as error:  # pypdf's own error types, and what a corrupt file makes its parser raise
        raise SkipFile(f"not a readable PDF: {type(error).__name__}: {error}") from error
    texts = [_page_text(page, number) for number, page in enumerate(pages, start=1)]
    if pages and all(page_text is None for page_text in texts):
        raise SkipFile("not a readable PDF: the text of none of its pages could be extracted")
    return [page_text or "" for page_text in texts]


def _page_text(page: Any, number: int) -> str | None:
    """A page's text (None when extracting it failed: one broken page does not lose the others)."""
    try:
        return str(page.extract_text() or "")
    except Exception as error:  # a corrupt content stream: pypdf raises whatever its parser met
        log.info("no text from page %d of a PDF: %s: %s", number, type(error).__name__, error)
        return None


# --- files ------------------------------------------------------------------------------------------------------


def decode_text(data: bytes, path: str) -> str:
    """A text file's content: UTF-8 (a BOM dropped), ``\\r\\n`` line ends made ``\\n``.

    Raises :class:`SkipFile` for a binary file (a NUL byte in its first :data:`BINARY_PROBE_BYTES` bytes) and for
    invalid UTF-8 (the reason names the byte offset in the file). ``path`` names the file in the log.
    """
    if b"\x00" in data[:BINARY_PROBE_BYTES]:
        log.debug("%s: binary (a NUL byte in its first %d bytes)", path, BINARY_PROBE_BYTES)
        raise SkipFile("binary file (NUL bytes)")
    skipped = len(_BOM) if data.startswith(_BOM) else 0
    try:
        text = data[skipped:].decode("utf-8")
    except UnicodeDecodeError as error:
        log.debug("%s: %s", path, error)
        raise SkipFile(f"not valid UTF-8 at byte {skipped + error.start}") from None
    return text.replace("\r\n", "\n")


def chunk_document(path: str, data: bytes) -> list[Chunk]:
    """A document's chunks, by the chunker its suffix names in :data:`DOCUMENT_SUFFIXES`.

    Raises :class:`SkipFile` for another suffix, and for a file its chunker cannot read.
    """
    suffix = PurePosixPath(path).suffix.lower()
    kind = DOCUMENT_SUFFIXES.get(suffix)
    if kind is None:
        raise SkipFile(f"unsupported document type {suffix or '(no suffix)'}")
    if kind == "pdf":
        return chunk_pdf(path, data)
    text = decode_text(data, path)
    if kind == "markdown":
        return chunk_markdown(path, text)
    if kind == "html":
        return chunk_html(path, text)
    return chunk_text(path, text)
