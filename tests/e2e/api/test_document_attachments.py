"""Documents attached over the HTTP API reach the model as text: a PDF page by page, an XLSX as a sheet preview;
an encrypted PDF and a corrupt DOCX as a clear notice in the timeline, the turn completing all the same; and
``react.read`` reads an attachment's text by line range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_stack import api_stack

from berth.runtime.extraction import ENCRYPTED
from berth.testing.documents import corrupt_docx, encrypted_pdf, pdf_bytes, png_bytes, xlsx_bytes

pytestmark = pytest.mark.usefixtures("clean_berth_env")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Read them.</channel:answer>'
PNG = png_bytes(8, 8)
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def read_call(paths: list[str], lines: str) -> str:
    call = {"action": "call_tool", "tool_call": {"tool_id": "react.read", "params": {"paths": paths, "lines": lines}}}
    return f"<channel:action>{json.dumps(call)}</channel:action>"


async def test_documents_reach_the_model_as_text_and_failures_as_notices(tmp_path: Path) -> None:
    files = [
        ("file", ("invoice.pdf", pdf_bytes(["Invoice 42", "Total: 100 EUR", "Due in 30 days"]), "application/pdf")),
        ("file", ("locked.pdf", encrypted_pdf(["secret"]), "application/pdf")),
        ("file", ("broken.docx", corrupt_docx(), DOCX)),
        ("file", ("sales.xlsx", xlsx_bytes({"Q1": [["region", "sales"], ["north", 10]]}), "application/octet-stream")),
        ("file", ("screen.png", PNG, "image/png")),
    ]
    turn_id = "turn_docs1"
    paths = [f"fi:{turn_id}.attachments/invoice.pdf", f"fi:{turn_id}.attachments/screen.png"]
    async with api_stack(tmp_path, [read_call(paths, "3-4"), ANSWER]) as stack:
        conversation = await stack.conversation()
        url = f"/v1/acme/support/conversations/{conversation}/turns"
        body = {"message": "check these", "turn_id": turn_id}
        started = await stack.client.post(url, data=body, files=files, headers=stack.auth())
        assert started.status_code == 202, started.text
        events = await stack.events(started.json()["events_url"])
        assert events[-1][1] == "turn.completed", events

        first = stack.model().requests[0].prompt.section_text("current_turn")
        assert "--- page 1 ---\nInvoice 42\n--- page 2 ---\nTotal: 100 EUR\n--- page 3 ---\nDue in 30 days" in first
        assert f"fi:{turn_id}.attachments/locked.pdf (application/pdf)\n(application/pdf," in first
        assert ENCRYPTED in first
        assert "broken.docx" in first and "the file is not a readable DOCX" in first
        assert "--- sheet Q1: 2 rows x 2 columns ---\nregion,sales\nnorth,10" in first

        result = next(data for _, kind, data in events if kind == "tool.result" and data["tool_id"] == "react.read")
        assert result["ok"], result
        second = stack.model().requests[1].prompt.section_text("current_turn")
        assert "3: --- page 2 ---\n4: Total: 100 EUR" in second
        assert f"fi:{turn_id}.attachments/screen.png: (image/png, {len(PNG)} bytes) a binary file" in second
