"""What the model gets of an attachment, and what the user is told of it (issue 37): an image over the model's
limits goes downscaled and its block says from what to what; a document not read as itself goes as its text; a
file the model cannot read goes by name, type and size — each of these with a notice for the user."""

from __future__ import annotations

import io
import random
from datetime import UTC, datetime

import pytest
from PIL import Image

from berth.config.models.assembly import ModelRef
from berth.runtime.attachments import Delivery, MediaChoice, attachment_text, choose_media, delivery, model_copy_path
from berth.runtime.live import attachment_block, attachment_notices, model_copies
from berth.testing.documents import docx_bytes, encrypted_pdf, pdf_bytes, png_bytes

ANTHROPIC = ModelRef(provider="anthropic", model="claude-sonnet-5-5")
OPENAI = ModelRef(provider="openai-compatible", model="gpt", base_url="http://x")
TEXT_ONLY = ModelRef(provider="scripted", model="script.yaml")
WIDE = png_bytes(9000, 100, "teal")
SMALL = png_bytes(64, 48)
PDF = pdf_bytes(["Invoice 42"])
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_an_image_wider_than_the_model_takes_is_shown_downscaled_and_its_block_says_so() -> None:
    media = choose_media("image/png", WIDE, ANTHROPIC)
    assert media.kind == "image" and media.fitted is not None
    assert (media.fitted.width, media.fitted.height, media.fitted.mime) == (8000, 89, "image/png")
    assert media.reason == "the model takes images up to 8000 px a side"
    text = attachment_text("fi:t.attachments/wide.png", "image/png", WIDE, media)
    assert text.startswith(f"(image/png, {len(WIDE)} bytes: shown to you as an image, downscaled from 9000x100 (")
    assert f"to 8000x89 (image/png, {len(media.fitted.data)} bytes" not in text  # sizes as people read them
    assert "to 8000x89 (image/png, " in text
    assert text.endswith(": the model takes images up to 8000 px a side)")


def test_the_block_points_the_renderer_at_the_stored_copy_and_tells_the_user() -> None:
    block = attachment_block("turn_1", "wide.png", "image/png", WIDE, NOW, model=ANTHROPIC)
    media = choose_media("image/png", WIDE, ANTHROPIC)
    assert media.fitted is not None
    copy = model_copy_path("turn_1", media.fitted)
    assert copy.startswith("fi:turn_1.attachments/downscaled/") and copy.endswith(".png")
    assert block.meta["media"] == "image"
    assert block.meta["media_path"] == copy
    assert block.meta["media_mime"] == "image/png"
    assert model_copies([block], {"wide.png": ("image/png", WIDE)}, ANTHROPIC) == {copy: media.fitted.data}
    [notice] = attachment_notices([block])
    assert notice["code"] == "attachment_downscaled"
    assert notice["name"] == "wide.png" and notice["path"] == "fi:turn_1.attachments/wide.png"
    assert notice["message"].startswith("wide.png is shown to the model downscaled, from 9000x100 (")
    assert "to 8000x89 (" in notice["message"]


def test_an_image_within_the_limits_goes_as_it_is_without_a_notice() -> None:
    block = attachment_block("turn_1", "small.png", "image/png", SMALL, NOW, model=ANTHROPIC)
    assert "media_path" not in block.meta and "sent" not in block.meta
    assert attachment_notices([block]) == []
    assert model_copies([block], {"small.png": ("image/png", SMALL)}, ANTHROPIC) == {}


@pytest.mark.parametrize(
    ("name", "mime", "data", "model", "expected"),
    [
        ("notes.txt", "text/plain", b"hello", TEXT_ONLY, Delivery("as_is")),
        ("small.png", "image/png", SMALL, ANTHROPIC, Delivery("as_is")),
        ("invoice.pdf", "application/pdf", PDF, ANTHROPIC, Delivery("as_is")),
        (
            "invoice.pdf",
            "application/pdf",
            PDF,
            OPENAI,
            Delivery("as_text", "is sent to the model as its text (this model does not read PDFs)"),
        ),
        (
            "long.pdf",
            "application/pdf",
            pdf_bytes(["p"] * 501),
            ANTHROPIC,
            Delivery(
                "as_text", "is sent to the model as its text (its 501 pages are more than the 500 a PDF may have)"
            ),
        ),
        (
            "report.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            docx_bytes(["Quarterly report"]),
            ANTHROPIC,
            Delivery("as_text", "is sent to the model as its text (models read DOCX files as their text)"),
        ),
        (
            "locked.pdf",
            "application/pdf",
            encrypted_pdf(["x"]),
            ANTHROPIC,
            Delivery(
                "not_sent",
                "is not sent to the model, only its name, type and size (its text could not be extracted: the PDF"
                " is encrypted (it needs a password))",
            ),
        ),
        (
            "data.bin",
            "application/octet-stream",
            b"\x00\x01",
            ANTHROPIC,
            Delivery(
                "not_sent",
                "is not sent to the model, only its name, type and size (it reads no application/octet-stream files)",
            ),
        ),
        (
            "small.png",
            "image/png",
            SMALL,
            TEXT_ONLY,
            Delivery(
                "not_sent", "is not shown to the model, only its name, type and size (this model does not read images)"
            ),
        ),
        (
            "small.png",
            "image/png",
            SMALL,
            ANTHROPIC.model_copy(update={"image_max_mb": 0.00001}),
            Delivery(
                "not_sent",
                "is not shown to the model, only its name, type and size (it cannot be made smaller than the 1e-05"
                " MB an image may be)",
            ),
        ),
    ],
)
def test_the_user_is_told_how_the_model_gets_each_file(
    name: str, mime: str, data: bytes, model: ModelRef, expected: Delivery
) -> None:
    assert delivery(mime, data, choose_media(mime, data, model)) == expected
    block = attachment_block("turn_1", name, mime, data, NOW, model=model)
    notices = attachment_notices([block])
    if expected.sent == "as_is":
        assert notices == []
    else:
        assert notices == [
            {
                "code": f"attachment_{expected.sent}",
                "message": f"{name} {expected.note}",
                "name": name,
                "path": f"fi:turn_1.attachments/{name}",
            }
        ]


def test_an_image_over_the_byte_limit_is_made_smaller_the_same_way_every_time() -> None:
    rng = random.Random(3)
    noise = Image.frombytes("RGB", (500, 400), rng.randbytes(500 * 400 * 3))
    out = io.BytesIO()
    noise.save(out, "PNG")
    data = out.getvalue()
    model = ANTHROPIC.model_copy(update={"image_max_mb": 0.5})  # 384 KB as a file: the 587 KB PNG is over
    first = choose_media("image/png", data, model)
    again = choose_media("image/png", bytes(data), model)  # equal bytes, another object: the same copy
    assert first.fitted is not None and again.fitted is not None
    assert first.fitted.data == again.fitted.data
    assert len(first.fitted.data) <= 393_216
    assert first.reason == "the model takes images up to 0.5 MB as sent"
    assert first == MediaChoice("image", first.reason, first.fitted)
