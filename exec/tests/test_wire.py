"""The wire protocol: frames survive any JSON object, and no byte stream makes a reader do more than refuse."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth_exec.tools import SupervisorClient, ToolCallError
from berth_exec.wire import (
    HEADER,
    HELLO_MAX_FRAME,
    MAX_DEPTH,
    PROTOCOL_VERSION,
    WireError,
    decode_body,
    encode_frame,
    nests_deeper_than,
    read_frame,
    receive_frame,
    send_frame,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)
messages = st.dictionaries(st.text(max_size=10), json_values, max_size=6)


async def read_bytes(data: bytes, max_frame: int = 1 << 20) -> dict[str, Any]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await read_frame(reader, max_frame)


@given(messages)
@settings(max_examples=200)
def test_a_frame_round_trips_through_the_async_reader(message: dict[str, Any]) -> None:
    assert asyncio.run(read_bytes(encode_frame(message))) == message


@given(messages)
@settings(max_examples=50)
def test_a_frame_round_trips_through_a_socket_pair(message: dict[str, Any]) -> None:
    left, right = socket.socketpair()
    with left, right:
        send_frame(left, message)
        assert receive_frame(right) == message


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_arbitrary_bytes_are_a_frame_or_a_clear_refusal(data: bytes) -> None:
    try:
        message = asyncio.run(read_bytes(data, max_frame=32))
    except (WireError, EOFError):
        return
    assert isinstance(message, dict)


def test_an_oversized_frame_is_refused_before_its_body_is_read() -> None:
    with pytest.raises(WireError) as refused:
        asyncio.run(read_bytes(HEADER.pack(10_000_000), max_frame=1024))
    assert refused.value.code == "payload_too_large"


@pytest.mark.parametrize(("body", "shape"), [(b"[1, 2]", "list"), (b"\xff\xfe", "UTF-8"), (b"{", "JSON")])
def test_a_frame_that_is_not_a_json_object_names_what_it_is(body: bytes, shape: str) -> None:
    with pytest.raises(WireError, match=shape) as refused:
        asyncio.run(read_bytes(struct.pack(">I", len(body)) + body))
    assert refused.value.code == "bad_frame"


def test_the_client_raises_the_supervisors_error_code(tmp_path: Any) -> None:
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            hello = receive_frame(connection, HELLO_MAX_FRAME)
            assert hello == {"v": PROTOCOL_VERSION, "op": "hello", "token": "t0k"}
            send_frame(connection, {"id": None, "ok": True, "result": {"v": PROTOCOL_VERSION}})
            request = receive_frame(connection)
            assert "token" not in request and request["op"] == "call" and request["tool_id"] == "x.y"
            send_frame(
                connection, {"id": request["id"], "ok": False, "error": {"code": "tool_timeout", "message": "slow"}}
            )

    thread = threading.Thread(target=answer)
    thread.start()
    with pytest.raises(ToolCallError) as failed:
        SupervisorClient(path, "t0k").request({"op": "call", "tool_id": "x.y", "params": {}})
    thread.join()
    server.close()
    assert (failed.value.code, failed.value.message) == ("tool_timeout", "slow")


def test_an_unreachable_supervisor_is_a_tool_call_error(tmp_path: Any) -> None:
    with pytest.raises(ToolCallError) as failed:
        SupervisorClient(str(tmp_path / "absent.sock"), "t").request({"op": "call", "tool_id": "x", "params": {}})
    assert failed.value.code == "supervisor_unreachable"


def test_a_refused_hello_is_the_tool_call_error(tmp_path: Any) -> None:
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()

    def refuse() -> None:
        connection, _ = server.accept()
        with connection:
            receive_frame(connection, HELLO_MAX_FRAME)
            send_frame(connection, {"id": None, "ok": False, "error": {"code": "unauthorized", "message": "token"}})

    thread = threading.Thread(target=refuse)
    thread.start()
    with pytest.raises(ToolCallError) as refused:
        SupervisorClient(path, "forged").request({"op": "call", "tool_id": "x.y", "params": {}})
    thread.join()
    server.close()
    assert refused.value.code == "unauthorized"


def nesting(value: object) -> int:
    """The depth of a decoded JSON value, by recursion (the reference the linear check must agree with)."""
    if isinstance(value, list):
        return 1 + max((nesting(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting(item) for item in value.values()), default=0)
    return 0


bracketed_text = st.text(alphabet='[]{}"\\ab', max_size=8)
nested_values = st.recursive(
    st.none() | st.integers() | bracketed_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(bracketed_text, children, max_size=3),
    max_leaves=30,
)


@given(nested_values, st.integers(0, 12))
@settings(max_examples=500)
def test_the_linear_depth_check_agrees_with_the_decoded_value(value: object, limit: int) -> None:
    body = json.dumps(value).encode()
    assert nests_deeper_than(body, limit) == (nesting(value) > limit)


@pytest.mark.parametrize(
    "body",
    [
        b'{"p":' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # a run of brackets
        b'{"p":' + b"[[]," * 100_000 + b"]" * 100_000 + b"}",  # siblings between the levels
        b'{"p":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}",  # objects
        b'{"p":' + b"[" * 100_000,  # never closed
    ],
)
def test_a_deeply_nested_frame_is_a_bad_request_not_a_recursion_error(body: bytes) -> None:
    with pytest.raises(WireError) as refused:
        decode_body(body)
    assert refused.value.code == "bad_request"
    assert f"deeper than {MAX_DEPTH} levels" in refused.value.message


def test_brackets_inside_strings_do_not_count() -> None:
    text = "[" * 1000 + '\\"{' * 1000
    assert decode_body(json.dumps({"p": text}).encode()) == {"p": text}
