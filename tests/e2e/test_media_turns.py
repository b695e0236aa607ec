"""An image shown to the model stays in the prompt, as itself, in every later turn of the conversation: from the
renderer's shelf while the conversation stays in memory, and read back from the store by a runner that never
saw it (another process); a compacted-away or text-only view carries no bytes."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image
from turn_harness import action, complete, turn_harness

from berth.config.models.assembly import ModelRef
from berth.runtime.loop import TurnRunner
from berth.runtime.media import PromptMedia
from berth.runtime.render import RenderedPrompt
from berth.runtime.resident import ResidentConversations
from berth.testing.documents import pdf_bytes, png_bytes

HELLO = {"hello": {"source": {"entry_point": "hello"}}}
PNG = png_bytes(32, 32, "blue")
PDF = pdf_bytes(["Invoice 42", "Total: 100 EUR"])
VISION = ModelRef(provider="scripted", model="script", modalities=["text", "image", "pdf"])


def media_in(prompt: RenderedPrompt) -> list[tuple[str, PromptMedia]]:
    return [(part.section, media) for part in prompt.parts() for media in part.media]


async def test_turn_one_media_is_in_every_later_prompt_even_from_another_runner(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        models: Any = lambda role: (VISION, harness.model)  # noqa: E731
        harness.runner = TurnRunner(store=harness.store, models=models, clock=harness.clock)
        attachments = (("screen.png", "image/png", PNG), ("invoice.pdf", "application/pdf", PDF))
        await harness.turn("hello", "look", script=[complete("Seen.")], attachments=attachments)
        first = media_in(harness.model.requests[-1].prompt)
        assert [(section, m.kind, m.mime, m.data, m.path) for section, m in first] == [
            ("current_turn", "image", "image/png", PNG, "fi:turn_1.attachments/screen.png"),
            ("current_turn", "pdf", "application/pdf", PDF, "fi:turn_1.attachments/invoice.pdf"),
        ]

        await harness.turn("hello", "and now?", script=[complete("Still seen.")])
        second = media_in(harness.model.requests[-1].prompt)
        assert [(section, m.data) for section, m in second] == [("history", PNG), ("history", PDF)]

        # another process: nothing in memory, the files are read back from the store
        harness.runner = TurnRunner(
            store=harness.store, models=models, clock=harness.clock, resident=ResidentConversations(0)
        )
        await harness.turn("hello", "once more", script=[complete("Yes.")])
        third = media_in(harness.model.requests[-1].prompt)
        assert [(section, m.data) for section, m in third] == [("history", PNG), ("history", PDF)]
        # the same bytes in the same place: the prefix up to the head's checkpoint is unchanged for the cache
        assert harness.model.requests[-1].prompt.parts()[1].media == harness.model.requests[-2].prompt.parts()[1].media


async def test_a_text_only_model_gets_no_bytes(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        attachments = (("screen.png", "image/png", PNG),)
        await harness.turn("hello", "look", script=[complete("Seen.")], attachments=attachments)
        assert media_in(harness.model.requests[-1].prompt) == []


async def test_react_read_shows_an_earlier_image_again_after_its_result(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        models: Any = lambda role: (VISION, harness.model)  # noqa: E731
        harness.runner = TurnRunner(store=harness.store, models=models, clock=harness.clock)
        await harness.turn("hello", "look", script=[complete("Seen.")], attachments=(("screen.png", "image/png", PNG),))
        path = "fi:turn_1.attachments/screen.png"
        script = [action("react.read", paths=[path]), complete("It is blue.")]
        await harness.turn("hello", "what colour was it?", script=script)
        after = harness.model.requests[-1].prompt
        assert [(section, m.path, m.data) for section, m in media_in(after)] == [
            ("history", path, PNG),  # where it was attached
            ("current_turn", path, PNG),  # and again after the read's result
        ]
        result = f"{path}: (image/png, {len(PNG)} bytes) shown to you again as an image"
        assert result in after.section_text("current_turn")


async def test_react_read_of_an_image_for_a_text_only_model_says_what_it_is(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn("hello", "look", script=[complete("Seen.")], attachments=(("screen.png", "image/png", PNG),))
        path = "fi:turn_1.attachments/screen.png"
        await harness.turn("hello", "again", script=[action("react.read", paths=[path]), complete("A picture.")])
        after = harness.model.requests[-1].prompt
        assert media_in(after) == []
        assert f"{path}: (image/png, {len(PNG)} bytes) a binary file" in after.section_text("current_turn")


async def test_memory_search_finds_the_text_of_a_pdf_the_model_read_as_a_document(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        models: Any = lambda role: (VISION, harness.model)  # noqa: E731
        harness.runner = TurnRunner(
            store=harness.store, models=models, clock=harness.clock, memory=harness.runner._memory
        )
        attachments = (("invoice.pdf", "application/pdf", PDF),)
        await harness.turn("hello", "file this", script=[complete("Filed.")], attachments=attachments)
        script = [action("react.memsearch", query="Total 100 EUR", targets=["attachment"]), complete("Found.")]
        await harness.turn("hello", "what was the total?", script=script)
        result = harness.model.requests[-1].prompt.section_text("current_turn")
        assert "fi:turn_1.attachments/invoice.pdf" in result.split("[react.tool.result]")[-1]


async def test_an_image_over_the_models_limits_is_its_downscaled_copy_in_every_turn_and_every_process(
    tmp_path: Path,
) -> None:
    """Issue 37: the copy is made once, stored beside the file, and read back as any file by a runner that never
    saw the turn: the same bytes in every prompt (the cache holds), and ``react.read`` shows the copy again."""
    wide = png_bytes(9000, 100, "teal")
    async with turn_harness(tmp_path, HELLO) as harness:
        models: Any = lambda role: (VISION, harness.model)  # noqa: E731
        harness.runner = TurnRunner(store=harness.store, models=models, clock=harness.clock)
        await harness.turn("hello", "look", script=[complete("Seen.")], attachments=(("wide.png", "image/png", wide),))
        [(_, first)] = media_in(harness.model.requests[-1].prompt)
        assert first.path.startswith("fi:turn_1.attachments/downscaled/") and first.mime == "image/png"
        assert Image.open(io.BytesIO(first.data)).size == (8000, 89)
        assert "shown to you as an image, downscaled from 9000x100" in harness.model.requests[-1].prompt.section_text(
            "current_turn"
        )

        harness.runner = TurnRunner(
            store=harness.store, models=models, clock=harness.clock, resident=ResidentConversations(0)
        )
        path = "fi:turn_1.attachments/wide.png"
        await harness.turn("hello", "again?", script=[action("react.read", paths=[path]), complete("Teal.")])
        after = harness.model.requests[-1].prompt
        shown = [(section, m.path, m.data) for section, m in media_in(after)]
        assert shown[0] == ("history", first.path, first.data)  # read back from the store: the same bytes
        assert shown[1][0] == "current_turn" and shown[1][2] == first.data  # the read shows the copy again
        assert shown[1][1].startswith("fi:turn_2.attachments/downscaled/")
        read = f"{path}: (image/png, {len(wide)} bytes) shown to you again as an image, after this result, downscaled"
        assert f"{read} to 8000x89 (image/png" in after.section_text("current_turn")

        harness.runner = TurnRunner(
            store=harness.store, models=models, clock=harness.clock, resident=ResidentConversations(0)
        )
        await harness.turn("hello", "once more", script=[complete("Yes.")])
        again = [(m.path, m.data) for _, m in media_in(harness.model.requests[-1].prompt)]
        assert again == [(first.path, first.data), (shown[1][1], first.data)]
