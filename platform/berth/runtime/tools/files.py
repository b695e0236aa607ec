"""File tools of the turn's workspace: ``react.write``, ``react.patch``, ``react.pull``, ``react.checkout``,
``react.rg``. Paths are ``files/<rel>`` or ``outputs/<rel>`` of the current turn; history is ``fi:``."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.runtime.patching import PatchError, apply_unified_diff
from berth.runtime.paths import FilePath, LogicalPathError, parse_path
from berth.runtime.toolbox import RuntimeTool, ToolNotice
from berth.runtime.turn import TurnState
from berth.runtime.workspace import Area, WorkspaceError, safe_relative_path
from berth.tools.results import ToolOutput


def _split(path: str) -> tuple[Area, str]:
    area, _, relative = path.partition("/")
    if area not in ("files", "outputs") or not relative:
        raise ToolNotice("unsafe_path", f"{path!r}: write under files/<path> (work files) or outputs/<path> (results)")
    try:
        return area, safe_relative_path(relative)  # type: ignore[return-value]
    except WorkspaceError as error:
        raise ToolNotice(error.code, str(error)) from None


class WriteParams(BaseModel):
    """Params of ``react.write``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="files/<rel> or outputs/<rel> of the current turn")
    content: str
    channel: Literal["canvas", "timeline_text", "internal"] = "internal"
    kind: Literal["display", "file"] = "file"


async def run_write(params: BaseModel, state: TurnState) -> Any:
    """Write a file of the turn."""
    assert isinstance(params, WriteParams)
    area, relative = _split(params.path)
    try:
        logical = state.workspace.write(area, relative, params.content.encode("utf-8"))
    except WorkspaceError as error:
        raise ToolNotice(error.code, str(error)) from None
    lines = params.content.count("\n") + (0 if params.content.endswith("\n") else 1)
    return ToolOutput(
        value={"path": logical, "bytes": len(params.content.encode()), "lines": lines, "channel": params.channel},
        summary=f"wrote {logical}",
    )


class PatchParams(BaseModel):
    """Params of ``react.patch``: a unified diff, or the full new content."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="files/<rel> or outputs/<rel> of the current turn")
    diff: str | None = Field(None, description="a unified diff (@@ hunks)")
    content: str | None = Field(None, description="the full replacement content")

    @model_validator(mode="after")
    def _one_change(self) -> PatchParams:
        if (self.diff is None) == (self.content is None):
            raise ValueError("give exactly one of 'diff' or 'content'")
        return self


async def run_patch(params: BaseModel, state: TurnState) -> Any:
    """Patch a file of the turn (check it out or pull it first when it comes from an earlier turn)."""
    assert isinstance(params, PatchParams)
    area, relative = _split(params.path)
    try:
        current = state.workspace.read(area, relative).decode("utf-8")
    except WorkspaceError as error:
        raise ToolNotice(error.code, f"{error}; react.checkout or react.write it first") from None
    if params.content is not None:
        updated = params.content
    else:
        try:
            updated = apply_unified_diff(current, params.diff or "")
        except PatchError as error:
            raise ToolNotice(error.code, str(error)) from None
    logical = state.workspace.write(area, relative, updated.encode("utf-8"))
    return ToolOutput(value={"path": logical, "lines": len(updated.splitlines())}, summary=f"patched {logical}")


class PullParams(BaseModel):
    """Params of ``react.pull``."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(min_length=1, max_length=50, description="fi:<turn>.files/<rel> of earlier turns")


def _historical(path: str, state: TurnState) -> FilePath:
    try:
        parsed = parse_path(path, conversation_id=state.scope.conversation_id)
    except LogicalPathError as error:
        raise ToolNotice(error.code, str(error)) from None
    if not isinstance(parsed, FilePath) or parsed.turn_id == state.turn_id or not parsed.rel:
        raise ToolNotice("unsafe_path", f"{path!r} is not a file of an earlier turn (fi:<turn>.files/<rel>)")
    return parsed


async def run_pull(params: BaseModel, state: TurnState) -> Any:
    """Bring historical files in as read-only copies (searchable with react.rg, readable by path)."""
    assert isinstance(params, PullParams)
    pulled = []
    for path in params.paths:
        parsed = _historical(path, state)
        try:
            state.pulled[path] = await state.workspace.read_committed(parsed.turn_id, parsed.area, parsed.rel)
        except WorkspaceError as error:
            raise ToolNotice("read_paths_missing", str(error)) from None
        pulled.append({"path": path, "bytes": len(state.pulled[path])})
    return ToolOutput(value={"pulled": pulled}, summary=f"pulled {len(pulled)} file(s)")


class CheckoutParams(BaseModel):
    """Params of ``react.checkout``."""

    model_config = ConfigDict(extra="forbid")

    turn_id: str = Field(description="the earlier turn whose files/ to bring back")
    mode: Literal["replace", "overlay"] = "overlay"
    paths: list[str] | None = Field(None, description="only these files/<rel> (default: all)")


async def run_checkout(params: BaseModel, state: TurnState) -> Any:
    """Make an earlier turn's ``files/`` the current workspace (``replace``) or lay them over it (``overlay``)."""
    assert isinstance(params, CheckoutParams)
    manifest = await state.workspace.committed_manifest(params.turn_id)
    if not manifest.get("files"):
        raise ToolNotice("read_paths_missing", f"turn {params.turn_id} has no stored files/")
    wanted = {safe_relative_path(p.removeprefix("files/")) for p in params.paths} if params.paths else None
    if params.mode == "replace":
        for key in [key for key in state.workspace.files if key[0] == "files"]:
            del state.workspace.files[key]
    restored = []
    for relative in manifest.get("files", []):
        if wanted is not None and relative not in wanted:
            continue
        data = await state.workspace.read_committed(params.turn_id, "files", relative)
        restored.append(state.workspace.write("files", relative, data))
    if wanted is not None and len(restored) < len(wanted):
        missing = sorted(wanted - {p.split(".files/", 1)[1] for p in restored})
        raise ToolNotice("read_paths_missing", f"not in turn {params.turn_id}: {', '.join(missing)}")
    return ToolOutput(value={"restored": restored, "mode": params.mode}, summary=f"checked out {len(restored)} file(s)")


class RgParams(BaseModel):
    """Params of ``react.rg``."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, description="a Python regular expression")
    max_matches: int = Field(50, ge=1, le=500)
    ignore_case: bool = False


async def run_rg(params: BaseModel, state: TurnState) -> Any:
    """Search the turn's files and the pulled copies line by line."""
    assert isinstance(params, RgParams)
    try:
        regex = re.compile(params.pattern, re.IGNORECASE if params.ignore_case else 0)
    except re.error as error:
        raise ToolNotice("tool_params_invalid", f"bad pattern: {error}") from None
    documents = {f"fi:{state.turn_id}.{area}/{rel}": data for (area, rel), data in state.workspace.files.items()}
    documents.update(state.pulled)
    matches = []
    for path in sorted(documents):
        for number, line in enumerate(documents[path].decode("utf-8", errors="replace").splitlines(), start=1):
            if regex.search(line):
                matches.append(f"{path}:{number}: {line[:300]}")
                if len(matches) >= params.max_matches:
                    return ToolOutput(value="\n".join(matches) + "\n(more matches not shown)")
    return ToolOutput(value="\n".join(matches) or "no matches", summary=f"{len(matches)} match(es)")


def write_tool() -> RuntimeTool:
    """``react.write``."""
    return RuntimeTool(
        "react.write", "Write a file of this turn (files/<rel> or outputs/<rel>).", WriteParams, run_write
    )


def patch_tool() -> RuntimeTool:
    """``react.patch``."""
    return RuntimeTool(
        "react.patch",
        "Change a file of this turn with a unified diff or a full replacement; a hunk that does not match "
        "is reported with the expected and actual lines.",
        PatchParams,
        run_patch,
    )


def pull_tool() -> RuntimeTool:
    """``react.pull``."""
    return RuntimeTool(
        "react.pull", "Bring files of earlier turns (fi:) in as read-only copies.", PullParams, run_pull, read_only=True
    )


def checkout_tool() -> RuntimeTool:
    """``react.checkout``."""
    return RuntimeTool(
        "react.checkout",
        "Restore an earlier turn's files/ into this turn's workspace (replace, or overlay on what is there).",
        CheckoutParams,
        run_checkout,
    )


def rg_tool() -> RuntimeTool:
    """``react.rg``."""
    return RuntimeTool(
        "react.rg", "Regex search over this turn's files and pulled files.", RgParams, run_rg, read_only=True
    )
