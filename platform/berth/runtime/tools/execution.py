"""``exec.python``: run the program of the ``code`` channel in the isolated executor.

The model writes the program in ``<channel:code>`` and calls ``exec.python`` with a short purpose, the files it
expects under ``OUTPUT_DIR`` and, when the bundle allows several, an exec profile. The program starts in
``WORKDIR``, a copy of this turn's ``files/``; what it writes under ``OUTPUT_DIR`` becomes ``fi:<turn>.outputs/…``
artifacts, and the program itself is kept at ``fi:<turn>.outputs/executed_programs/<exec_id>/main.py``. From the
program, ``from berth_exec import tools; tools.call("<tool id>", …)`` calls this bundle's own tools in the turn's
scope (the supervisor serves them), and ``tools.read("fi:…")`` reads logical paths. The result is the envelope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.config.models.assembly import ExecConfig
from berth.execution.profiles import ExecProfileError, Execution
from berth.execution.supervisor import SupervisorRefusal
from berth.runtime.toolbox import RuntimeTool, ToolBox, ToolNotice
from berth.runtime.turn import TurnState
from berth.runtime.workspace import WorkspaceError, safe_relative_path
from berth.tools.results import ToolOutput

TOOL_ID = "exec.python"


class ExecParams(BaseModel):
    """Params of ``exec.python`` (the program itself comes in the ``code`` channel)."""

    model_config = ConfigDict(extra="forbid")

    purpose: str = Field(min_length=1, max_length=300, description="what the program does, in a sentence")
    outputs: list[str] = Field(
        default_factory=list, max_length=50, description="files the program writes under OUTPUT_DIR (relative paths)"
    )
    profile: str | None = Field(None, description="exec profile, when the bundle allows more than one")


class TurnToolDispatch:
    """Serves the bundle's own tools of this turn (and logical-path reads) to the executor."""

    def __init__(self, toolbox: ToolBox, tool_ids: Collection[str], state: TurnState) -> None:
        self._toolbox = toolbox
        self._tool_ids = frozenset(tool_ids)
        self._state = state

    @property
    def tool_ids(self) -> Collection[str]:
        """The bundle's tools: its ``@tool`` functions and its tool packs' tools."""
        return self._tool_ids

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        """Validate and run a tool exactly as a turn's tool call does (its own timeout too); its value is the
        result."""
        tool = self._toolbox.get(tool_id)
        if tool is None:
            raise SupervisorRefusal("tool_not_allowed", f"{tool_id} is not available in this turn")
        try:
            validated = tool.params_model.model_validate(params)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in error.errors())
            raise SupervisorRefusal("tool_params_invalid", f"params of {tool_id}: {problems}") from None
        run = tool.run(validated, self._state)
        try:
            value = await (asyncio.wait_for(run, tool.timeout_s) if tool.timeout_s else run)
        except ToolNotice as notice:
            raise SupervisorRefusal(notice.code, notice.message) from None
        except TimeoutError:
            raise SupervisorRefusal("tool_timeout", f"{tool_id} did not finish within {tool.timeout_s:g} s") from None
        output = value if isinstance(value, ToolOutput) else ToolOutput(value=value)
        if output.is_error:
            raise SupervisorRefusal("tool_failed", str(output.value))
        return output.value

    async def read(self, path: str) -> str:
        """The text ``react.read`` gives for ``path``."""
        reader = self._toolbox.get("react.read")
        if reader is None:
            raise SupervisorRefusal("read_unavailable", "react.read is not available in this turn")
        try:
            value = await reader.run(reader.params_model.model_validate({"paths": [path]}), self._state)
        except ToolNotice as notice:
            raise SupervisorRefusal(notice.code, notice.message) from None
        output = value if isinstance(value, ToolOutput) else ToolOutput(value=value)
        return output.value if isinstance(output.value, str) else str(output.value)


def exec_tool(
    execution: Execution,
    config: ExecConfig,
    options: Mapping[str, Any],
    toolbox: ToolBox,
    bundle_tool_ids: Collection[str],
) -> RuntimeTool:
    """``exec.python`` for one turn. ``options`` are the bundle's ``ToolPack(id="exec", options={...})`` options:
    ``profile`` (its default) and ``profiles`` (the ones the model may choose)."""
    default_profile = str(options.get("profile") or config.default_profile)
    allowed = {default_profile, *map(str, options.get("profiles", ()))}

    async def run(params: BaseModel, state: TurnState) -> ToolOutput:
        assert isinstance(params, ExecParams)
        code = state.current_code
        if not code or not code.strip():
            raise ToolNotice("exec_code_missing", "exec.python runs the program of <channel:code>; it was empty")
        profile = params.profile or default_profile
        if profile not in allowed:
            choices = ", ".join(sorted(allowed))
            raise ToolNotice(
                "exec_profile_not_allowed", f"profile '{profile}' is not allowed here (allowed: {choices})"
            )
        try:
            backend, limits = execution.backend(config, profile)
        except ExecProfileError as error:
            raise ToolNotice(error.code, error.message) from None
        inputs = [
            (relative, state.workspace.read("files", relative))
            for area, relative, _ in state.workspace.listing()
            if area == "files"
        ]
        # the turn's attachments, read-only at work/<turn>/attachments/<name> (as the model reads their fi: paths)
        attached = [(f"{state.turn_id}/attachments/{name}", data) for name, data in state.workspace.attachments.items()]

        def store(relative: str, data: bytes) -> str:
            try:
                return state.workspace.write("outputs", safe_relative_path(relative), data)
            except WorkspaceError as error:
                return f"(not kept: {error})"

        run = await execution.service.run(
            code,
            backend=backend,
            limits=limits,
            bundle_id=state.bundle.bundle_id,
            dispatch=TurnToolDispatch(toolbox, bundle_tool_ids, state),
            inputs=inputs,
            read_only_inputs=attached,
            store=store,
            supervisor_scope=execution.supervisor_scope(backend, state.scope.tenant, state.scope.project),
        )
        envelope = run.envelope.to_json()
        produced = {artifact.path.rsplit(".outputs/", 1)[-1] for artifact in run.envelope.artifacts}
        missing = [name for name in params.outputs if name not in produced]
        if missing:
            envelope["missing_outputs"] = missing
        summary = run.envelope.report_text.splitlines()[0]
        return ToolOutput(value=envelope, summary=summary, is_error=not run.envelope.ok)

    description = (
        "Run the Python program of <channel:code> in an isolated sandbox (no network, no secrets; limits on time, "
        "memory and processes). It starts in WORKDIR, a copy of this turn's files/; files it writes under "
        "the folder named by the OUTPUT_DIR variable become fi:<turn>.outputs/… artifacts. It may call this "
        "bundle's tools with "
        "`from berth_exec import tools; tools.call('<tool id>', **params)` and read logical paths with "
        "`tools.read('fi:…')`. Returns the envelope: ok, exit_code, error, report_text, artifacts, user_out_tail, "
        "runtime_err_tail."
    )
    return RuntimeTool(TOOL_ID, description, ExecParams, run, timeout_s=None)
