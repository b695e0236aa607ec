"""What the model reads of an attachment (the text of its ``user.attachment`` block): a text file in full; for a
model that reads them (``models.<role>.modalities``), an image or a PDF as itself — the block then says so and
carries ``meta.media``, and the renderer puts the bytes after it (:mod:`berth.runtime.media`); otherwise a
document's extracted text as a bounded preview (``react.read`` reads the rest by line range), an image as a
described placeholder, anything else by type and size.

Extraction runs off the event loop: the async callers :func:`prepare` the files first (in a thread), and the
block is then made from a small cache of the results, keyed by the file's digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from berth.config.models.assembly import ModelRef
from berth.runtime.extraction import DocumentText, extract_text

__all__ = ["IMAGE_TYPES", "PREVIEW_CHARS", "MediaChoice", "attachment_text", "choose_media", "document_of", "prepare"]

IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image types models read (Anthropic's and OpenAI's alike)."""
MIB: Final = 1024 * 1024

PREVIEW_CHARS: Final = 4000
"""Characters of a document's text shown in the prompt; the rest is read with ``react.read``."""
_CACHED: Final = 32


@dataclass(frozen=True, slots=True)
class MediaChoice:
    """Whether an attachment reaches the model as itself (``kind``), or why not (``reason``)."""

    kind: Literal["image", "pdf"] | None
    reason: str | None = None


_documents: OrderedDict[tuple[str, int], DocumentText | None] = OrderedDict()


def _key(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest(), len(data)


_last: list[tuple[bytes, DocumentText | None]] = []
"""The bytes asked for last and their text: making one block asks for the same file several times (what the model
reads, its text, what memory indexes), and hashing a 10 MB file for each would hold the event loop."""


def document_of(data: bytes) -> DocumentText | None:
    """The extracted text of ``data`` (None: not a document), from the cache when :func:`prepare` saw it."""
    if _last and _last[0][0] is data:
        return _last[0][1]
    key = _key(data)
    if key in _documents:
        _documents.move_to_end(key)
        document = _documents[key]
    else:
        document = extract_text(data)
        _documents[key] = document
        while len(_documents) > _CACHED:
            _documents.popitem(last=False)
    _last[:] = [(data, document)]
    return document


async def prepare(files: Iterable[tuple[str, str, bytes]]) -> None:
    """Extract the documents among ``files`` in a thread, so making their blocks does not block the loop."""
    documents = [data for _, mime, data in files if not mime.startswith("text/")]
    if documents:
        await asyncio.to_thread(lambda: [document_of(data) for data in documents])


def choose_media(mime: str, data: bytes, model: ModelRef | None) -> MediaChoice:
    """Whether ``model`` reads this attachment as an image or a PDF document, and if not, why."""
    if mime in IMAGE_TYPES:
        if model is None or not model.reads("image"):
            return MediaChoice(None, "this model does not read images")
        if len(data) > model.image_max_mb * MIB:
            return MediaChoice(None, f"it is larger than the {model.image_max_mb:g} MB an image may be")
        return MediaChoice("image")
    if mime == "application/pdf":
        if model is None or not model.reads("pdf"):
            return MediaChoice(None, "this model does not read PDFs")
        if len(data) > model.pdf_max_mb * MIB:
            return MediaChoice(None, f"it is larger than the {model.pdf_max_mb:g} MB a PDF may be")
        document = document_of(data)
        if document is None or (document.notice and not document.text):
            return MediaChoice(None, "it cannot be opened")
        if document.units > model.pdf_max_pages:
            return MediaChoice(
                None, f"its {document.units} pages are more than the {model.pdf_max_pages} a PDF may have"
            )
        return MediaChoice("pdf")
    return MediaChoice(None)


def attachment_text(path: str, mime: str, data: bytes, media: MediaChoice | None = None) -> str:
    """The text of the attachment's block (``path``: its ``fi:`` path, named in the preview's pointer; ``media``:
    what :func:`choose_media` decided for the turn's model)."""
    media = media or MediaChoice(None)
    if mime.startswith("text/"):
        return data.decode("utf-8", errors="replace")
    if media.kind == "image":
        return f"({mime}, {len(data)} bytes: shown to you as an image)"
    if mime in IMAGE_TYPES:
        reason = f": {media.reason}" if media.reason else ""
        return f"({mime}, {len(data)} bytes: an image you cannot see here{reason})"
    document = document_of(data)
    if document is None:
        return f"({mime}, {len(data)} bytes)"
    units = f"{document.units} {document.unit}{'' if document.units == 1 else 's'}"
    if media.kind == "pdf":
        return f"({mime}, {len(data)} bytes, {units}: shown to you as a document)"
    header = f"({mime}, {len(data)} bytes, {units})"
    if not document.text:
        return f"{header}: {document.notice or 'no text in it'}"
    lines = [header]
    if media.reason and mime == "application/pdf":
        lines.append(f"[not shown as a document: {media.reason}; its text follows]")
    if document.notice:
        lines.append(f"[{document.notice}]")
    if len(document.text) <= PREVIEW_CHARS:
        lines.append(document.text)
    else:
        preview = document.text[:PREVIEW_CHARS]
        shown = preview.count("\n") + 1
        total = document.text.count("\n") + 1
        lines.append(preview)
        lines.append(
            f'[preview: lines 1-{shown} of {total}; react.read({json.dumps([path])}, lines="{shown}-{shown + 200}")'
            " reads on]"
        )
    return "\n".join(lines)
