"""What the model reads of an attachment (the text of its ``user.attachment`` block): a text file in full, a
document's extracted text as a bounded preview (``react.read`` reads the rest by line range), anything else by
type and size.

Extraction runs off the event loop: the async callers :func:`prepare` the files first (in a thread), and the
block is then made from a small cache of the results, keyed by the file's digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

from berth.runtime.extraction import DocumentText, extract_text

__all__ = ["PREVIEW_CHARS", "attachment_text", "document_of", "prepare"]

PREVIEW_CHARS: Final = 4000
"""Characters of a document's text shown in the prompt; the rest is read with ``react.read``."""
_CACHED: Final = 32

_documents: OrderedDict[tuple[str, int], DocumentText | None] = OrderedDict()


def _key(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest(), len(data)


def document_of(data: bytes) -> DocumentText | None:
    """The extracted text of ``data`` (None: not a document), from the cache when :func:`prepare` saw it."""
    key = _key(data)
    if key in _documents:
        _documents.move_to_end(key)
        return _documents[key]
    document = extract_text(data)
    _documents[key] = document
    while len(_documents) > _CACHED:
        _documents.popitem(last=False)
    return document


async def prepare(files: Iterable[tuple[str, str, bytes]]) -> None:
    """Extract the documents among ``files`` in a thread, so making their blocks does not block the loop."""
    documents = [data for _, mime, data in files if not mime.startswith("text/")]
    if documents:
        await asyncio.to_thread(lambda: [document_of(data) for data in documents])


def attachment_text(path: str, mime: str, data: bytes) -> str:
    """The text of the attachment's block (``path``: its ``fi:`` path, named in the preview's pointer)."""
    if mime.startswith("text/"):
        return data.decode("utf-8", errors="replace")
    document = document_of(data)
    if document is None:
        return f"({mime}, {len(data)} bytes)"
    units = f"{document.units} {document.unit}{'' if document.units == 1 else 's'}"
    header = f"({mime}, {len(data)} bytes, {units})"
    if not document.text:
        return f"{header}: {document.notice or 'no text in it'}"
    lines = [header]
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
