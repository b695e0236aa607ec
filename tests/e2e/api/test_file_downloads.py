"""A conversation's files come back with the type their bytes show, never their name's: an uploaded ``evil.html``
is text, sent as an attachment; only raster images and PDFs are inline; every file is sandboxed by its CSP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_stack import ApiStack, api_stack

from berth.testing.documents import pdf_bytes, png_bytes

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Seen.</channel:answer>'
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>1</script></svg>'
EVIL = b"<html><body><script>fetch('/v1/me', {headers: {Authorization: localStorage.apiKey}})</script></body></html>"


async def upload(stack: ApiStack, files: dict[str, tuple[str, bytes, str]]) -> tuple[str, str]:
    """Send a turn with ``files``; return (conversation, turn) once it has ended."""
    conversation = await stack.conversation()
    response = await stack.client.post(
        f"/v1/acme/support/conversations/{conversation}/turns",
        data={"message": "look"},
        files=files,
        headers=stack.auth(),
    )
    assert response.status_code == 202, response.text
    await stack.events(response.json()["events_url"])
    return conversation, response.json()["turn_id"]


async def test_uploads_are_served_with_their_sniffed_type_and_only_images_and_pdfs_inline(tmp_path: Path) -> None:
    image, document = png_bytes(), pdf_bytes(["Quarterly figures"])
    async with api_stack(tmp_path, [ANSWER], repeat=True) as stack:
        conversation, turn = await upload(
            stack,
            {
                "evil": ("evil.html", EVIL, "text/html"),
                "picture": ("photo.html", image, "text/html"),  # a PNG whatever its name says
                "pdf": ("figures.pdf", document, "application/pdf"),
                "svg": ("logo.svg", SVG, "image/svg+xml"),
            },
        )
        base = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments"
        expected = {
            "evil.html": ("text/plain; charset=utf-8", "attachment", EVIL),
            "photo.html": ("image/png", "inline", image),
            "figures.pdf": ("application/pdf", "inline", document),
            "logo.svg": ("text/plain; charset=utf-8", "attachment", None),
        }
        for name, (content_type, disposition, body) in expected.items():
            served = await stack.client.get(f"{base}/{name}", headers=stack.auth())
            assert served.status_code == 200, (name, served.text)
            assert served.headers["content-type"] == content_type, name
            assert served.headers["content-disposition"].startswith(f'{disposition}; filename="{name}"'), name
            assert served.headers["content-security-policy"] == "sandbox", name
            assert served.headers["x-content-type-options"] == "nosniff", name
            if body is not None:
                assert served.content == body, name
        missing = await stack.client.get(f"{base}/nope.html", headers=stack.auth())
        assert missing.status_code == 404
        assert missing.headers["content-security-policy"] == "sandbox"  # errors of the route too


async def test_a_tools_html_output_is_an_attachment_too(tmp_path: Path) -> None:
    write = json.dumps(
        {
            "action": "call_tool",
            "tool_call": {
                "tool_id": "react.write",
                "params": {"path": "outputs/page.html", "content": EVIL.decode(), "kind": "file"},
            },
        }
    )
    async with api_stack(tmp_path, [f"<channel:action>{write}</channel:action>", ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "write a page")
        await stack.events(started["events_url"])
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{started['turn_id']}.outputs/page.html"
        served = await stack.client.get(url, headers=stack.auth())
        assert served.status_code == 200
        assert served.content == EVIL
        assert served.headers["content-type"] == "text/plain; charset=utf-8"
        assert served.headers["content-disposition"].startswith('attachment; filename="page.html"')
        assert served.headers["content-security-policy"] == "sandbox"
