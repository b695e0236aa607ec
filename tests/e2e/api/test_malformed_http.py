"""Bytes that are not HTTP never reach the app: uvicorn answers them with its own plain-text 400 and closes that
connection (the JSON error shape cannot be given there, see docs/api.md), and the server goes on serving."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from api_stack import api_stack

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hi!</channel:answer>'
GARBAGE = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)) + b"\r\n\r\n",  # a TLS hello on the plain port
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nA header without a colon\r\n\r\n",
    b"GET /\x00\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/me HTTP/1.1\r\nHost: x\r\nContent-Length: banana\r\n\r\n",
]


async def exchange(host: str, port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; return all the server answers until it closes the connection."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


@pytest.mark.parametrize("data", GARBAGE, ids=["tls", "words", "header", "nul", "length"])
async def test_malformed_http_gets_a_400_and_the_server_keeps_serving(tmp_path: Path, data: bytes) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        address = urlsplit(str(stack.client.base_url))
        assert address.hostname is not None and address.port is not None
        answer = await exchange(address.hostname, address.port, data)
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 400 Bad Request", answer[:200]
        assert b"content-type: text/plain" in rest.lower()  # uvicorn's own answer, before any app code
        assert b"Traceback" not in answer
        assert (await stack.client.get("/healthz")).json() == {"status": "ok"}
        refused = await stack.client.get("/v1/me")  # the app's errors keep their JSON shape
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
