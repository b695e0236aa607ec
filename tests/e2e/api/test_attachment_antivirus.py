"""Every attachment is scanned by a real clamd (its own, with the EICAR hash as its one signature) before
anything of the request is stored: the EICAR test file is refused with 422 and the signature's name, a clean PDF
passes, clamd stopped refuses with 503 (or, with ``on_error: accept``, lets the file in with a WARNING)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack

from berth.testing.clamav import EICAR, EICAR_SIGNATURE, ClamdServer

pytestmark = [pytest.mark.clamav, pytest.mark.usefixtures("clean_berth_env")]

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Read it.</channel:answer>'
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


@pytest.fixture
def clamd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClamdServer]:
    with ClamdServer(tmp_path_factory.mktemp("clamd")) as server:
        yield server


def antivirus(address: str, **options: Any) -> dict[str, Any]:
    return {"attachments": {"antivirus": {"clamd": address, **options}}}


async def send(stack: ApiStack, conversation: str, name: str, data: bytes) -> Any:
    url = f"/v1/acme/support/conversations/{conversation}/turns"
    files = {"file": (name, data, "application/octet-stream")}
    return await stack.client.post(url, data={"message": "read this"}, files=files, headers=stack.auth())


async def turns_of(stack: ApiStack, conversation: str) -> list[dict[str, Any]]:
    detail = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
    return list(detail.json()["turns"])


@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_the_eicar_file_is_refused_and_nothing_of_it_is_stored(
    tmp_path: Path, clamd: ClamdServer, transport: str
) -> None:
    address = clamd.unix_address if transport == "unix" else clamd.tcp_address
    async with api_stack(tmp_path, [ANSWER], repeat=True, gateway=antivirus(address)) as stack:
        conversation = await stack.conversation()
        clean = await send(stack, conversation, "invoice.pdf", PDF)
        assert clean.status_code == 202, clean.text
        await stack.events(clean.json()["events_url"])

        refused = await send(stack, conversation, "eicar.com.txt", EICAR)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "attachment_infected"
        assert error["details"] == {"name": "eicar.com.txt", "signature": EICAR_SIGNATURE}
        turns = await turns_of(stack, conversation)
        assert len(turns) == 1  # the refused request stored nothing; the earlier turn is untouched
        assert [a["name"] for a in turns[0]["attachments"]] == ["invoice.pdf"]


async def test_clamd_unreachable_refuses_with_503_and_stores_nothing(tmp_path: Path, clamd: ClamdServer) -> None:
    async with api_stack(tmp_path, [ANSWER], gateway=antivirus(clamd.unix_address, timeout_s=5)) as stack:
        conversation = await stack.conversation()
        clamd.stop()
        refused = await send(stack, conversation, "invoice.pdf", PDF)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "antivirus_unavailable"
        assert refused.headers["retry-after"] == "30"
        assert "clamd" not in refused.text  # where the scanner lives is the operator's, not the client's
        assert await turns_of(stack, conversation) == []


async def test_on_error_accept_lets_the_file_in_with_a_warning(
    tmp_path: Path, clamd: ClamdServer, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = antivirus(clamd.tcp_address, on_error="accept", timeout_s=5)
    async with api_stack(tmp_path, [ANSWER], gateway=gateway) as stack:
        conversation = await stack.conversation()
        clamd.stop()
        with caplog.at_level(logging.WARNING, logger="berth.api.attachments"):
            accepted = await send(stack, conversation, "invoice.pdf", PDF)
        assert accepted.status_code == 202, accepted.text
        await stack.events(accepted.json()["events_url"])
        assert any("accepted unscanned" in record.getMessage() for record in caplog.records)
        assert [a["name"] for a in (await turns_of(stack, conversation))[0]["attachments"]] == ["invoice.pdf"]
