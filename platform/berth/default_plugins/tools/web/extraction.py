"""From a fetched body to text: HTML through trafilatura (main text and title), text and JSON as they are.

Anything else (PDF, images, archives) is refused with ``unsupported_content``: no PDF text extractor
is a dependency of Berth.
"""

from __future__ import annotations

import codecs
import html
import re
from dataclasses import dataclass
from typing import Final

import trafilatura

from berth.default_plugins.tools.web.errors import UNSUPPORTED_CONTENT, WebToolError

HTML_TYPES: Final[frozenset[str]] = frozenset({"text/html", "application/xhtml+xml"})
TEXT_APPLICATION_TYPES: Final[frozenset[str]] = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-ndjson", "application/yaml"}
)
_HTML_START = re.compile(rb"^\s*(<!doctype\s+html|<html|<head|<body)", re.IGNORECASE)
_SNIFF_BYTES: Final = 1024
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class ContentType:
    """A parsed ``Content-Type`` header: the lower-cased media type and its charset, if any."""

    mime: str
    charset: str | None = None

    @classmethod
    def parse(cls, header: str | None) -> ContentType:
        """Parse a header value; an absent header gives an empty ``mime`` (the body is sniffed)."""
        if not header:
            return cls("")
        mime, *parameters = (part.strip() for part in header.split(";"))
        charset = None
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                charset = value.strip().strip("\"'")
        return cls(mime.lower(), charset)


@dataclass(frozen=True)
class ExtractedText:
    """What a body says: its title (may be empty), its text and the media type it was read as."""

    title: str
    text: str
    mime: str


def is_html(mime: str) -> bool:
    """True for the media types extracted as HTML."""
    return mime in HTML_TYPES


def is_textual(mime: str) -> bool:
    """True for the media types returned as text (``text/*``, JSON, XML, YAML and their ``+json``/``+xml`` kin)."""
    return mime.startswith("text/") or mime in TEXT_APPLICATION_TYPES or mime.endswith(("+json", "+xml", "+yaml"))


def is_supported(mime: str) -> bool:
    """True when a body of this media type can become text (an empty ``mime`` is decided by sniffing)."""
    return not mime or is_html(mime) or is_textual(mime)


def unsupported(mime: str) -> WebToolError:
    """The ``unsupported_content`` failure for ``mime``, saying what the tool can read."""
    what = "PDF documents" if mime == "application/pdf" else f"content of type '{mime}'"
    return WebToolError(
        UNSUPPORTED_CONTENT,
        f"{what} cannot be read as text by web.fetch; it reads HTML, text/*, JSON and XML. "
        "Look for an HTML or text version of the page.",
        content_type=mime,
    )


def sniff_mime(body: bytes) -> str:
    """Guess the media type of a body sent without ``Content-Type``: HTML, plain text, or octet-stream."""
    head = body[:_SNIFF_BYTES]
    if _HTML_START.match(head):
        return "text/html"
    if b"\x00" in head:
        return "application/octet-stream"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the sniff window is still text.
        if exc.start < len(head) - 3:
            return "application/octet-stream"
    return "text/plain"


def decode_text(body: bytes, charset: str | None) -> str:
    """Decode ``body`` with its declared charset (UTF-8 when absent or unknown), replacing bad bytes."""
    encoding = "utf-8"
    if charset:
        try:
            encoding = codecs.lookup(charset).name
        except LookupError:
            encoding = "utf-8"
    return body.decode(encoding, errors="replace")


def extract_text(body: bytes, content_type: ContentType, url: str) -> ExtractedText:
    """Turn a body into text (CPU-bound: call it in a worker thread).

    HTML gives the page's main text without navigation and boilerplate, and its title; when the
    extractor finds no main text, the page's whole visible text is used instead. Raises
    :class:`WebToolError` ``unsupported_content`` for anything that is not text.
    """
    mime = content_type.mime or sniff_mime(body)
    if is_html(mime):
        return _extract_html(body, content_type.charset, url, mime)
    if is_textual(mime):
        return ExtractedText(title="", text=decode_text(body, content_type.charset), mime=mime)
    raise unsupported(mime)


def _extract_html(body: bytes, charset: str | None, url: str, mime: str) -> ExtractedText:
    # trafilatura detects the encoding of bytes itself; a declared charset is honoured by decoding first.
    document: str | bytes = decode_text(body, charset) if charset else body
    extracted = trafilatura.bare_extraction(
        document, url=url, with_metadata=True, include_comments=False, include_tables=True
    )
    title = ""
    text = ""
    if isinstance(extracted, trafilatura.settings.Document):
        title = (extracted.title or "").strip()
        text = (extracted.text or "").strip()
    if not text:
        text = (trafilatura.html2txt(document) or "").strip()
    if not title:
        title = _html_title(document)
    return ExtractedText(title=title, text=text, mime=mime)


def _html_title(document: str | bytes) -> str:
    text = document if isinstance(document, str) else document.decode("utf-8", errors="replace")
    match = _TITLE.search(text)
    return " ".join(html.unescape(match.group(1)).split()) if match else ""
