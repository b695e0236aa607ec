"""Fitting an image into what a model takes: at most ``max_bytes`` as a file and ``max_side`` pixels a side.

An image within both limits is never touched. Any other is decoded (its first frame; turned upright by its EXIF
orientation), scaled down with its aspect ratio kept, and encoded again without its metadata (EXIF, ICC profile,
text chunks): as PNG if that fits (a JPEG source goes straight to JPEG), else as JPEG at falling quality, and if no
quality fits, smaller again — each step sized from how far the smallest encoding was over. The same bytes and
limits always give the same bytes out (the prompt cache needs the image identical in every turn that shows it).

Pillow is imported on the first image that needs it, never when this module is.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from PIL.Image import Image
    from PIL.ImageFile import ImageFile

__all__ = [
    "JPEG_QUALITIES",
    "MAX_DECODED_PIXELS",
    "MIN_LONG_SIDE",
    "FittedImage",
    "ImageLimits",
    "Unfit",
    "fit_image",
    "fits",
    "human_size",
    "image_size",
]

JPEG_QUALITIES: Final = (90, 80, 70, 60)
"""The JPEG qualities tried at each size, best first."""
MIN_LONG_SIDE: Final = 32
"""An image is not made smaller than this many pixels on its longer side: no model reads anything in it then."""
MAX_DECODED_PIXELS: Final = 89_478_485
"""Larger images are not decoded (Pillow's own decompression-bomb threshold: about 358 MB of RGBA)."""
_MAX_STEPS: Final = 12
"""Sizes tried at most (each at least 10 % smaller than the one before; the last one at :data:`MIN_LONG_SIDE`)."""


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What a model takes of one image: its file size and the longer side, in pixels."""

    max_bytes: int
    max_side: int


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why an image cannot be made to fit: ``undecodable`` (not an image Pillow reads), ``too_many_pixels`` (more
    than :data:`MAX_DECODED_PIXELS`), ``too_large`` (over the byte limit even at :data:`MIN_LONG_SIDE` pixels)."""

    code: Literal["undecodable", "too_many_pixels", "too_large"]
    message: str


@dataclass(frozen=True, slots=True)
class FittedImage:
    """An image made to fit a model's limits: its new bytes and type, its size now and before."""

    data: bytes
    mime: str
    width: int
    height: int
    source_width: int
    source_height: int
    changed: bool = True
    """False: the image was within the limits, and ``data`` is the file as it came."""


def human_size(size: int) -> str:
    """A byte count as people read it: ``812 bytes``, ``48.2 KB``, ``6.7 MB`` (powers of 1,024)."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"


def _open(data: bytes) -> ImageFile:
    from PIL import Image

    return Image.open(io.BytesIO(data))


def image_size(data: bytes) -> tuple[int, int] | None:
    """The width and height an image's header states (None: Pillow does not read it as an image, or it has more
    pixels than Pillow opens); nothing is decoded."""
    from PIL import UnidentifiedImageError
    from PIL.Image import DecompressionBombError

    try:
        with _open(data) as opened:
            return opened.size
    except (UnidentifiedImageError, DecompressionBombError, OSError, ValueError, SyntaxError):
        return None


def fits(data: bytes, size: tuple[int, int], limits: ImageLimits) -> bool:
    """Whether an image of ``size`` whose file is ``data`` is within ``limits`` as it is."""
    return len(data) <= limits.max_bytes and max(size) <= limits.max_side


def fit_image(data: bytes, limits: ImageLimits) -> FittedImage | Unfit:
    """``data`` made to fit ``limits`` (unchanged when it already does), or why it cannot be: it cannot be decoded,
    it has too many pixels to decode, or even at :data:`MIN_LONG_SIDE` pixels it is over the byte limit."""
    from PIL import UnidentifiedImageError
    from PIL.Image import DecompressionBombError

    try:
        with _open(data) as opened:
            width, height = opened.size
            if fits(data, opened.size, limits):
                mime = opened.get_format_mimetype() or "application/octet-stream"
                return FittedImage(data, mime, width, height, width, height, changed=False)
            if width * height > MAX_DECODED_PIXELS:
                return Unfit("too_many_pixels", f"at {width}x{height} pixels it is too large to decode")
            jpeg_source = opened.format in ("JPEG", "MPO")  # MPO: a camera's JPEG with a preview frame
            image = _upright(opened)
    except DecompressionBombError:
        return Unfit("too_many_pixels", "it has too many pixels to decode")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        return Unfit("undecodable", "it cannot be decoded as an image")
    return _shrink(image, limits, jpeg_source=jpeg_source, source=(width, height))


def _upright(opened: Image) -> Image:
    """The first frame, loaded, turned by its EXIF orientation, in a mode PNG and JPEG can hold."""
    from PIL import ImageOps

    opened.seek(0)
    opened.load()
    turned = ImageOps.exif_transpose(opened) or opened
    return _plain_mode(turned)


def _plain_mode(image: Image) -> Image:
    """The image as L, LA, RGB or RGBA (palettes expanded, 16-bit grey brought to 8 bits, CMYK to RGB)."""
    mode = image.mode
    if mode in ("L", "RGB") and "transparency" in image.info:  # a colour key: transparency as an alpha channel
        return image.convert(f"{mode}A")
    if mode in ("L", "LA", "RGB", "RGBA"):
        return image
    if mode == "1":
        return image.convert("L")
    if mode in ("P", "PA"):
        transparent = mode == "PA" or "transparency" in image.info
        return image.convert("RGBA" if transparent else "RGB")
    if mode.startswith("I;16") or mode == "I":
        import numpy as np

        values = np.asarray(image.convert("I"), dtype=np.int64)
        return _from_array((np.clip(values, 0, 65535) >> 8).astype(np.uint8))
    if mode == "F":
        import numpy as np

        values = np.asarray(image, dtype=np.float64)
        return _from_array(np.clip(np.nan_to_num(values), 0, 255).astype(np.uint8))
    return image.convert("RGBA" if "A" in mode or "transparency" in image.info else "RGB")


def _from_array(values: npt.NDArray[np.uint8]) -> Image:
    from PIL import Image

    return Image.fromarray(values)  # two dimensions of uint8: mode L


def _scaled(width: int, height: int, scale: float) -> tuple[int, int]:
    """``width`` x ``height`` times ``scale``, each side rounded and at least 1 pixel."""
    return max(1, round(width * scale)), max(1, round(height * scale))


def _shrink(image: Image, limits: ImageLimits, *, jpeg_source: bool, source: tuple[int, int]) -> FittedImage | Unfit:
    width, height = image.size
    long_side = max(width, height)
    floor = min(MIN_LONG_SIDE, long_side) / long_side
    scale = min(1.0, limits.max_side / long_side)
    smallest = 0
    for step in range(_MAX_STEPS):
        size = _scaled(width, height, scale)
        resized = image if size == image.size else _resized(image, size)
        resized.info = {}  # no EXIF, ICC profile or text chunks in what is encoded
        smallest = 0
        for mime, encoded in _encodings(resized, jpeg_source=jpeg_source):
            if len(encoded) <= limits.max_bytes:
                return FittedImage(encoded, mime, size[0], size[1], source[0], source[1])
            smallest = min(smallest, len(encoded)) if smallest else len(encoded)
        if scale <= floor:
            break
        shrunk = scale * min(0.9, math.sqrt(limits.max_bytes / smallest) * 0.95)  # bytes go with the area
        scale = floor if step == _MAX_STEPS - 2 else max(floor, shrunk)
    return Unfit(
        "too_large",
        f"even at {MIN_LONG_SIDE} pixels on its longer side it is {human_size(smallest)}, over the "
        f"{human_size(limits.max_bytes)} an image may be",
    )


def _resized(image: Image, size: tuple[int, int]) -> Image:
    from PIL import Image

    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def _encodings(image: Image, *, jpeg_source: bool) -> Iterator[tuple[str, bytes]]:
    """The encodings to try, best first, each made only when the one before did not fit: PNG (not for a JPEG
    source), then JPEG at :data:`JPEG_QUALITIES`."""
    if not jpeg_source:
        yield "image/png", _encode(image, "PNG")
    flat = _flattened(image)
    for quality in JPEG_QUALITIES:
        yield "image/jpeg", _encode(flat, "JPEG", quality=quality)


def _flattened(image: Image) -> Image:
    """The image without transparency (JPEG has none): over white."""
    from PIL import Image

    if image.mode in ("L", "RGB"):
        return image
    base_mode = "L" if image.mode == "LA" else "RGB"
    background = Image.new(base_mode, image.size, 255 if base_mode == "L" else (255, 255, 255))
    background.paste(image.convert(base_mode), mask=image.getchannel("A"))
    return background


def _encode(image: Image, kind: str, **options: int) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()
