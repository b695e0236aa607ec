"""Images and PDFs attached over the HTTP API reach the model as themselves where it reads them, checked on the
wire by the stand-ins (which validate the blocks as the real APIs do): Anthropic ``image`` and ``document``
blocks with base64 sources, before the turn head's cache checkpoint; OpenAI-compatible ``image_url`` data URLs
with the PDF as its text (or as a ``file`` item when the model's modalities name pdf); and with a text-only
model, the PDF as its text and the PNG as a described placeholder."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack

from berth.testing.documents import pdf_bytes, png_bytes
from berth.testing.fakes.anthropic_server import FakeAnthropicServer
from berth.testing.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.usefixtures("clean_berth_env")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Seen.</channel:answer>'
PNG = png_bytes(64, 48)
PDF = pdf_bytes(["Invoice 42", "Total: 100 EUR", "Due in 30 days"])
FILES = [("file", ("screen.png", PNG, "image/png")), ("file", ("invoice.pdf", PDF, "application/pdf"))]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def send_turn(stack: ApiStack) -> list[tuple[str, str, dict[str, Any]]]:
    conversation = await stack.conversation()
    url = f"/v1/acme/support/conversations/{conversation}/turns"
    started = await stack.client.post(url, data={"message": "what is due?"}, files=FILES, headers=stack.auth())
    assert started.status_code == 202, started.text
    events = await stack.events(started.json()["events_url"])
    assert events[-1][1] == "turn.completed", events
    return events


async def test_anthropic_gets_image_and_document_blocks_before_the_head_checkpoint(tmp_path: Path) -> None:
    async with FakeAnthropicServer(api_key="sk-ant-multimodal-0123456789") as server:
        server.push_text(ANSWER)
        model = {"provider": "anthropic", "model": "claude-sonnet-5-5", "base_url": server.base_url}
        model["api_key"] = "sk-ant-multimodal-0123456789"
        async with api_stack(tmp_path, [], platform={"models": {"default": model}}) as stack:
            await send_turn(stack)
        [request] = server.message_requests
        assert request.status == 200
        content = request.body["messages"][0]["content"]
        image = next(i for i, block in enumerate(content) if block["type"] == "image")
        head_text, image_block, document_block = content[image - 1], content[image], content[image + 1]
        assert head_text["type"] == "text"
        assert "[user.prompt]" in head_text["text"]
        assert f"(image/png, {len(PNG)} bytes: shown to you as an image)" in head_text["text"]
        assert f"(application/pdf, {len(PDF)} bytes, 3 pages: shown to you as a document)" in head_text["text"]
        assert "Invoice 42" not in head_text["text"]  # the document itself, not its text twice
        assert image_block["source"] == {"type": "base64", "media_type": "image/png", "data": b64(PNG)}
        assert document_block["source"] == {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)}
        marked = [i for i, block in enumerate(content) if block.get("cache_control")]
        assert image + 1 in marked  # the head's checkpoint sits on its last block: after the image and the PDF
        assert "cache_control" not in head_text and "cache_control" not in image_block


async def test_openai_compatible_gets_an_image_url_and_the_pdf_as_text(tmp_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.push_text(ANSWER)
        model = {"provider": "openai-compatible", "model": "gpt-vision", "base_url": server.base_url}
        async with api_stack(tmp_path, [], platform={"models": {"default": model}}) as stack:
            await send_turn(stack)
        [request] = server.requests
        assert request.status == 200
        items = request.body["messages"][1]["content"]
        kinds = [item["type"] for item in items]
        assert kinds.count("image_url") == 1 and "file" not in kinds
        image = kinds.index("image_url")
        assert items[image]["image_url"] == {"url": f"data:image/png;base64,{b64(PNG)}"}
        text = items[image - 1]["text"]
        assert "[not shown as a document: this model does not read PDFs; its text follows]" in text
        assert "--- page 1 ---\nInvoice 42\n--- page 2 ---\nTotal: 100 EUR" in text


async def test_an_openai_compatible_model_declared_to_read_pdfs_gets_a_file_item(tmp_path: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.push_text(ANSWER)
        model = {
            "provider": "openai-compatible",
            "model": "gpt-docs",
            "base_url": server.base_url,
            "modalities": ["text", "image", "pdf"],
        }
        async with api_stack(tmp_path, [], platform={"models": {"default": model}}) as stack:
            await send_turn(stack)
        [request] = server.requests
        assert request.status == 200
        files = [item for item in request.body["messages"][1]["content"] if item["type"] == "file"]
        assert files == [
            {
                "type": "file",
                "file": {"filename": "invoice.pdf", "file_data": f"data:application/pdf;base64,{b64(PDF)}"},
            }
        ]


async def test_a_text_only_model_reads_the_pdf_as_text_and_a_placeholder_for_the_image(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        await send_turn(stack)
        prompt = stack.model().requests[0].prompt
        assert all(not part.media for part in prompt.parts())
        text = prompt.section_text("current_turn")
        assert f"(image/png, {len(PNG)} bytes: an image you cannot see here: this model does not read images)" in text
        assert "--- page 1 ---\nInvoice 42" in text


async def test_an_image_sent_as_a_live_followup_reaches_the_model_as_itself(tmp_path: Path) -> None:
    from gate_bundle import ANSWER as GATE_ANSWER
    from gate_bundle import HOLD, close_gate, gate_bundles, open_gate

    close_gate()
    model = {"provider": "scripted", "model": str(tmp_path / "script.yaml"), "modalities": ["text", "image"]}
    options: dict[str, Any] = {"bundles": gate_bundles(tmp_path), "platform": {"models": {"default": model}}}
    async with api_stack(tmp_path, [HOLD, GATE_ANSWER], **options) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold, then answer")
        turn_id = started["turn_id"]
        await stack.wait_for(started["events_url"], "tool.call")  # the turn is in gate.hold now
        sent = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns/{turn_id}/events",
            data={"kind": "followup", "message": "and this screenshot"},
            files={"file": ("screen.png", PNG, "image/png")},
            headers=stack.auth(),
        )
        assert sent.status_code == 202, sent.text
        open_gate()
        events = await stack.events(started["events_url"])
        assert events[-1][1] == "turn.completed"
        last = stack.model().requests[-1].prompt
        media = [(m.kind, m.path, m.data) for part in last.parts() for m in part.media]
        assert media == [("image", f"fi:{turn_id}.attachments/live-1/screen.png", PNG)]
        assert "(image/png, " in last.section_text("current_turn")
        assert "bytes: shown to you as an image)" in last.section_text("current_turn")


async def test_an_image_over_the_models_limit_is_a_placeholder_and_a_long_pdf_its_text(tmp_path: Path) -> None:
    long_pdf = pdf_bytes([f"page {n}" for n in range(1, 601)])
    async with FakeAnthropicServer(api_key="sk-ant-multimodal-0123456789") as server:
        server.push_text(ANSWER)
        model = {
            "provider": "anthropic",
            "model": "claude-sonnet-5-5",
            "base_url": server.base_url,
            "api_key": "sk-ant-multimodal-0123456789",
            "image_max_mb": 0.00005,  # 52 characters of base64: no PNG is that small, even downscaled
        }
        files = [("file", ("screen.png", PNG, "image/png")), ("file", ("long.pdf", long_pdf, "application/pdf"))]
        async with api_stack(tmp_path, [], platform={"models": {"default": model}}) as stack:
            conversation = await stack.conversation()
            url = f"/v1/acme/support/conversations/{conversation}/turns"
            started = await stack.client.post(url, data={"message": "see"}, files=files, headers=stack.auth())
            assert started.status_code == 202, started.text
            assert (await stack.events(started.json()["events_url"]))[-1][1] == "turn.completed"
        [request] = server.message_requests
        content = request.body["messages"][0]["content"]
        assert [block["type"] for block in content if block["type"] != "text"] == []
        text = "\n".join(block["text"] for block in content)
        assert "an image you cannot see here: it cannot be made smaller than the 5e-05 MB an image may be" in text
        assert "[not shown as a document: its 600 pages are more than the 500 a PDF may have; its text follows]" in text
        assert "--- page 1 ---\npage 1" in text
