"""Blocks are frozen records with UTC timestamps and paths consistent with their turn and call."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue, ValidationError

from berth.runtime.blocks import Block, BlockType, format_utc, make_block
from berth.runtime.paths import RecordPath, ToolCallPath

BERLIN_WINTER = timezone(timedelta(hours=1))


def prompt_block(**overrides: object) -> Block:
    fields: dict[str, object] = {
        "type": "user.prompt",
        "path": "ar:turn_4.user.prompt",
        "turn_id": "turn_4",
        "ts": datetime(2026, 3, 1, 10, 0, tzinfo=UTC),
        "author": "user",
        "text": "hello",
    }
    fields.update(overrides)
    return Block.model_validate(fields)


def test_block_is_frozen() -> None:
    block = prompt_block()
    with pytest.raises(ValidationError):
        block.text = "changed"  # type: ignore[misc]


def test_timestamp_with_an_offset_is_stored_as_the_same_instant_in_utc() -> None:
    block = prompt_block(ts=datetime(2026, 3, 1, 11, 0, tzinfo=BERLIN_WINTER))
    assert block.ts == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert block.ts.tzinfo is UTC


def test_timestamp_serializes_as_iso_8601_with_z_suffix() -> None:
    assert prompt_block().model_dump(mode="json")["ts"] == "2026-03-01T10:00:00Z"
    precise = prompt_block(ts=datetime(2026, 3, 1, 10, 0, 0, 1500, tzinfo=UTC))
    assert precise.model_dump(mode="json")["ts"] == "2026-03-01T10:00:00.001500Z"


def test_iso_string_with_z_is_parsed_as_utc() -> None:
    assert prompt_block(ts="2026-03-01T10:00:00Z").ts == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize("naive", [datetime(2026, 3, 1, 10, 0), "2026-03-01T10:00:00"])
def test_naive_timestamp_is_refused(naive: object) -> None:
    with pytest.raises(ValidationError, match="timezone"):
        prompt_block(ts=naive)


def test_format_utc_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="timezone"):
        format_utc(datetime(2026, 3, 1))


def test_json_round_trip_gives_an_equal_block() -> None:
    block = prompt_block(meta={"tags": ["a", 1]})
    assert Block.model_validate_json(block.model_dump_json()) == block


def test_turn_id_is_the_one_field_naming_the_turn() -> None:
    fields = set(Block.model_fields)
    assert "turn_id" in fields
    assert not fields & {"turn", "turnId", "turn_ref"}


def test_path_of_another_turn_is_refused() -> None:
    with pytest.raises(ValidationError, match="belongs to 'turn_5'"):
        prompt_block(path="ar:turn_5.user.prompt")


def test_invalid_path_is_refused_with_its_code() -> None:
    with pytest.raises(ValidationError, match="unsafe_path"):
        prompt_block(path="fi:turn_4.files/../secrets")


def test_tool_call_path_fills_in_the_call_id() -> None:
    block = prompt_block(type=BlockType.REACT_TOOL_RESULT, path="tc:turn_4.c3.result", author="tool")
    assert block.call_id == "c3"


def test_tool_call_path_and_a_different_call_id_are_refused() -> None:
    with pytest.raises(ValidationError, match="names call 'c3'"):
        prompt_block(type=BlockType.REACT_TOOL_RESULT, path="tc:turn_4.c3.result", call_id="c4")


def test_block_carries_at_most_one_kind_of_content() -> None:
    with pytest.raises(ValidationError, match="at most one"):
        prompt_block(data={"a": 1})


def test_hidden_block_needs_a_replacement_and_only_hidden_blocks_have_one() -> None:
    with pytest.raises(ValidationError, match="needs a replacement"):
        prompt_block(hidden=True)
    with pytest.raises(ValidationError, match="only a hidden block"):
        prompt_block(replacement="gone")
    assert prompt_block(hidden=True, replacement="long log, hidden").hidden


def test_unknown_fields_and_types_are_refused() -> None:
    with pytest.raises(ValidationError):
        prompt_block(colour="red")
    with pytest.raises(ValidationError):
        prompt_block(type="user.shout")


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    offset_minutes=st.integers(-14 * 60, 14 * 60),
)
def test_a_block_serializes_its_timestamp_exactly_as_format_utc_does(moment: datetime, offset_minutes: int) -> None:
    aware = moment.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    block = prompt_block(ts=aware)
    assert json.loads(block.model_dump_json())["ts"] == format_utc(aware)
    assert Block.model_validate_json(block.model_dump_json()).ts == aware


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3) | st.tuples(inner)
    ),  # not JSON as it is: pydantic refuses it, and so must make_block
    max_leaves=8,
)
_ABSENT = object()
_MAYBE = st.just(_ABSENT)  # the field is not given


@settings(max_examples=400, deadline=None)
@given(
    tool_call=st.booleans(),
    offset_minutes=st.sampled_from([None, 0, 0, 90]),
    text=_MAYBE | st.none() | st.text(max_size=10),
    data=_MAYBE | _JSON,
    meta=_MAYBE | st.dictionaries(st.text(max_size=5), _JSON, max_size=3) | st.none(),
    call_id=_MAYBE | st.none() | st.sampled_from(["c3", "c4", "c 3", "c3\n", ""]),
    author=st.sampled_from(["assistant", "tool", "robot"]),
)
def test_make_block_makes_what_validating_the_same_fields_makes(
    tool_call: bool,
    offset_minutes: int | None,
    text: object,
    data: object,
    meta: object,
    call_id: object,
    author: str,
) -> None:
    """The runtime's fast constructor gives the very block ``Block(...)`` gives, or refuses what it refuses."""
    path = ToolCallPath("turn_4", "c3", "result") if tool_call else RecordPath("turn_4", "react.notes.c3")
    zone = None if offset_minutes is None else timezone(timedelta(minutes=offset_minutes))
    ts = datetime(2026, 3, 1, 10, 0, 0, 250, tzinfo=UTC if offset_minutes == 0 else zone)
    content = {
        name: value
        for name, value in (("text", text), ("data", data), ("meta", meta), ("call_id", call_id))
        if value is not _ABSENT
    }
    block_type = BlockType.REACT_TOOL_RESULT if tool_call else BlockType.REACT_NOTES
    try:
        expected = Block(type=block_type, path=str(path), turn_id="turn_4", ts=ts, author=author, **content)
    except ValidationError:
        with pytest.raises(ValidationError):
            make_block(block_type, path, ts, author, **content)  # type: ignore[arg-type]
        return
    made = make_block(block_type, path, ts, author, **content)  # type: ignore[arg-type]
    assert made == expected
    assert made.model_fields_set == expected.model_fields_set
    assert made.model_dump_json() == expected.model_dump_json()
    assert list(made.__dict__) == list(expected.__dict__)


def test_make_block_copies_the_json_it_is_given() -> None:
    """As validation does: changing the caller's dict afterwards does not change the block."""
    params: dict[str, JsonValue] = {"query": ["ledger"]}
    block = make_block(
        BlockType.REACT_TOOL_CALL,
        ToolCallPath("turn_4", "c3", "call"),
        datetime(2026, 3, 1, 10, 0, tzinfo=UTC),
        "assistant",
        data={"tool_id": "bench.lookup", "params": params},
    )
    params["query"] = ["changed"]
    assert block.data == {"tool_id": "bench.lookup", "params": {"query": ["ledger"]}}
    assert block.call_id == "c3"
