"""Attachments are honest (issue 37): over the HTTP API, an image over the model's limits reaches the Anthropic
stand-in (which refuses what the real API refuses: over 5 MB of base64, over 8000 px a side) downscaled to fit,
the same bytes in every later turn, stored beside the file; and the turn's events tell the user, as it starts,
which files the model gets downscaled, as text, or not at all — for the turn's files and a follow-up's."""

from __future__ import annotations

import base64
import hashlib
import io
import random
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack
from PIL import Image

from berth.testing.documents import pdf_bytes, png_bytes
from berth.testing.fakes.anthropic_server import FakeAnthropicServer
from berth.testing.fakes.media import IMAGE_MAX_BYTES, IMAGE_MAX_SIDE

pytestmark = pytest.mark.usefixtures("clean_berth_env", "storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Seen.</channel:answer>'
KEY = "sk-ant-downscale-0123456789"


def noise_png(width: int, height: int) -> bytes:
    """A PNG of random pixels: it does not compress, so its file is about 3 bytes a pixel."""
    rng = random.Random(37)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3)).save(out, "PNG")
    return out.getvalue()


BIG = noise_png(1600, 1400)  # 6.7 MB (6.4 MiB): over Anthropic's 5 MB, even before base64
WIDE = png_bytes(9000, 100, "teal")  # a few KB, but wider than the 8000 px Anthropic takes


def notices(events: list[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The attachment notices of a turn's events, by file name."""
    return {d["name"]: d for _, kind, d in events if kind == "notice" and str(d.get("code", "")).startswith("attach")}


async def turn_with_files(stack: ApiStack, conversation: str, message: str, files: list[Any] | None = None) -> Any:
    url = f"/v1/acme/support/conversations/{conversation}/turns"
    if files:
        started = await stack.client.post(url, data={"message": message}, files=files, headers=stack.auth())
    else:
        started = await stack.client.post(url, json={"message": message}, headers=stack.auth())
    assert started.status_code == 202, started.text
    events = await stack.events(started.json()["events_url"])
    assert events[-1][1] == "turn.completed", events[-1]
    return started.json()["turn_id"], events


def images_of(request: Any) -> list[dict[str, Any]]:
    return [block for block in request.body["messages"][0]["content"] if block["type"] == "image"]


async def test_an_oversize_image_reaches_anthropic_downscaled_the_same_in_every_turn_and_the_user_is_told(
    tmp_path: Path,
) -> None:
    assert len(BIG) > 6_500_000
    async with FakeAnthropicServer(api_key=KEY) as server:
        server.push_text(ANSWER)
        server.push_text(ANSWER)
        model = {"provider": "anthropic", "model": "claude-sonnet-5-5", "base_url": server.base_url, "api_key": KEY}
        async with api_stack(tmp_path, [], platform={"models": {"default": model}}) as stack:
            conversation = await stack.conversation()
            files = [("file", ("photo.png", BIG, "image/png")), ("file", ("banner.png", WIDE, "image/png"))]
            turn_id, events = await turn_with_files(stack, conversation, "what do you see?", files)
            await turn_with_files(stack, conversation, "and now?")

            told = notices(events)
            assert {name: d["code"] for name, d in told.items()} == {
                "photo.png": "attachment_downscaled",
                "banner.png": "attachment_downscaled",
            }
            kinds = [kind for _, kind, _ in events]
            assert kinds[: kinds.index("notice") + 2][-3:] == ["turn.started", "notice", "notice"]  # as it starts
            assert told["banner.png"]["message"].startswith(
                "banner.png is shown to the model downscaled, from 9000x100"
            )
            assert told["banner.png"]["path"] == f"fi:{turn_id}.attachments/banner.png"
            assert told["photo.png"]["message"].startswith("photo.png is shown to the model downscaled, from 1600x1400")

            first, second = server.message_requests
            assert (first.status, second.status) == (200, 200)  # the stand-in refuses what Anthropic refuses
            photo, banner = images_of(first)
            for block in (photo, banner):
                assert len(block["source"]["data"]) <= IMAGE_MAX_BYTES
            assert photo["source"]["media_type"] == "image/jpeg"
            shown = Image.open(io.BytesIO(base64.b64decode(banner["source"]["data"])))
            assert (shown.format, shown.size) == ("PNG", (IMAGE_MAX_SIDE, 89))
            head = "\n".join(b["text"] for b in first.body["messages"][0]["content"] if b["type"] == "text")
            assert f"(image/png, {len(WIDE)} bytes: shown to you as an image, downscaled from 9000x100" in head
            assert images_of(second) == [photo, banner]  # the same bytes in the next turn: the cache holds

            for block in (photo, banner):  # stored beside the files, by the digest of the copy
                data = base64.b64decode(block["source"]["data"])
                suffix = "jpg" if block["source"]["media_type"] == "image/jpeg" else "png"
                copy = f"fi:{turn_id}.attachments/downscaled/{hashlib.sha256(data).hexdigest()[:16]}.{suffix}"
                stored = await stack.client.get(
                    f"/v1/acme/support/conversations/{conversation}/files/{copy}", headers=stack.auth()
                )
                assert stored.status_code == 200, stored.text
                assert stored.content == data


async def test_a_text_only_model_reads_a_pdf_as_text_sees_no_image_and_the_user_is_told(tmp_path: Path) -> None:
    pdf = pdf_bytes(["Invoice 42", "Total: 100 EUR"])
    files = [("file", ("invoice.pdf", pdf, "application/pdf")), ("file", ("screen.png", WIDE, "image/png"))]
    async with api_stack(tmp_path, [ANSWER]) as stack:
        conversation = await stack.conversation()
        _, events = await turn_with_files(stack, conversation, "what is due?", files)
        told = notices(events)
        assert told["invoice.pdf"]["code"] == "attachment_as_text"
        assert told["invoice.pdf"]["message"] == (
            "invoice.pdf is sent to the model as its text (this model does not read PDFs)"
        )
        assert told["screen.png"]["code"] == "attachment_not_sent"
        assert told["screen.png"]["message"] == (
            "screen.png is not shown to the model, only its name, type and size (this model does not read images)"
        )
        stored = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        attachments = {a["name"]: a for a in stored.json()["turns"][0]["attachments"]}
        assert attachments["invoice.pdf"]["sent"] == "as_text"  # what the UI marks a stored turn's chips with
        assert attachments["screen.png"]["sent"] == "not_sent"


async def test_a_follow_ups_oversize_image_is_downscaled_and_the_user_told_beside_it(tmp_path: Path) -> None:
    from gate_bundle import ANSWER as GATE_ANSWER
    from gate_bundle import HOLD, close_gate, gate_bundles, open_gate

    close_gate()
    model = {"provider": "scripted", "model": str(tmp_path / "script.yaml"), "modalities": ["text", "image"]}
    options: dict[str, Any] = {"bundles": gate_bundles(tmp_path), "platform": {"models": {"default": model}}}
    async with api_stack(tmp_path, [HOLD, GATE_ANSWER], **options) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold, then answer")
        turn_id = started["turn_id"]
        await stack.wait_for(started["events_url"], "tool.call")
        sent = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns/{turn_id}/events",
            data={"kind": "followup", "message": "and this banner"},
            files={"file": ("banner.png", WIDE, "image/png")},
            headers=stack.auth(),
        )
        assert sent.status_code == 202, sent.text
        open_gate()
        events = await stack.events(started["events_url"])
        kinds = [kind for _, kind, _ in events]
        followup = kinds.index("user.followup")
        assert kinds[followup + 1] == "notice"
        told = events[followup + 1][2]
        assert told["code"] == "attachment_downscaled"
        assert told["path"] == f"fi:{turn_id}.attachments/live-1/banner.png"
        last = stack.model().requests[-1].prompt
        [media] = [m for part in last.parts() for m in part.media]
        assert media.path.startswith(f"fi:{turn_id}.attachments/downscaled/")
        assert Image.open(io.BytesIO(media.data)).size == (8000, 89)
