"""What the model stand-ins check of images and PDFs in a request, as the real APIs do: a base64 source that
decodes, bytes that are what the declared type says (Anthropic refuses "Image does not match the provided media
type"), the size limits (Anthropic counts an image's 5 MB on its base64 text, and refuses a side over 8000
pixels), and a token estimate (Anthropic: ``width x height / 750`` per image, at most about 1,600; roughly 1,500
tokens per PDF page)."""

from __future__ import annotations

import base64
import binascii
import io
import math
from typing import Final

__all__ = [
    "IMAGE_MAX_BYTES",
    "IMAGE_MAX_SIDE",
    "PDF_MAX_BYTES",
    "decode_base64",
    "image_problem",
    "image_tokens",
    "pdf_tokens",
]

IMAGE_MAX_BYTES: Final = 5 * 1024 * 1024
"""Anthropic's limit of one image, on its base64 text (a file of up to 3.75 MB)."""
IMAGE_MAX_SIDE: Final = 8000
"""Anthropic's limit of an image's width and height, in pixels."""
PDF_MAX_BYTES: Final = 32 * 1024 * 1024
_MAGIC: Final = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}


def decode_base64(data: object) -> bytes | None:
    """The bytes of a base64 string (None: not a string, or not valid base64)."""
    if not isinstance(data, str) or not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _sniffed(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for mime, magics in _MAGIC.items():
        if data.startswith(magics):
            return mime
    return None


def image_problem(media_type: object, data: bytes, *, max_side: int | None = IMAGE_MAX_SIDE) -> str | None:
    """Why an image would be refused (None: it is accepted); ``max_side``: the largest width or height (None: no
    limit)."""
    if media_type not in ("image/jpeg", "image/png", "image/gif", "image/webp"):
        return (
            f"media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp' (got {media_type!r})"
        )
    encoded = 4 * math.ceil(len(data) / 3)
    if encoded > IMAGE_MAX_BYTES:
        return f"image exceeds 5 MB maximum: {encoded} bytes > {IMAGE_MAX_BYTES} bytes"
    if _sniffed(data) != media_type:
        return f"Image does not match the provided media type {media_type}"
    size = _image_size(data)
    if size is None:
        return "Could not process image"
    if max_side is not None and max(size) > max_side:
        return f"At least one of the image dimensions exceed max allowed size: {max_side} pixels"
    return None


def _image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the image's header (Pillow reads only the header)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            return opened.size
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None


def image_tokens(data: bytes) -> int:
    """Anthropic's estimate for an image: ``width x height / 750``, at most 1,600 (1,600 when the size is unknown)."""
    size = _image_size(data)
    if size is not None:
        return int(max(1, min(1600, math.ceil(size[0] * size[1] / 750))))
    return 1600


def pdf_tokens(data: bytes) -> int:
    """About 1,500 tokens per page."""
    from pypdf import PdfReader

    try:
        pages = len(PdfReader(io.BytesIO(data)).pages)
    except Exception:  # an unreadable PDF is refused by the caller's other checks or costs one page
        pages = 1
    return 1500 * max(pages, 1)
