"""What the model reads of an attachment (the text of its ``user.attachment`` block): a text file in full; for a
model that reads them (``models.<role>.modalities``), an image or a PDF as itself — the block then says so and
carries ``meta.media``, and the renderer puts the bytes after it (:mod:`berth.runtime.media`); an image over the
model's limits (``image_max_mb``, ``image_max_side_px``) as a downscaled copy (:mod:`berth.runtime.images`);
otherwise a document's extracted text as a bounded preview (``react.read`` reads the rest by line range), an image
as a described placeholder, anything else by type and size. :func:`delivery` says which, for the user.

Extraction and downscaling run off the event loop: the async callers :func:`prepare` the files first (in a
thread), and the block is then made from small caches of the results, keyed by the file's digest.
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
from berth.runtime.images import FittedImage, ImageLimits, Unfit, fit_image, fits, human_size, image_size

__all__ = [
    "IMAGE_TYPES",
    "PREVIEW_CHARS",
    "Delivery",
    "MediaChoice",
    "attachment_text",
    "choose_media",
    "delivery",
    "document_of",
    "image_limits",
    "model_copy_name",
    "model_copy_path",
    "prepare",
]

IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image types models read (Anthropic's and OpenAI's alike)."""
MIB: Final = 1024 * 1024

PREVIEW_CHARS: Final = 4000
"""Characters of a document's text shown in the prompt; the rest is read with ``react.read``."""
_CACHED: Final = 32


@dataclass(frozen=True, slots=True)
class MediaChoice:
    """Whether an attachment reaches the model as itself (``kind``), or why not (``reason``); an image shown as a
    downscaled copy has it in ``fitted`` and why in ``reason``."""

    kind: Literal["image", "pdf"] | None
    reason: str | None = None
    fitted: FittedImage | None = None


Sent = Literal["as_is", "downscaled", "as_text", "not_sent"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """How the model gets an attachment (``sent``), and for any but ``as_is`` what the user is told (``note``,
    to follow the file's name: "is sent to the model as its text (…)")."""

    sent: Sent
    note: str = ""


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


_fitted: dict[tuple[str, int, ImageLimits], FittedImage | Unfit] = {}
_FITTED_CACHED: Final = 8
"""Downscaled images kept, the oldest dropped first (each up to the model's limit, 3.75 MB by default)."""


def image_limits(model: ModelRef) -> ImageLimits:
    """What ``model`` takes of one image as a file: ``image_max_mb`` counts the base64 the provider is sent (4
    characters for every 3 bytes), and ``image_max_side_px`` the longer side."""
    return ImageLimits(max_bytes=int(model.image_max_mb * MIB) // 4 * 3, max_side=model.image_max_side_px)


def _model_image(data: bytes, limits: ImageLimits) -> FittedImage | Unfit | None:
    """None: the image fits ``limits`` as it is (its header says so: nothing is decoded, nothing hashed);
    otherwise its downscaled copy or why there is none, from the cache when :func:`prepare` made it."""
    size = image_size(data)
    if size is not None and fits(data, size, limits):
        return None
    key = (*_key(data), limits)
    cached = _fitted.get(key)  # prepare() fills it in a thread: get and pop, never look twice
    if cached is not None:
        return cached
    result = fit_image(data, limits)
    _fitted[key] = result
    while len(_fitted) > _FITTED_CACHED:
        _fitted.pop(next(iter(_fitted)), None)
    return result


async def prepare(files: Iterable[tuple[str, str, bytes]], model: ModelRef | None = None) -> None:
    """Extract the documents among ``files``, and downscale the images over ``model``'s limits, in a thread, so
    making their blocks does not block the loop."""
    files = list(files)
    documents = [data for _, mime, data in files if not mime.startswith("text/") and mime not in IMAGE_TYPES]
    images = [data for _, mime, data in files if mime in IMAGE_TYPES] if model and model.reads("image") else []
    if documents or images:
        limits = image_limits(model) if model is not None else None

        def work() -> None:
            for data in documents:
                document_of(data)
            for data in images:
                assert limits is not None
                _model_image(data, limits)

        await asyncio.to_thread(work)


def _image_choice(data: bytes, model: ModelRef) -> MediaChoice:
    limits = image_limits(model)
    result = _model_image(data, limits)
    if result is None:
        return MediaChoice("image")
    if isinstance(result, Unfit):
        if result.code == "too_large":
            return MediaChoice(None, f"it cannot be made smaller than the {model.image_max_mb:g} MB an image may be")
        return MediaChoice(None, result.message)
    over = []
    if max(result.source_width, result.source_height) > limits.max_side:
        over.append(f"{limits.max_side} px a side")
    if len(data) > limits.max_bytes:
        over.append(f"{model.image_max_mb:g} MB as sent")
    return MediaChoice("image", f"the model takes images up to {' and '.join(over)}", result)


def choose_media(mime: str, data: bytes, model: ModelRef | None) -> MediaChoice:
    """Whether ``model`` reads this attachment as an image (as it is, or downscaled to its limits) or a PDF
    document, and if not, why."""
    if mime in IMAGE_TYPES:
        if model is None or not model.reads("image"):
            return MediaChoice(None, "this model does not read images")
        return _image_choice(data, model)
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
    if media.kind == "image" and media.fitted is not None:
        fitted = media.fitted
        resized = (fitted.width, fitted.height) != (fitted.source_width, fitted.source_height)
        how = "downscaled" if resized else "re-encoded"
        return (
            f"({mime}, {len(data)} bytes: shown to you as an image, {how} from {fitted.source_width}x"
            f"{fitted.source_height} ({human_size(len(data))}) to {fitted.width}x{fitted.height} ({fitted.mime}, "
            f"{human_size(len(fitted.data))}): {media.reason})"
        )
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


def model_copy_name(fitted: FittedImage) -> str:
    """Where the downscaled copy of an image lies in a turn's ``attachments/``: ``downscaled/<digest>.png|jpg``,
    named by its bytes (the same copy is one file; no attachment's name can take it: names hold no slash)."""
    digest = hashlib.sha256(fitted.data).hexdigest()[:16]
    return f"downscaled/{digest}.{'png' if fitted.mime == 'image/png' else 'jpg'}"


def model_copy_path(turn_id: str, fitted: FittedImage) -> str:
    """The ``fi:`` path of the downscaled copy of an image stored with turn ``turn_id``."""
    return f"fi:{turn_id}.attachments/{model_copy_name(fitted)}"


def delivery(mime: str, data: bytes, media: MediaChoice) -> Delivery:
    """How the model gets an attachment that :func:`choose_media` decided ``media`` for, and what the user is told
    when it is not the file itself: a downscaled image, a document's text, or only the file's name, type and size."""
    only = "only its name, type and size"
    if mime.startswith("text/") or (media.kind is not None and media.fitted is None):
        return Delivery("as_is")
    if media.fitted is not None:
        fitted = media.fitted
        return Delivery(
            "downscaled",
            f"is shown to the model downscaled, from {fitted.source_width}x{fitted.source_height} "
            f"({human_size(len(data))}) to {fitted.width}x{fitted.height} ({human_size(len(fitted.data))}): "
            f"{media.reason}",
        )
    if mime in IMAGE_TYPES:
        return Delivery("not_sent", f"is not shown to the model, {only} ({media.reason})")
    document = document_of(data)
    if document is None:
        return Delivery("not_sent", f"is not sent to the model, {only} (it reads no {mime} files)")
    if not document.text:
        return Delivery("not_sent", f"is not sent to the model, {only} ({document.notice or 'no text in it'})")
    why = media.reason if mime == "application/pdf" else f"models read {document.kind.upper()} files as their text"
    return Delivery("as_text", f"is sent to the model as its text ({why})")
