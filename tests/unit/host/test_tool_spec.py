"""``@tool``: JSON Schema from signatures and docstrings, validation, sync and async invocation."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from berth import tool
from berth.tools.spec import ToolDefinitionError, build_tool_spec, tool_spec_of


class Point(BaseModel):
    x: int
    y: int


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool(name="where", read_only=True, timeout_s=5)
async def locate(point: Point, unit: Literal["m", "km"] = "m") -> str:
    """Describe a point.

    :param point: coordinates.
    :param unit: distance unit.
    """
    await asyncio.sleep(0)
    return f"{point.x},{point.y} {unit}"


def test_schema_comes_from_the_signature_and_the_docstring() -> None:
    spec = tool_spec_of(add)
    assert spec is not None
    assert spec.description == "Add two numbers."
    assert spec.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer", "title": "A", "description": "the first number."},
            "b": {"type": "integer", "title": "B", "description": "the second number.", "default": 2},
        },
        "required": ["a"],
    }


def test_rest_docstrings_nested_models_and_literals_are_described() -> None:
    spec = tool_spec_of(locate)
    assert spec is not None
    assert spec.name == "where"
    assert spec.read_only
    schema = spec.input_schema
    assert schema["properties"]["unit"]["enum"] == ["m", "km"]
    assert schema["properties"]["point"]["description"] == "coordinates."
    assert "Point" in schema["$defs"]


def test_the_decorated_function_stays_callable() -> None:
    assert add(1, 2) == 3


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[str] = []

    @tool
    def where_am_i() -> str:
        """Name the current thread."""
        seen.append(threading.current_thread().name)
        return "ok"

    spec = tool_spec_of(where_am_i)
    assert spec is not None
    assert await spec.invoke({}) == "ok"
    assert seen != [threading.current_thread().name]


async def test_async_tools_are_awaited_with_validated_params() -> None:
    spec = tool_spec_of(locate)
    assert spec is not None
    assert await spec.invoke({"point": {"x": 1, "y": "2"}, "unit": "km"}) == "1,2 km"


async def test_params_are_validated_before_the_call() -> None:
    spec = tool_spec_of(add)
    assert spec is not None
    with pytest.raises(ValidationError):
        await spec.invoke({"a": "many"})
    with pytest.raises(ValidationError):
        await spec.invoke({"a": 1, "c": 3})


async def test_a_slow_tool_times_out() -> None:
    @tool(timeout_s=0.01)
    async def slow() -> None:
        """Never finishes in time."""
        await asyncio.Event().wait()

    spec = tool_spec_of(slow)
    assert spec is not None
    with pytest.raises(TimeoutError):
        await spec.invoke({})


def test_untyped_parameter_is_refused_with_its_location() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        """Has no types."""

    with pytest.raises(
        ToolDefinitionError, match=r"test_tool_spec\.py:\d+: parameter 'x' of tool 'untyped' needs a type"
    ):
        build_tool_spec(untyped)


def test_a_tool_needs_a_docstring() -> None:
    def bare(x: int) -> int:
        return x

    with pytest.raises(ToolDefinitionError, match="needs a docstring"):
        build_tool_spec(bare)


def test_varargs_are_refused() -> None:
    def variadic(*args: int) -> None:
        """Takes anything."""

    with pytest.raises(ToolDefinitionError, match=r"\*args or \*\*kwargs"):
        build_tool_spec(variadic)


def test_invalid_tool_name_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="tool name 'no spaces'"):
        build_tool_spec(add, name="no spaces")


def test_a_plain_function_has_no_spec() -> None:
    assert tool_spec_of(print) is None
