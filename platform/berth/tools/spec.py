"""``@tool``: a typed (sync or async) function becomes a tool spec with a JSON Schema for its params.

>>> @tool
... def greet(name: str, excited: bool = False) -> str:
...     '''Greet someone by name.
...
...     Args:
...         name: who to greet.
...         excited: end with an exclamation mark.
...     '''
...     return f"Hello, {name}" + ("!" if excited else ".")
>>> tool_spec_of(greet).input_schema["properties"]["name"]["description"]
'who to greet.'
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model

TOOL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_SPEC_ATTRIBUTE = "__berth_tool__"

Function = TypeVar("Function", bound=Callable[..., Any])


class CoroutineRunner(Protocol):
    """Runs a coroutine somewhere (another event loop) and awaits its result."""

    def __call__(self, coroutine: Coroutine[Any, Any, Any], *, what: str = "") -> Awaitable[Any]:
        """Run ``coroutine``; ``what`` names it in logs."""
        ...


class ThreadRunner(Protocol):
    """Runs a sync function in a thread (a bundle's own tool threads) and awaits its result."""

    def __call__(self, function: Callable[..., Any], arguments: Mapping[str, Any], *, what: str = "") -> Awaitable[Any]:
        """Call ``function(**arguments)`` in a thread; ``what`` names the call in logs and refusals."""
        ...


class ToolDefinitionError(TypeError):
    """A function cannot be a tool; the message names the function, its file and line."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool built from a function: its name, description, params model and how to call it."""

    name: str
    description: str
    params_model: type[BaseModel]
    function: Callable[..., Any] = field(repr=False)
    read_only: bool = False
    timeout_s: float | None = None
    runner: CoroutineRunner | None = field(default=None, repr=False, compare=False)
    """Where an async function's coroutine runs: a bundle generation's own loop (see
    :class:`~berth.host.bundle_loop.BundleLoop`); None runs it on the caller's loop (the host's own tools)."""
    threads: ThreadRunner | None = field(default=None, repr=False, compare=False)
    """Where a sync function runs: its bundle's tool threads for the caller's tenant (see
    :mod:`berth.tools.threads`); None runs it on the event loop's default executor (a spec no host serves)."""

    @property
    def is_async(self) -> bool:
        """True when the function is a coroutine function (called on the event loop)."""
        return inspect.iscoroutinefunction(self.function)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the params (what a model or an MCP client sees)."""
        schema = self.params_model.model_json_schema()
        schema.pop("title", None)
        return schema

    @property
    def location(self) -> str:
        """``file:line`` of the function's definition."""
        code = getattr(self.function, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "<unknown>"

    def validate_params(self, params: Mapping[str, Any]) -> BaseModel:
        """Validate ``params`` against the params model (raises pydantic's ``ValidationError``)."""
        return self.params_model.model_validate(dict(params))

    async def invoke(self, params: Mapping[str, Any]) -> Any:
        """Validate ``params`` and call the function within its timeout; a sync function runs in a worker thread."""
        call = self.call(self.validate_params(params))
        if self.timeout_s is None:
            return await call
        return await asyncio.wait_for(call, self.timeout_s)

    def call(self, validated: BaseModel) -> Awaitable[Any]:
        """Call the function with params already validated by :meth:`validate_params`, without a timeout.

        For a caller that validates first and applies the timeout itself (the runtime does both).
        """
        arguments = {name: getattr(validated, name) for name in self.params_model.model_fields}
        if self.is_async:
            coroutine = cast(Callable[..., Coroutine[Any, Any, Any]], self.function)(**arguments)
            return self.runner(coroutine, what=f"tool '{self.name}'") if self.runner is not None else coroutine
        if self.threads is not None:
            return self.threads(self.function, arguments, what=f"tool '{self.name}'")
        return asyncio.to_thread(self.function, **arguments)

    def running_on(self, runner: CoroutineRunner | None, threads: ThreadRunner | None = None) -> ToolSpec:
        """This spec with its coroutines run by ``runner`` and its sync function in ``threads`` (None: as it was)."""
        return replace(self, runner=runner or self.runner, threads=threads or self.threads)


@overload
def tool(function: Function, /) -> Function: ...


@overload
def tool(
    *, name: str | None = None, read_only: bool = False, timeout_s: float | None = None
) -> Callable[[Function], Function]: ...


def tool(
    function: Function | None = None,
    /,
    *,
    name: str | None = None,
    read_only: bool = False,
    timeout_s: float | None = None,
) -> Function | Callable[[Function], Function]:
    """Mark a typed function as a tool; usable bare (``@tool``) or with options (``@tool(read_only=True)``).

    Every parameter needs a type annotation; descriptions come from the docstring (Google, reST or
    numpydoc style). ``read_only`` tools may run together under ``multi_action: safe_fanout``. The
    function itself is returned unchanged (still callable in tests) with its spec attached.
    """

    def decorate(target: Function) -> Function:
        spec = build_tool_spec(target, name=name, read_only=read_only, timeout_s=timeout_s)
        setattr(target, _SPEC_ATTRIBUTE, spec)
        return target

    return decorate(function) if function is not None else decorate


def tool_spec_of(candidate: Any) -> ToolSpec | None:
    """The :class:`ToolSpec` attached to a ``@tool`` function (None for anything else)."""
    spec = getattr(candidate, _SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, ToolSpec) else None


def build_tool_spec(
    function: Callable[..., Any], *, name: str | None = None, read_only: bool = False, timeout_s: float | None = None
) -> ToolSpec:
    """Build a :class:`ToolSpec` from ``function``'s signature and docstring."""
    where = _location(function)
    tool_name = name or function.__name__
    if not re.fullmatch(TOOL_NAME_PATTERN, tool_name):
        raise ToolDefinitionError(f"{where}: tool name '{tool_name}' must match {TOOL_NAME_PATTERN}")
    doc = docstring_parser.parse(inspect.getdoc(function) or "")
    descriptions = {param.arg_name: (param.description or "").strip() for param in doc.params}
    try:
        hints = get_type_hints(function)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: cannot resolve the type hints of '{tool_name}': {exc}") from None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: tool '{tool_name}' may not take *args or **kwargs")
        if parameter.name not in hints:
            raise ToolDefinitionError(f"{where}: parameter '{parameter.name}' of tool '{tool_name}' needs a type")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (
            hints[parameter.name],
            Field(default, description=descriptions.get(parameter.name) or None),
        )
    description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part).strip()
    if not description:
        raise ToolDefinitionError(f"{where}: tool '{tool_name}' needs a docstring saying what it does")
    params_model = create_model(f"{tool_name}_params", __config__=ConfigDict(extra="forbid"), **fields)
    try:
        params_model.model_json_schema()
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: the params of tool '{tool_name}' have no JSON Schema: {exc}") from None
    return ToolSpec(
        name=tool_name,
        description=description,
        params_model=params_model,
        function=function,
        read_only=read_only,
        timeout_s=timeout_s,
    )


def _location(function: Callable[..., Any]) -> str:
    code = getattr(function, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(function)
