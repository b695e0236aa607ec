"""Images fitted to a model's limits (issue 37): within the byte and side limits, the aspect ratio kept to a pixel,
upright by EXIF orientation, without metadata, the same bytes for the same input, and a clear reason when an
image cannot be made to fit."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from berth.config.models.assembly import ModelRef
from berth.runtime.attachments import image_limits
from berth.runtime.images import MIN_LONG_SIDE, FittedImage, ImageLimits, Unfit, fit_image, image_size

MODES_AND_FORMATS = [
    ("1", "PNG"),
    ("L", "PNG"),
    ("LA", "PNG"),
    ("P", "PNG"),
    ("P", "GIF"),
    ("RGB", "PNG"),
    ("RGB", "JPEG"),
    ("RGB", "WEBP"),
    ("RGBA", "PNG"),
    ("RGBA", "WEBP"),
    ("I;16", "PNG"),
    ("CMYK", "JPEG"),
]


def noisy(mode: str, width: int, height: int, seed: int, fmt: str) -> bytes:
    """An image of random pixels (it hardly compresses), saved as ``fmt``."""
    import random

    rng = random.Random(seed)
    base = Image.frombytes("RGBA", (width, height), rng.randbytes(width * height * 4))
    if mode == "I;16":
        image = Image.frombytes("I;16", (width, height), rng.randbytes(width * height * 2))
    elif mode == "P":
        image = base.convert("RGB").quantize(colors=64)
    else:
        image = base.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return out.getvalue()


def decoded(fitted: FittedImage) -> Image.Image:
    image = Image.open(io.BytesIO(fitted.data))
    assert image.get_format_mimetype() == fitted.mime
    return image


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(MODES_AND_FORMATS),
    width=st.integers(1, 320),
    height=st.integers(1, 320),
    seed=st.integers(0, 2**16),
    max_side=st.integers(8, 400),
    byte_share=st.floats(0.02, 1.5),
)
def test_a_fitted_image_is_within_the_limits_keeps_its_aspect_and_is_the_same_every_time(
    kind: tuple[str, str], width: int, height: int, seed: int, max_side: int, byte_share: float
) -> None:
    mode, fmt = kind
    data = noisy(mode, width, height, seed, fmt)
    limits = ImageLimits(max_bytes=max(64, int(len(data) * byte_share)), max_side=max_side)
    fitted = fit_image(data, limits)
    assert fit_image(data, limits) == fitted  # deterministic: the prompt cache sees the same bytes every turn
    if isinstance(fitted, Unfit):  # only when even the smallest allowed copy is over the byte limit
        assert fitted.code == "too_large"
        assert len(data) > limits.max_bytes
        return
    assert (fitted.source_width, fitted.source_height) == (width, height)
    if not fitted.changed:
        assert fitted.data == data
        assert len(data) <= limits.max_bytes and max(width, height) <= max_side
        return
    assert len(fitted.data) <= limits.max_bytes
    assert max(fitted.width, fitted.height) <= max_side
    assert fitted.mime in ("image/png", "image/jpeg")
    assert fitted.width <= width and fitted.height <= height
    if width >= height:  # the shorter side follows the longer one's scale, rounded: within a pixel
        assert abs(fitted.height - height * fitted.width / width) <= 1
    else:
        assert abs(fitted.width - width * fitted.height / height) <= 1
    image = decoded(fitted)
    assert image.size == (fitted.width, fitted.height)
    assert not image.info.get("exif") and not image.info.get("icc_profile")


def solid(size: tuple[int, int], fmt: str = "PNG", color: str = "navy") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)
    return out.getvalue()


def test_an_image_within_the_limits_is_left_as_it_is() -> None:
    data = solid((40, 30), "GIF")
    fitted = fit_image(data, ImageLimits(max_bytes=10_000, max_side=40))
    assert isinstance(fitted, FittedImage)
    assert (fitted.changed, fitted.data, fitted.mime, fitted.width) == (False, data, "image/gif", 40)


def test_a_side_over_the_limit_is_scaled_down_to_it_as_png() -> None:
    fitted = fit_image(solid((9000, 100)), ImageLimits(max_bytes=3_932_160, max_side=8000))
    assert isinstance(fitted, FittedImage)
    assert (fitted.width, fitted.height, fitted.mime) == (8000, 89, "image/png")
    assert decoded(fitted).size == (8000, 89)


def test_a_jpeg_goes_on_as_jpeg_and_a_gif_or_webp_as_png() -> None:
    jpeg = fit_image(solid((300, 200), "JPEG"), ImageLimits(max_bytes=100_000, max_side=100))
    gif = fit_image(solid((300, 200), "GIF"), ImageLimits(max_bytes=100_000, max_side=100))
    webp = fit_image(solid((300, 200), "WEBP"), ImageLimits(max_bytes=100_000, max_side=100))
    assert isinstance(jpeg, FittedImage) and jpeg.mime == "image/jpeg"
    assert isinstance(gif, FittedImage) and gif.mime == "image/png"
    assert isinstance(webp, FittedImage) and webp.mime == "image/png"


def test_a_large_noisy_png_becomes_a_jpeg_within_the_byte_limit() -> None:
    data = noisy("RGB", 600, 500, 7, "PNG")  # about 900 KB: random pixels do not compress
    fitted = fit_image(data, ImageLimits(max_bytes=300_000, max_side=8000))
    assert isinstance(fitted, FittedImage)
    assert fitted.mime == "image/jpeg" and len(fitted.data) <= 300_000
    assert (fitted.source_width, fitted.source_height) == (600, 500)


def test_exif_orientation_is_applied_and_metadata_left_out() -> None:
    image = Image.new("RGB", (40, 20), "red")
    image.paste(Image.new("RGB", (20, 20), "blue"), (20, 0))  # left red, right blue
    exif = Image.Exif()
    exif[0x0112] = 6  # the camera was turned: show it rotated 90° clockwise
    exif[0x010F] = "Camera Maker"
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes(), icc_profile=b"\0" * 128, quality=95)
    fitted = fit_image(out.getvalue(), ImageLimits(max_bytes=100_000, max_side=30))
    assert isinstance(fitted, FittedImage)
    upright = decoded(fitted).convert("RGB")
    assert upright.size == (15, 30)  # 20x40 upright, scaled to 30 on its longer side
    top, bottom = upright.getpixel((7, 3)), upright.getpixel((7, 26))
    assert isinstance(top, tuple) and isinstance(bottom, tuple)
    assert top[0] > 200 and top[2] < 60  # red on top
    assert bottom[2] > 200 and bottom[0] < 60  # blue below
    assert not upright.info.get("exif") and not upright.info.get("icc_profile")
    assert b"Camera Maker" not in fitted.data


def test_transparency_survives_as_png() -> None:
    image = Image.new("RGBA", (200, 100), (0, 0, 0, 0))
    image.paste(Image.new("RGBA", (100, 100), (0, 200, 0, 255)), (0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    fitted = fit_image(out.getvalue(), ImageLimits(max_bytes=100_000, max_side=50))
    assert isinstance(fitted, FittedImage) and fitted.mime == "image/png"
    shown = decoded(fitted)
    assert shown.mode == "RGBA" and shown.size == (50, 25)
    assert shown.getpixel((45, 12)) == (0, 0, 0, 0)


def test_a_colour_key_becomes_an_alpha_channel() -> None:
    image = Image.new("RGB", (200, 100), (255, 0, 255))
    image.paste(Image.new("RGB", (100, 100), (0, 90, 200)), (0, 0))
    out = io.BytesIO()
    image.save(out, "PNG", transparency=(255, 0, 255))  # magenta is transparent (a tRNS colour key)
    fitted = fit_image(out.getvalue(), ImageLimits(max_bytes=100_000, max_side=50))
    assert isinstance(fitted, FittedImage)
    shown = decoded(fitted)
    assert shown.mode == "RGBA"
    pixel = shown.getpixel((45, 12))
    assert isinstance(pixel, tuple) and pixel[3] == 0


def png_header(width: int, height: int) -> bytes:
    """A PNG that states a size in its header and holds one row of pixels (nothing decodes it in full)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 9)) + chunk(b"IEND", b"")
    )


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # the 90 M pixel header: as meant
@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(100), "undecodable"),
        (b"GIF89a not really", "undecodable"),
        (png_header(10_000, 9_000), "too_many_pixels"),  # 90 M pixels: over what is decoded
        (png_header(20_000, 20_000), "too_many_pixels"),  # Pillow itself refuses to open it
        (solid((400, 300)), "too_large"),  # no PNG or JPEG is 20 bytes
    ],
)
def test_an_image_that_cannot_be_made_to_fit_says_why(data: bytes, code: str) -> None:
    fitted = fit_image(data, ImageLimits(max_bytes=20, max_side=8000))
    assert isinstance(fitted, Unfit)
    assert fitted.code == code
    if code == "too_large":
        assert f"even at {MIN_LONG_SIDE} pixels" in fitted.message


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_image_size_reads_the_header_only() -> None:
    assert image_size(png_header(10_000, 9_000)) == (10_000, 9_000)
    assert image_size(b"no image") is None


def test_a_models_byte_limit_counts_the_base64_it_is_sent() -> None:
    """Anthropic counts its 5 MB on the base64 text: the file may be 3.75 MB."""
    limits = image_limits(ModelRef(provider="anthropic", model="claude-sonnet-5-5"))
    assert limits == ImageLimits(max_bytes=3_932_160, max_side=8000)
    assert len(base64.b64encode(bytes(limits.max_bytes))) == 5 * 1024 * 1024
    assert len(base64.b64encode(bytes(limits.max_bytes + 1))) > 5 * 1024 * 1024
