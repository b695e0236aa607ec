"""``react.read``: show content by logical path — blocks, files, sources, skills, knowledge.

Reads what is hidden, pruned or capped in full; for a block already visible in full it answers with a
short note instead of repeating it (dedup). ``lines`` selects a 1-based inclusive range of the text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import filetype
from pydantic import BaseModel, ConfigDict, Field

from berth.bundle.skills import Skill
from berth.runtime.attachments import (
    IMAGE_TYPES,
    MediaChoice,
    choose_media,
    document_of,
    model_copy_name,
    model_copy_path,
)
from berth.runtime.extraction import detect_document
from berth.runtime.paths import (
    FilePath,
    KnowledgePath,
    LogicalPathError,
    PlanAliasPath,
    SkillPath,
    SourcesPath,
    ToolCallPath,
    parse_path,
)
from berth.runtime.render import render_block
from berth.runtime.tool_calls import full_result_artifact
from berth.runtime.toolbox import RuntimeTool, ToolNotice, catalog_entries
from berth.runtime.turn import TurnState
from berth.runtime.workspace import WorkspaceError, artifact_path
from berth.storage.conversations import ArtifactWrite, StorageError
from berth.tools.results import SourceCandidate, ToolOutput

MAX_READ_CHARS = 60_000


class ReadParams(BaseModel):
    """Params of ``react.read``."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(min_length=1, max_length=20, description="logical paths (tc:, ar:, fi:, so:, sk:, ks:, …)")
    lines: str | None = Field(None, pattern=r"^\d+-\d+$", description="1-based inclusive line range, e.g. 10-40")


def _slice(text: str, lines: str | None) -> str:
    if lines is None:
        return text
    first, last = (int(part) for part in lines.split("-"))
    selected = text.splitlines()[max(first - 1, 0) : last]
    return "\n".join(f"{number}: {line}" for number, line in enumerate(selected, start=max(first, 1)))


async def _read_one(path: str, state: TurnState, lines: str | None, sources: list[SourceCandidate]) -> str:
    try:
        parsed = parse_path(path, conversation_id=state.scope.conversation_id)
    except LogicalPathError as error:
        raise ToolNotice(error.code, str(error)) from None
    if isinstance(parsed, FilePath):
        try:
            if (
                parsed.turn_id == state.turn_id
                and parsed.area == "attachments"
                and parsed.rel in state.workspace.attachments
            ):
                data = state.workspace.attachments[parsed.rel]
            elif parsed.turn_id == state.turn_id and parsed.area in ("files", "outputs"):
                data = state.workspace.read(parsed.area, parsed.rel)
            else:
                data = await state.workspace.read_committed(parsed.turn_id, parsed.area, parsed.rel)
        except WorkspaceError as error:
            raise ToolNotice("read_paths_missing", str(error)) from None
        if detect_document(data) is not None:  # a PDF or Office file: its extracted text, by line range
            extracted = await asyncio.to_thread(document_of, data)
            assert extracted is not None
            if not extracted.text:
                return f"{path}: {extracted.notice or 'no text in it'}"
            notice = f"[{extracted.notice}]\n" if extracted.notice else ""
            return notice + _slice(extracted.text, lines)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # an image or another binary file: never shown as mangled text
            kind = filetype.guess_mime(data) or "binary"
            if kind in IMAGE_TYPES and state.model is not None and state.model.reads("image"):
                if state.reopened_media:
                    return f"{path}: ({kind}, {len(data)} bytes) an image; read one image per react.read call"
                media = await asyncio.to_thread(choose_media, kind, data, state.model)
                if media.kind == "image":
                    return await _show_image(path, kind, data, media, state)
                return f"{path}: ({kind}, {len(data)} bytes) an image you cannot see here: {media.reason}"
            return f"{path}: ({kind}, {len(data)} bytes) a binary file; it has no text to show"
        return _slice(text, lines)
    if isinstance(parsed, SourcesPath):
        rows = state.sources.select(parsed)
        if not rows:
            raise ToolNotice("read_paths_missing", f"{path}: no such sources")
        return "\n\n".join(f"[S:{row.sid}] {row.title or row.url}\n{row.url}\n{row.text}" for row in rows)
    if isinstance(parsed, SkillPath):
        skill = state.bundle.skills.get(parsed.skill_id)
        if skill is None:
            known = ", ".join(sorted(state.bundle.skills)) or "none"
            raise ToolNotice("read_paths_missing", f"{path}: no skill '{parsed.skill_id}' (skills: {known})")
        for row in skill.sources:
            if isinstance(row, dict) and row.get("url"):
                sources.append(
                    SourceCandidate(url=str(row["url"]), title=str(row.get("title", "")), source_type="manual")
                )
        if parsed.file:
            target = (skill.folder / parsed.file).resolve()
            if not target.is_relative_to(skill.folder.resolve()) or not target.is_file():
                raise ToolNotice("read_paths_missing", f"{path}: no such file in the skill")
            return _slice(target.read_text(encoding="utf-8"), lines)
        return _slice(f"# Skill {skill.id}\n{skill.description}\n\n{skill.instructions}", lines) + _skill_scope(
            skill, state
        )
    if isinstance(parsed, KnowledgePath):
        return await _read_knowledge(path, parsed, state, lines, sources)
    if isinstance(parsed, PlanAliasPath):
        block = state.plan_book().resolve(parsed)
        if block is None:
            raise ToolNotice("read_paths_missing", f"{path}: no such plan")
        return render_block(block)
    full = state.full_results.get(path)
    if full is None and isinstance(parsed, ToolCallPath) and parsed.part == "result":
        full = await _stored_result(state, parsed)
    if full is not None:
        return _slice(full, lines)
    indices = state.timeline.indices_of(path)
    if not indices:
        raise ToolNotice("read_paths_missing", f"{path}: nothing on the timeline has this path")
    blocks = [state.timeline.blocks[i] for i in indices]
    fully_visible = (
        all(not block.hidden and block.turn_id not in state.pruned_turns for block in blocks)
        and min(indices) >= state.visible_from
    )
    if lines is None and fully_visible:
        return f"{path} is already shown in full above; not repeated"
    return _slice(
        "\n\n".join(render_block(block.model_copy(update={"hidden": False, "replacement": None})) for block in blocks),
        lines,
    )


async def _stored_result(state: TurnState, parsed: ToolCallPath) -> str | None:
    """The whole text of a capped result kept among its turn's files (an earlier turn's, or this one's before a
    resume); None when it was not capped."""
    try:
        data = await state.workspace.handle.read_artifact(full_result_artifact(parsed.turn_id, parsed.call_id))
    except StorageError:
        return None
    return data.decode("utf-8", errors="replace")


async def _show_image(path: str, kind: str, data: bytes, media: MediaChoice, state: TurnState) -> str:
    """Show an image again after the read's result: the file itself, or (over the model's limits) its downscaled
    copy, stored with this turn at once so that any process that renders the turn finds it."""
    fitted = media.fitted
    if fitted is None:
        state.media_shelf[path] = data
        state.reopened_media.append((path, kind))
        return f"{path}: ({kind}, {len(data)} bytes) shown to you again as an image, after this result"
    copy_path = model_copy_path(state.turn_id, fitted)
    state.media_shelf[copy_path] = fitted.data
    if state.store_files is not None:
        stored = artifact_path(state.turn_id, "attachments", model_copy_name(fitted))
        await state.store_files((ArtifactWrite(stored, fitted.data),))
    else:
        state.model_copies[copy_path] = fitted.data
    state.reopened_media.append((copy_path, fitted.mime))
    return (
        f"{path}: ({kind}, {len(data)} bytes) shown to you again as an image, after this result, downscaled to "
        f"{fitted.width}x{fitted.height} ({fitted.mime}, {len(fitted.data)} bytes): {media.reason}"
    )


def _skill_scope(skill: Skill, state: TurnState) -> str:
    """Admit the skill's tools for the rest of the turn and say what it brought: tools and knowledge spaces."""
    notes = []
    spaces = [space for space in skill.knowledge if space in state.bundle.knowledge]
    if spaces:
        names = ", ".join(f"'{space}'" for space in spaces)
        notes.append(f"This skill's knowledge: react.search_knowledge with space {names}.")
    added = state.toolbox.widen(skill.tools) if state.toolbox is not None else []
    if added:
        notes.append("Tools this skill adds for the rest of the turn:\n\n" + catalog_entries(added))
    return "".join(f"\n\n{note}" for note in notes)


async def _read_knowledge(
    path: str, parsed: KnowledgePath, state: TurnState, lines: str | None, sources: list[SourceCandidate]
) -> str:
    """A chunk (``ks:<space>/<file>#<anchor>``, all its parts) or a whole file of a knowledge space."""
    index = state.bundle.knowledge.get(parsed.space)
    if index is None:
        raise ToolNotice("read_paths_missing", f"{path}: no knowledge space '{parsed.space}'")
    file, _, anchor = parsed.rel.partition("#")
    await index.wait_first_index(index.first_index_wait_s)
    rows = await index.read(file, anchor or None)
    if not rows:
        what = f"no chunk '#{anchor}' in {file}" if anchor else "no such file in the space"
        raise ToolNotice("read_paths_missing", f"{path}: {what}")
    text = "\n".join(row.text for row in rows)
    title = rows[0].title
    sources.append(SourceCandidate(url=path, title=title, text=text, source_type="kb"))
    header = f"[{title}, lines {rows[0].first_line}-{rows[-1].last_line}]\n" if anchor else ""
    return header + _slice(text, lines)


async def run_read(params: BaseModel, state: TurnState) -> Any:
    """Read every path; missing ones are reported together, the rest are still shown."""
    assert isinstance(params, ReadParams)
    sections: list[str] = []
    missing: list[str] = []
    sources: list[SourceCandidate] = []
    for path in params.paths:
        try:
            text = await _read_one(path, state, params.lines, sources)
        except ToolNotice as notice:
            if notice.code != "read_paths_missing" or len(params.paths) == 1:
                raise
            missing.append(notice.message)
            continue
        sections.append(f"=== {path}\n{text[:MAX_READ_CHARS]}")
    if missing and not sections:
        raise ToolNotice("read_paths_missing", "; ".join(missing))
    if missing:
        sections.append("missing: " + "; ".join(missing))
    return ToolOutput(value="\n\n".join(sections), sources=sources)


def read_tool() -> RuntimeTool:
    """``react.read``."""
    return RuntimeTool(
        tool_id="react.read",
        description=(
            "Show content by logical path: tool results (tc:), records (ar:), files (fi:), sources (so:), "
            "skills (sk:, also adds their sources to the pool), knowledge (ks:). Re-opens hidden, pruned and "
            "capped content; `lines` selects a range."
        ),
        params_model=ReadParams,
        run=run_read,
        read_only=True,
    )


__all__ = ["ReadParams", "read_tool"]
