"""The files of a knowledge space: what an indexer lists before anything is read.

Listing is cheap (a directory walk and a ``stat`` per file); the index compares each file's ``stat`` key
with what it stored and reads, hashes and re-chunks only files whose key changed (and whose content
then really differs). :class:`FileTree` is the walk every folder-based indexer shares.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_EXCLUDED_DIRS",
    "DEFAULT_MAX_FILE_BYTES",
    "ROOT_EXCLUDED_DIRS",
    "Exclusion",
    "FileTree",
    "SourceFile",
]

DEFAULT_MAX_FILE_BYTES: Final = 2 * 1024 * 1024
"""Files larger than this are listed but skipped (recorded as ``too large``), never read."""

DEFAULT_EXCLUDED_DIRS: Final = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", ".idea", ".vscode"}
)  # fmt: skip
"""Folders left out at any depth."""
ROOT_EXCLUDED_DIRS: Final = frozenset({"dist", "build"})
"""Folders left out only at the space's root (build output there; ``doc/build/`` deeper down is often sources)."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """What a listing left out: a folder (``path`` ends with '/') or a kind of file (``path`` is '*'), why, and
    how many files."""

    path: str
    reason: str
    files: int

    def as_list(self) -> list[str | int]:
        """``[path, reason, files]`` (how a store keeps it, as JSON)."""
        return [self.path, self.reason, self.files]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of a space, as listed.

    :ivar path: '/'-separated path inside the space (what ``ks:<space>/<path>`` names).
    :ivar stat: a cheap change key (size and modification time); the empty string means "unknown":
        the file is read and hashed on every refresh.
    :ivar size: its size in bytes.
    :ivar location: where it is on disk, or None for a file whose bytes are carried in ``data``.
    :ivar data: the file's bytes, for indexers that produce content rather than list files.
    """

    path: str
    stat: str
    size: int
    location: Path | None = None
    data: bytes | None = field(default=None, repr=False)

    def read(self) -> bytes:
        """The file's bytes."""
        if self.data is not None:
            return self.data
        assert self.location is not None, f"{self.path}: neither data nor a location"
        return self.location.read_bytes()


@dataclass(frozen=True)
class FileTree:
    """The files under ``root`` that match ``include`` (glob patterns on the relative path, or on the
    file name when a pattern has no '/'), minus ``exclude`` patterns and excluded folders.

    Hidden files and folders (a name starting with '.') are left out unless a pattern names them.
    Symbolic links are not followed out of ``root``.
    """

    root: Path
    include: Sequence[str] = ("*",)
    exclude: Sequence[str] = ()
    excluded_dirs: frozenset[str] = DEFAULT_EXCLUDED_DIRS
    root_excluded_dirs: frozenset[str] = ROOT_EXCLUDED_DIRS

    def files(self) -> Iterator[SourceFile]:
        """Every matching file, sorted by path (raises ``FileNotFoundError`` when ``root`` is missing)."""
        return iter(self.listing()[0])

    def listing(self) -> tuple[list[SourceFile], list[Exclusion]]:
        """Every matching file, sorted by path, and what was left out: each excluded folder with the number of
        files under it, and the count of files left out for each other reason (raises ``FileNotFoundError`` when
        ``root`` is missing)."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"knowledge folder {self.root} does not exist")
        root = self.root.resolve()
        excluded: list[Exclusion] = []
        reasons: dict[str, int] = {}
        found = []
        for rel in sorted(self._walk(root, excluded, reasons)):
            location = root / rel
            try:
                info = location.stat()
            except OSError:
                reasons["unreadable"] = reasons.get("unreadable", 0) + 1
                continue
            found.append(SourceFile(rel, f"{info.st_size}:{info.st_mtime_ns}", info.st_size, location))
        excluded.sort(key=lambda e: e.path)
        excluded.extend(Exclusion("*", reason, count) for reason, count in sorted(reasons.items()) if count)
        return found, excluded

    def _folder_reason(self, name: str, at_root: bool) -> str | None:
        if name in self.excluded_dirs:
            return "excluded folder"
        if at_root and name in self.root_excluded_dirs:
            return "build output at the space root"
        if name.startswith("."):
            return "hidden folder"
        return None

    def _walk(self, root: Path, excluded: list[Exclusion], reasons: dict[str, int]) -> Iterable[str]:
        for folder, dirs, names in os.walk(root):
            base = Path(folder)
            kept = []
            for name in dirs:
                reason = self._folder_reason(name, base == root)
                if reason is None:
                    kept.append(name)
                else:
                    rel = (base / name).relative_to(root).as_posix()
                    excluded.append(Exclusion(rel + "/", reason, _count_files(base / name)))
            dirs[:] = kept
            for name in names:
                location = base / name
                if location.is_symlink() and not location.resolve().is_relative_to(root):
                    reasons["link out of the space"] = reasons.get("link out of the space", 0) + 1
                    continue
                rel = location.relative_to(root).as_posix()
                reason = self._file_reason(rel, name)
                if reason is None:
                    yield rel
                else:
                    reasons[reason] = reasons.get(reason, 0) + 1

    def _file_reason(self, rel: str, name: str) -> str | None:
        def matches(pattern: str) -> bool:
            return fnmatch.fnmatch(rel, pattern) if "/" in pattern else fnmatch.fnmatch(name, pattern)

        if name.startswith(".") and not any(p.lstrip("*/").startswith(".") for p in self.include):
            return "hidden file"
        if not any(matches(p) for p in self.include):
            return "not matched by include"
        if any(matches(p) for p in self.exclude):
            return "matched by exclude"
        return None


EXCLUDED_COUNT_TTL_S: Final = 300.0
"""How long an excluded folder's file count is reused: a space is listed every few seconds while it is searched,
and counting ``.venv/`` or ``node_modules/`` again each time made a listing 30x slower (0.93 s against 0.03 s
for a checkout with a 56,675-file ``.venv``)."""
_counted: dict[Path, tuple[float, int, int]] = {}


def _count_files(folder: Path) -> int:
    """The number of files under ``folder`` (links not followed), counted again when the folder's own entries
    changed (its modification time) or :data:`EXCLUDED_COUNT_TTL_S` seconds after the last count (a change
    deeper down)."""
    now = time.monotonic()
    try:
        mtime = folder.stat().st_mtime_ns
    except OSError:
        return 0
    cached = _counted.get(folder)
    if cached is not None and cached[1] == mtime and now - cached[0] < EXCLUDED_COUNT_TTL_S:
        return cached[2]
    count = sum(len(names) for _, _, names in os.walk(folder))
    _counted[folder] = (now, mtime, count)
    return count
