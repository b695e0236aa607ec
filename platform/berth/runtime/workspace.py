"""A turn's workspace: ``turn_<id>/files/…`` (durable work files) and ``turn_<id>/outputs/…`` (produced
artifacts), kept in memory during the turn and written as artifacts with the turn's commit.

Files of earlier turns are read through the conversation handle (``fi:<turn>.files/<rel>``); nothing can
reach outside the conversation: every relative path is checked (no ``..``, no absolute path, no NUL).
"""

from __future__ import annotations

import json
import mimetypes
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from berth.storage.conversations import ArtifactWrite, ConversationHandle, StorageError

Area: TypeAlias = Literal["files", "outputs"]
MAX_WORKSPACE_FILE_BYTES = 8 * 1024 * 1024
MANIFEST_NAME = "manifest.json"


class WorkspaceError(Exception):
    """A workspace operation refused, with a stable code (``unsafe_path``, ``file_missing``, ``file_too_large``)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


def safe_relative_path(path: str) -> str:
    """Normalize a relative path inside an area; raise ``unsafe_path`` for anything that could escape it."""
    if not path or "\x00" in path or path.startswith(("/", "\\")) or ":" in path.split("/")[0]:
        raise WorkspaceError("unsafe_path", f"{path!r} is not a relative path inside the workspace")
    normalized = posixpath.normpath(path.replace("\\", "/"))
    if normalized in (".", "") or normalized.startswith("../") or normalized == ".." or "/../" in f"/{normalized}/":
        raise WorkspaceError("unsafe_path", f"{path!r} leaves the workspace")
    return normalized


def _area(name: str) -> Area | None:
    """The workspace area called ``name`` (None for anything else: attachments, the manifest)."""
    if name == "files":
        return "files"
    if name == "outputs":
        return "outputs"
    return None


def artifact_path(turn_id: str, area: str, relative: str) -> str:
    """Where a workspace file is stored among the conversation's artifacts."""
    return f"{turn_id}/{area}/{relative}"


@dataclass
class Workspace:
    """The current turn's files, plus read access to earlier turns' committed files."""

    turn_id: str
    handle: ConversationHandle
    files: dict[tuple[Area, str], bytes] = field(default_factory=dict)
    attachments: dict[str, bytes] = field(default_factory=dict)
    """The turn's own attachments by name (``fi:<turn>.attachments/<name>``): readable before the commit stores
    them; never written by the turn."""

    def write(self, area: Area, relative: str, data: bytes) -> str:
        """Create or replace a file of this turn; return its ``fi:`` path."""
        relative = safe_relative_path(relative)
        if len(data) > MAX_WORKSPACE_FILE_BYTES:
            raise WorkspaceError(
                "file_too_large", f"{relative} is {len(data)} bytes (limit {MAX_WORKSPACE_FILE_BYTES})"
            )
        self.files[(area, relative)] = data
        return f"fi:{self.turn_id}.{area}/{relative}"

    def outputs(self) -> dict[str, bytes]:
        """This turn's ``outputs/`` files now, by relative path (to compare with later: :meth:`outputs_since`)."""
        return {relative: data for (area, relative), data in self.files.items() if area == "outputs"}

    def outputs_since(self, before: dict[str, bytes]) -> list[tuple[str, str, int]]:
        """``(fi: path, mime, size)`` of each ``outputs/`` file written since ``before`` (programs kept by
        ``exec.python`` under ``executed_programs/`` are left out: they are records, not results)."""
        return [
            (
                f"fi:{self.turn_id}.outputs/{relative}",
                mimetypes.guess_type(relative)[0] or "application/octet-stream",
                len(data),
            )
            for (area, relative), data in self.files.items()
            if area == "outputs" and before.get(relative) is not data and not relative.startswith("executed_programs/")
        ]

    def read(self, area: Area, relative: str) -> bytes:
        """A file of this turn; ``file_missing`` if it was not written."""
        key = (area, safe_relative_path(relative))
        if key not in self.files:
            raise WorkspaceError("file_missing", f"fi:{self.turn_id}.{area}/{key[1]} does not exist in this turn")
        return self.files[key]

    def exists(self, area: Area, relative: str) -> bool:
        """True when this turn has the file."""
        return (area, safe_relative_path(relative)) in self.files

    async def read_committed(self, turn_id: str, area: str, relative: str) -> bytes:
        """A file an earlier turn committed (``fi:<turn_id>.<area>/<relative>``)."""
        relative = safe_relative_path(relative)
        try:
            return await self.handle.read_artifact(artifact_path(turn_id, area, relative))
        except StorageError as exc:
            raise WorkspaceError("file_missing", f"fi:{turn_id}.{area}/{relative} is not stored ({exc.code})") from None

    def listing(self) -> Iterator[tuple[Area, str, int]]:
        """Every file of this turn: area, relative path, size."""
        for (area, relative), data in sorted(self.files.items()):
            yield area, relative, len(data)

    def writes_of(self, paths: Iterable[str]) -> tuple[ArtifactWrite, ...]:
        """The artifact writes of this turn's files at ``fi:`` ``paths`` (those :meth:`outputs_since` named)."""
        prefix = f"fi:{self.turn_id}."
        writes = []
        for path in paths:
            name, _, relative = path.removeprefix(prefix).partition("/")
            area = _area(name)
            if area is not None and (area, relative) in self.files:
                writes.append(ArtifactWrite(artifact_path(self.turn_id, area, relative), self.files[(area, relative)]))
        return tuple(writes)

    async def restore(self) -> None:
        """Take back the files this turn stored before (a turn resumed after its worker died: they were stored as
        they were announced)."""
        for stored in await self.handle.turn_files(self.turn_id):
            name, _, relative = stored.path.removeprefix(f"{self.turn_id}/").partition("/")
            area = _area(name)
            if area is not None and relative:
                self.files[(area, relative)] = stored.data

    def artifact_writes(self) -> tuple[ArtifactWrite, ...]:
        """The files to commit with the turn, plus a manifest listing them (for ``react.checkout``)."""
        writes = [
            ArtifactWrite(artifact_path(self.turn_id, area, relative), data)
            for (area, relative), data in sorted(self.files.items())
        ]
        if writes:
            manifest = {area: sorted(rel for a, rel in self.files if a == area) for area in ("files", "outputs")}
            writes.append(ArtifactWrite(f"{self.turn_id}/{MANIFEST_NAME}", json.dumps(manifest).encode()))
        return tuple(writes)

    async def committed_manifest(self, turn_id: str) -> dict[str, list[str]]:
        """The files an earlier turn committed, by area (empty when it committed none)."""
        try:
            data = await self.handle.read_artifact(f"{turn_id}/{MANIFEST_NAME}")
        except StorageError:
            return {"files": [], "outputs": []}
        manifest: dict[str, list[str]] = json.loads(data)
        return manifest

    def materialize(self, root: Path) -> Path:
        """Write this turn's files under ``root/files`` and ``root/outputs`` (for searching or running code)."""
        for (area, relative), data in self.files.items():
            target = root / area / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return root
