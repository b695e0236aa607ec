"""The per-turn event log behind the SSE stream: frames, resume, coalescing, waking readers."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.api.sse import MAX_SEQ_DIGITS, parse_last_event_id
from berth.runtime.events import TurnEvent
from berth.testing.secrets import only_registered
from berth.turns.errors import ServiceError
from berth.turns.event_log import HEARTBEAT, TurnEventLog, encode_frame


def delta(text: str) -> TurnEvent:
    return TurnEvent("channel.delta", {"channel": "answer", "instance": 1, "marker": "answer", "text": text})


def test_frames_carry_ids_of_the_turn_and_its_sequence() -> None:
    data = '{"channel":"answer","instance":1,"marker":"answer","text":"hé"}'
    assert encode_frame("turn_1:3", delta("hé")) == f"id: turn_1:3\nevent: channel.delta\ndata: {data}\n\n".encode()


FINITE = st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | FINITE | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def data_line(frame: bytes) -> str:
    """The JSON of a frame's ``data`` line."""
    lines = frame.decode().split("\n")
    assert lines[-2:] == ["", ""], "a frame ends with a blank line"
    (data,) = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    return data


@given(st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=6))
def test_any_json_payload_reads_back_as_the_standard_library_encodes_it(data: dict[str, Any]) -> None:
    line = data_line(encode_frame("turn_1:1", TurnEvent("notice", data)))
    assert "\n" not in line, "one data line: newlines inside strings are escaped"
    assert json.loads(line) == json.loads(json.dumps(data, ensure_ascii=False))


@dataclass
class Point:
    x: int


def test_keys_that_are_not_strings_and_values_json_cannot_hold_go_through_str() -> None:
    at = datetime(2026, 11, 26, 16, 30, tzinfo=UTC)
    event = TurnEvent("notice", {"at": at, 3: "three", "point": Point(1), "text": "naïve ✓", "n": float("inf")})
    line = data_line(encode_frame("turn_1:1", event))
    # A number JSON cannot hold is null (the standard library wrote Infinity, which a browser's JSON.parse rejects).
    assert json.loads(line) == {"at": str(at), "3": "three", "point": "Point(x=1)", "text": "naïve ✓", "n": None}
    assert "naïve ✓" in line, "text is written as UTF-8, not as \\u escapes"


def test_every_frame_ready_is_handed_over_in_one_piece_and_a_resume_starts_after_the_last_seen() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        log = TurnEventLog("turn_1")
        for n in range(5):
            await log.append(delta(str(n)))
        await log.close()
        whole = [piece async for piece in log.frames()]
        resumed = [piece async for piece in log.frames(after=parse_last_event_id("turn_1", "turn_1:3"))]
        return whole, resumed

    whole, resumed = asyncio.run(scenario())
    assert len(whole) == 1 and whole[0].count(b"\n\n") == 5
    assert resumed == [b"".join(encode_frame(f"turn_1:{n}", delta(str(n - 1))) for n in (4, 5))]


def test_a_resume_past_the_events_so_far_gets_only_the_events_past_its_position() -> None:
    async def scenario() -> list[bytes]:
        log = TurnEventLog("turn_1")
        await log.append(delta("0"))  # the turn has logged one event when a client resumes after event 3

        async def read() -> list[bytes]:
            return [piece async for piece in log.frames(after=3)]

        reader = asyncio.create_task(read())
        for n in range(1, 5):
            await log.append(delta(str(n)))
            await asyncio.sleep(0)
        await log.close()
        return await reader

    sent = b"".join(asyncio.run(scenario()))
    assert sent == encode_frame("turn_1:4", delta("3")) + encode_frame("turn_1:5", delta("4"))


def test_a_waiting_reader_gets_each_event_as_it_is_appended_and_stops_at_close() -> None:
    async def scenario() -> list[bytes]:
        log = TurnEventLog("turn_1")
        pieces: list[bytes] = []

        async def read() -> None:
            async for piece in log.frames():
                pieces.append(piece)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0)  # a yield: the reader is now waiting
        await log.append(delta("a"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await log.append(delta("b"))
        await log.close()
        await reader
        return pieces

    pieces = asyncio.run(scenario())
    assert b"".join(pieces) == encode_frame("turn_1:1", delta("a")) + encode_frame("turn_1:2", delta("b"))


def test_an_idle_stream_sends_heartbeats() -> None:
    async def scenario() -> bytes:
        log = TurnEventLog("turn_1")
        stream = log.frames(heartbeat_s=0.01)
        return await anext(stream)

    assert asyncio.run(scenario()) == HEARTBEAT


def test_foreign_or_malformed_last_event_ids_resume_from_the_start() -> None:
    assert parse_last_event_id("turn_1", "turn_2:5") == 0
    assert parse_last_event_id("turn_1", "turn_1:x") == 0
    assert parse_last_event_id("turn_1", None) == 0
    assert parse_last_event_id("turn_1", "turn_1:7") == 7
    assert parse_last_event_id("turn_1", "turn_1:²") == 0  # a digit to str.isdigit, not to int()
    assert parse_last_event_id("turn_1", "turn_1:١٢") == 0  # Arabic-Indic digits: no event's number


def test_a_sequence_number_longer_than_any_event_id_is_a_400_not_a_parse() -> None:
    assert parse_last_event_id("turn_1", "turn_1:" + "9" * MAX_SEQ_DIGITS) == int("9" * MAX_SEQ_DIGITS)
    for digits in (MAX_SEQ_DIGITS + 1, 5000, 100_000):
        with pytest.raises(ServiceError) as refused:
            parse_last_event_id("turn_1", "turn_1:" + "1" * digits)
        assert (refused.value.status, refused.value.code) == (400, "last_event_id_invalid")
        assert f"has {digits} digits" in refused.value.message and "Last-Event-ID" in refused.value.message


OWNERS = st.sampled_from(["turn_1", "turn_2", "", "turn_1:turn_1"])
LAST_EVENT_IDS = st.one_of(
    st.text(),
    st.builds(lambda owner, n: f"{owner}:{'9' * n}", OWNERS, st.integers(0, 6000)),
    st.builds(lambda owner, seq: f"{owner}:{seq}", OWNERS, st.text(st.characters(categories=["Nd", "No"]))),
)


@given(header=LAST_EVENT_IDS)
def test_any_last_event_id_is_a_position_or_a_400(header: str) -> None:
    seq = header.strip().rpartition(":")[2]
    if seq.isascii() and seq.isdigit() and len(seq) > MAX_SEQ_DIGITS:
        with pytest.raises(ServiceError, match="digits"):
            parse_last_event_id("turn_1", header)
    else:
        assert 0 <= parse_last_event_id("turn_1", header) < 10**MAX_SEQ_DIGITS


@given(secret=st.text(min_size=4, max_size=16), data=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4))
def test_a_frame_never_carries_a_registered_secret_in_its_strings(secret: str, data: dict[str, Any]) -> None:
    payload = {**data, "message": f"the backend refused {secret}", "nested": [{"text": secret}]}
    with only_registered(secret):
        line = data_line(encode_frame("turn_1:1", TurnEvent("notice", payload)))
    decoded = json.loads(line)
    assert "***" in decoded["message"]
    assert not any(secret in text for text in strings_of(decoded))


def test_a_frame_without_a_secret_is_encoded_as_before() -> None:
    event = TurnEvent("notice", {"code": "tool_failed", "message": "the backend refused"})
    with only_registered("tok-live-0123"):
        assert encode_frame("turn_1:1", event) == (
            b'id: turn_1:1\nevent: notice\ndata: {"code":"tool_failed","message":"the backend refused"}\n\n'
        )


def strings_of(value: Any) -> list[str]:
    """Every string of decoded JSON, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*strings_of(key), *strings_of(item))]
    if isinstance(value, list):
        return [text for item in value for text in strings_of(item)]
    return []
