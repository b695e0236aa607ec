"""Files download under any name: the ``Content-Disposition`` header is ASCII, with the name itself as RFC 6266's
``filename*=UTF-8''…`` and an ASCII stand-in as ``filename`` (a name outside Latin-1 once made the header
unencodable: a 500)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from api_stack import api_stack

pytestmark = pytest.mark.usefixtures("clean_berth_env", "storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Stored.</channel:answer>'
NAMES = {
    "Отчёт.txt": "attachment; filename=\"_____.txt\"; filename*=UTF-8''%D0%9E%D1%82%D1%87%D1%91%D1%82.txt",
    "報告書.txt": "attachment; filename=\"___.txt\"; filename*=UTF-8''%E5%A0%B1%E5%91%8A%E6%9B%B8.txt",
    "invoice\u202etxt.exe": "attachment; filename=\"invoice_txt.exe\"; filename*=UTF-8''invoice%E2%80%AEtxt.exe",
    "café.txt": "attachment; filename=\"caf_.txt\"; filename*=UTF-8''caf%C3%A9.txt",
    "plain.txt": 'attachment; filename="plain.txt"',
}


def name_in(header: str) -> str:
    """The file name a client reads from ``Content-Disposition``: ``filename*`` when there is one (RFC 6266)."""
    extended = re.search(r"filename\*=UTF-8''([^;]+)", header)
    if extended:
        return unquote(extended.group(1), encoding="utf-8", errors="strict")
    plain = re.search(r'filename="([^"]*)"', header)
    assert plain, header
    return plain.group(1)


async def test_files_with_names_outside_latin_1_download_with_an_rfc_6266_header(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        conversation = await stack.conversation()
        files = [("file", (name, f"the file {name}".encode(), "text/plain")) for name in NAMES]
        started = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            data={"message": "keep these"},
            files=files,
            headers=stack.auth(),
        )
        assert started.status_code == 202, started.text
        turn = started.json()["turn_id"]
        await stack.events(started.json()["events_url"])
        for name, expected in NAMES.items():
            url = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments/{name}"
            answer = await stack.client.get(url, headers=stack.auth())
            assert answer.status_code == 200, (name, answer.text)
            header = answer.headers["content-disposition"]
            assert header == expected
            assert header.isascii()
            assert name_in(header) == name
            assert answer.content == f"the file {name}".encode()


async def test_control_characters_in_a_name_become_underscores_and_the_file_downloads(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            data={"message": "keep"},
            files=[("file", ("esc\x1b nel\x85 ls\u2028.txt", b"some text", "text/plain"))],
            headers=stack.auth(),
        )
        assert started.status_code == 202, started.text
        events = await stack.events(started.json()["events_url"])
        assert events[-1][1] == "turn.completed", events  # the turn once failed: the name made no logical path
        turn = started.json()["turn_id"]
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments/esc_ nel_ ls_.txt"
        answer = await stack.client.get(url, headers=stack.auth())
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-disposition"] == 'attachment; filename="esc_ nel_ ls_.txt"'
