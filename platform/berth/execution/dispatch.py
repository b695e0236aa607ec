"""A bundle's tools in one scope, served to an executor outside a turn (``berth exec run``, the standalone
supervisor). Inside a turn the runtime serves the turn's own toolbox instead
(:class:`berth.runtime.tools.execution.TurnToolDispatch`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from berth.execution.supervisor import SupervisorRefusal
from berth.tools.notices import ToolNotice
from berth.tools.results import ToolOutput
from berth.tools.spec import ToolSpec


class ScopedToolDispatch:
    """Serves tool specs (a bundle's ``@tool`` functions and pack tools in one scope); reads are refused."""

    def __init__(self, specs: Mapping[str, ToolSpec]) -> None:
        self._specs = dict(specs)

    @property
    def tool_ids(self) -> Collection[str]:
        """Every tool id of the scope."""
        return self._specs.keys()

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        """Validate and call one tool within its own timeout; its value is the result."""
        spec = self._specs[tool_id]
        try:
            value = await spec.invoke(params)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in error.errors())
            raise SupervisorRefusal("tool_params_invalid", f"params of {tool_id}: {problems}") from None
        except ToolNotice as notice:  # the bundle's tool threads are stuck: tool_pool_exhausted
            raise SupervisorRefusal(notice.code, notice.message) from None
        output = value if isinstance(value, ToolOutput) else ToolOutput(value=value)
        if output.is_error:
            raise SupervisorRefusal("tool_failed", str(output.value))
        return output.value

    async def read(self, path: str) -> str:
        """Outside a turn there is no conversation to read from."""
        raise SupervisorRefusal("read_unavailable", f"{path}: logical paths are readable only inside a turn")
