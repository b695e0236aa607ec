"""The supervisor's guards, seen from clients in this process over its real Unix socket: the hello, the version
answer, the timeouts that free what a stalled peer holds, and the connection cap."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import pytest

from berth.execution.supervisor import Supervisor
from berth_exec.tools import SupervisorClient
from berth_exec.wire import receive_frame, send_frame

TOKEN = "the-run-token"


class EchoTools:
    """``t.echo`` answers with its params."""

    @property
    def tool_ids(self) -> Collection[str]:
        return {"t.echo"}

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        return {"echo": params}

    async def read(self, path: str) -> str:
        return ""


@pytest.fixture
async def supervisor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Supervisor]:
    """A supervisor for this process's uid; ``@pytest.mark.parametrize("supervisor", [{...}], indirect=True)`` sets
    its caps."""
    supervisor = Supervisor(tmp_path / "s.sock", TOKEN, os.getuid(), EchoTools(), **getattr(request, "param", {}))
    await supervisor.start()
    yield supervisor
    await supervisor.aclose()


def connected(supervisor: Supervisor) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(30)
    sock.connect(str(supervisor.socket_path))
    return sock


def say_hello(sock: socket.socket) -> dict[str, Any]:
    send_frame(sock, {"v": 2, "op": "hello", "token": TOKEN})
    return receive_frame(sock)


async def test_a_version_1_request_is_answered_with_both_versions(supervisor: Supervisor) -> None:
    def exchange() -> dict[str, Any]:
        with connected(supervisor) as sock:
            send_frame(sock, {"v": 1, "token": TOKEN, "id": 7, "op": "call", "tool_id": "t.echo", "params": {}})
            return receive_frame(sock)

    answer = await asyncio.to_thread(exchange)
    assert answer["id"] == 7
    assert answer["error"]["code"] == "bad_request"
    assert "protocol version 1" in answer["error"]["message"]
    assert "speaks 2" in answer["error"]["message"]


@pytest.mark.parametrize("supervisor", [{"hello_timeout_s": 0.2}], indirect=True)
async def test_a_connection_that_never_says_hello_is_closed(supervisor: Supervisor) -> None:
    def wait_for_the_end() -> bytes:
        with connected(supervisor) as sock:
            return sock.recv(1)

    assert await asyncio.to_thread(wait_for_the_end) == b""
    assert supervisor.refusals["hello_timeout"] == 1


@pytest.mark.parametrize(
    "supervisor", [{"max_frame": 1 << 20, "max_buffered": 1 << 20, "frame_timeout_s": 0.5}], indirect=True
)
async def test_a_stalled_frame_is_cut_and_what_it_held_goes_to_the_next(supervisor: Supervisor) -> None:
    def stall_then_call() -> tuple[bytes, Any]:
        with connected(supervisor) as stalled:
            assert say_hello(stalled)["ok"]
            stalled.sendall(struct.pack(">I", 1 << 20) + b"x" * 1000)  # holds the run's whole allowance
            # this call waits for the allowance until the stalled frame is cut
            result = SupervisorClient(str(supervisor.socket_path), TOKEN).request(
                {"op": "call", "tool_id": "t.echo", "params": {"n": 1}}
            )
            return stalled.recv(1), result

    end_of_stalled, result = await asyncio.to_thread(stall_then_call)
    assert end_of_stalled == b""
    assert result == {"echo": {"n": 1}}
    assert supervisor.refusals["frame_timeout"] == 1


@pytest.mark.parametrize("supervisor", [{"max_connections": 2}], indirect=True)
async def test_connections_over_the_cap_wait_and_the_cap_is_logged_once(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="berth.execution.supervisor")

    def flood() -> tuple[int, int, Any]:
        first = connected(supervisor)
        say_hello(first)
        held, refused = [first], 0
        for _ in range(50):
            sock = socket.socket(socket.AF_UNIX)
            sock.setblocking(False)
            try:
                sock.connect(str(supervisor.socket_path))
                held.append(sock)
            except BlockingIOError:
                refused += 1
                sock.close()
        for sock in held:
            sock.close()
        result = SupervisorClient(str(supervisor.socket_path), TOKEN).request(
            {"op": "call", "tool_id": "t.echo", "params": {"after": True}}
        )
        return len(held), refused, result

    held, refused, result = await asyncio.to_thread(flood)
    assert held <= 2 + 3  # the cap, and the listen queue of the same length (the kernel lets one more in)
    assert held + refused == 51
    assert result == {"echo": {"after": True}}
    capped = [record for record in caplog.records if "the cap" in record.getMessage()]
    assert len(capped) == 1
    assert supervisor.refusals["connection_cap"] >= 1


async def test_answers_are_json_objects_with_the_id(supervisor: Supervisor) -> None:
    def exchange() -> dict[str, Any]:
        with connected(supervisor) as sock:
            welcome = say_hello(sock)
            assert welcome == {"id": None, "ok": True, "result": {"v": 2, "max_frame": 1024 * 1024}}
            body = json.dumps({"v": 2, "id": 3, "op": "call", "tool_id": "t.echo", "params": {"a": [1]}}).encode()
            sock.sendall(struct.pack(">I", len(body)) + body)
            return receive_frame(sock)

    assert await asyncio.to_thread(exchange) == {"id": 3, "ok": True, "result": {"echo": {"a": [1]}}}
